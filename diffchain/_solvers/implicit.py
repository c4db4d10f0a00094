"""The implicit derivative of a structured solve, written once: :func:`implicit_solve` differentiates z = K(op)^-1 b
through K's matrix-vector product, never through the sweeps that compute z.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import checkpoint_name



KKT_SOLUTION = "diffchain.kkt_solution"


def implicit_solve(swept, complete, matvec):
    """A linear solve z = K(op)^-1 b by a recursion, differentiated implicitly: dz = K^-1 (db - dK z).

    ``swept(op, b)`` is the part of z the sweeps give, ``complete(op, b, swept)`` the whole z from it (elementwise),
    ``matvec(op, z)`` = K z with K symmetric: forward mode is one more solve with the tangent as right-hand side,
    reverse mode one more with the cotangent plus the adjoint of the elementwise K(op) z; the sweeps themselves are
    never differentiated. The swept part is tagged ``KKT_SOLUTION``
    (``jax.ad_checkpoint.checkpoint_name``) so that a rematerialising rollout can keep it and recompute only the
    elementwise terms around it."""
    solve = jax.custom_jvp(lambda op, b: complete(op, b, swept(op, b)))

    @solve.defjvp
    def _jvp(primals, tangents):
        op, b = primals
        dop, db = tangents
        # leaf by leaf: jax < 0.7 names one array only (later versions map over a pytree themselves, the same way)
        swept_z = swept(op, b)
        z = complete(op, b, jax.tree_util.tree_map(lambda q: checkpoint_name(q, KKT_SOLUTION), swept_z))
        _, dKz = jax.jvp(lambda o: matvec(o, z), (op,), (dop,))  # dK z (the masks' tangents are float0)
        # one flat right-hand side: custom_linear_solve's transpose needs every leaf of it to depend on the tangents
        cuts = np.cumsum([len(q) for q in b])[:-1].tolist()
        split = lambda v: tuple(jnp.split(v, cuts))  # noqa: E731
        rhs = jnp.concatenate([p - q for p, q in zip(db, dKz)])

        def solve_k(_, r):
            r = split(r)
            return jnp.concatenate(complete(op, r, swept(op, r)))

        dz = split(jax.lax.custom_linear_solve(lambda w: jnp.concatenate(matvec(op, split(w))), rhs, solve_k,
                                               symmetric=True))
        return z, dz

    return solve
