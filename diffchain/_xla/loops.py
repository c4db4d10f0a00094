"""Sweeps over the points of a chain: a ``lax.scan``, blocked for long chains (:func:`scan_points`). Performance
plumbing only; the recursions that use it are in :mod:`diffchain._solvers`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp



SCAN_BLOCK = 32  # the default block of scan_points: a sweep over 2 * block points or more is a scan over blocks


def scan_points(step, init, xs, reverse=False, unroll=False, block=SCAN_BLOCK):
    """``lax.scan(step, init, xs, reverse=reverse, unroll=unroll)`` over the points of a chain (the leading axis of
    ``xs``); from 2 ``block`` points on, a scan over blocks of ``block`` points, each an inner scan (the first
    n mod ``block`` points a scan of their own); ``block=None``: one scan at any length.

    On one chain, XLA CPU runs a single long scan of the recursions (Part I, and Part II in
    :mod:`diffchain._solvers.recursive_solver`) more slowly per point than a scan over blocks of points. The Thomas scans of
    :mod:`diffchain._solvers.banded` and the rigid-link sweeps (:func:`abcd_backward_inertial`) do not slow down
    and keep one scan; under ``vmap`` blocking makes no difference."""
    n = jax.tree.leaves(xs)[0].shape[0]
    if block is None or n < 2 * block:
        return jax.lax.scan(step, init, xs, reverse=reverse, unroll=unroll)
    nb, h = divmod(n, block)
    head = jax.tree.map(lambda x: x[:h], xs)
    blocks = jax.tree.map(lambda x: x[h:].reshape((nb, block) + x.shape[1:]), xs)

    def one_block(c, xb):
        return jax.lax.scan(step, c, xb, reverse=reverse)

    if reverse:
        c, yb = jax.lax.scan(one_block, init, blocks, reverse=True)
        c, yh = jax.lax.scan(step, c, head, reverse=True)
    else:
        c, yh = jax.lax.scan(step, init, head)
        c, yb = jax.lax.scan(one_block, c, blocks)
    return c, jax.tree.map(lambda a, b: jnp.concatenate([a, b.reshape((-1,) + b.shape[2:])]), yh, yb)
