"""Sweeps over the points of a chain: written out for one short chain (:func:`_sweep`), or a ``lax.scan``, blocked
for long chains (:func:`scan_points`). Performance plumbing only; the recursions that use them are in
:mod:`diffchain._solvers`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp



UNROLL_MAX = 8  # a single chain of up to this many points runs its sweeps written out point by point (:func:`_sweep`)


FUSED_MAX = 5  # written out, up to this many points the backward sweep multiplies by 1/D_i, beyond it divides ...


ROWS_FUSED_MAX = 7  # ... and with a row of right-hand sides per point, beyond this many each carry is materialised


def _sweep(step, init, xs, unrolled, reverse=False, kept=False):
    """``lax.scan(step, init, xs, reverse=reverse)``, or with ``unrolled`` the same written out point by point.

    Written out, XLA fuses a small chain's sweep into a few kernels instead of copying a scan's carry and stacking
    its outputs. The backward sweep of :func:`_abcd_sweeps_c` multiplies by 1/D_i up to ``FUSED_MAX`` points (all
    fused) and divides by D_i beyond (a quotient is computed once, not recomputed in each consumer). With a row of
    right-hand sides per point it multiplies, and beyond ``ROWS_FUSED_MAX`` points materialises each carry
    (``kept``: a product with the identity, exact, which XLA does not fuse into the slices that read it). Beyond
    ``UNROLL_MAX`` points (compile time) and under ``vmap`` the scan is the faster form."""
    if not unrolled:
        return scan_points(step, init, xs, reverse)
    n = jax.tree.leaves(xs)[0].shape[0]
    eye = jnp.eye(len(init), dtype=init[0].dtype) if kept else None
    carry, ys = init, [None] * n
    for i in (reversed(range(n)) if reverse else range(n)):
        carry, ys[i] = step(carry, jax.tree.map(lambda x: x[i], xs))
        if kept:
            kept_carry = jnp.dot(eye, jnp.stack(carry))
            carry = tuple(kept_carry[j] for j in range(len(carry)))
    return carry, jax.tree.map(lambda *y: jnp.stack(y), *ys)


SCAN_BLOCK = 32  # a sweep over 2 * SCAN_BLOCK points or more runs as a scan over blocks of points (scan_points)


def scan_points(step, init, xs, reverse=False, unroll=False):
    """``lax.scan(step, init, xs, reverse=reverse, unroll=unroll)`` over the points of a chain (the leading axis of
    ``xs``); from 2 ``SCAN_BLOCK`` points on, a scan over blocks of ``SCAN_BLOCK`` points, each an inner scan (the
    first n mod ``SCAN_BLOCK`` points a scan of their own).

    On one chain, XLA CPU runs a single long scan of the recursions (Part I, and Part II in
    :mod:`diffchain._solvers.recursive_solver`) more slowly per point than a scan over blocks of points. The Thomas scans of
    :mod:`diffchain._solvers.closed_chain` and the rigid-link sweeps (:func:`abcd_backward_inertial`) do not slow down
    and keep one scan; under ``vmap`` blocking makes no difference."""
    n = jax.tree.leaves(xs)[0].shape[0]
    if n < 2 * SCAN_BLOCK:
        return jax.lax.scan(step, init, xs, reverse=reverse, unroll=unroll)
    nb, h = divmod(n, SCAN_BLOCK)
    head = jax.tree.map(lambda x: x[:h], xs)
    blocks = jax.tree.map(lambda x: x[h:].reshape((nb, SCAN_BLOCK) + x.shape[1:]), xs)

    def block(c, xb):
        return jax.lax.scan(step, c, xb, reverse=reverse)

    if reverse:
        c, yb = jax.lax.scan(block, init, blocks, reverse=True)
        c, yh = jax.lax.scan(step, c, head, reverse=True)
    else:
        c, yh = jax.lax.scan(step, init, head)
        c, yb = jax.lax.scan(block, c, blocks)
    return c, jax.tree.map(lambda a, b: jnp.concatenate([a, b.reshape((-1,) + b.shape[2:])]), yh, yb)
