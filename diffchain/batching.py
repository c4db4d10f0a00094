"""How diffchain's programs treat one chain and a batch differently (``jax.custom_batching.custom_vmap``).

One chain and a ``vmap``-ed batch of chains want different programs on XLA CPU: written-out sweeps are fast on one
chain and slow under ``vmap`` (:func:`one_chain_form`); a ``lax.cond`` skips work on one chain but under ``vmap``
becomes a select that always computes both branches (:func:`unless_done`).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def one_chain_form(unrolled, general):
    """``unrolled`` when evaluated on one chain; ``general`` (the same arithmetic with scans) under ``vmap``, where
    unrolling costs more than it saves, and in every derivative (``custom_vmap`` has no reverse-mode rule)."""
    f = jax.custom_batching.custom_vmap(unrolled)

    @f.def_vmap
    def batched(axis_size, in_batched, *args):
        in_axes = jax.tree.map(lambda b: 0 if b else None, tuple(in_batched))
        out = jax.vmap(general, in_axes=in_axes, axis_size=axis_size)(*args)
        return out, jax.tree.map(lambda _: True, out)

    f = jax.custom_jvp(f)
    f.defjvp(lambda primals, tangents: jax.jvp(general, primals, tangents))
    return f


def unless_done(f, done, c):
    """``lax.cond(done, identity, f, c)``; under ``vmap``, where that cond would compute ``f`` for every element
    every time, ``f`` runs (for the whole batch, kept where an element is not done) only while some element is not
    done. Derivatives take the plain cond."""
    # the closed-over values (chain, control, ...: tracers of any dtype) become explicit arguments
    closed, shape = jax.make_jaxpr(f, return_shape=True)(c)
    consts = closed.consts
    out_tree = jax.tree.structure(shape)

    def g(c, *consts):
        return jax.tree.unflatten(out_tree, jax.core.eval_jaxpr(closed.jaxpr, consts, *jax.tree.leaves(c)))

    def plain(done, consts, c):
        return jax.lax.cond(done, lambda c: c, lambda c: g(c, *consts), c)

    def batched(axis_size, in_batched, done, consts, c):
        b_done, b_consts, b_c = in_batched
        c = jax.tree.map(lambda x, b: x if b else jnp.broadcast_to(x, (axis_size,) + x.shape), c, b_c)
        done = done if b_done else jnp.broadcast_to(done, (axis_size,))
        axes = [0 if b else None for b in b_consts]

        def run(c):
            new = jax.vmap(g, in_axes=(0, *axes))(c, *consts)
            return jax.tree.map(lambda n, o: jnp.where(done.reshape((-1,) + (1,) * (o.ndim - 1)), o, n), new, c)

        out = jax.lax.cond(jnp.all(done), lambda c: c, run, c)
        return out, jax.tree.map(lambda _: True, out)

    h = jax.custom_batching.custom_vmap(plain)
    h.def_vmap(batched)
    h = jax.custom_jvp(h)
    h.defjvp(lambda primals, tangents: jax.jvp(plain, primals, tangents))
    return h(done, consts, c)
