"""What a mechanism's multipliers and a hand-written Lagrangian give (seed 001 §8.4-8.12, seed 004): the joint
reactions from the multipliers of M q_dd = Q + J^T lambda, J q_dd = gamma (:func:`reactions`), and the terms of a
Lagrangian written by hand (:func:`lagrange_terms`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import jax
import jax.numpy as jnp

from .._state import State
from .._model.checks import compiled

if TYPE_CHECKING:
    from .._model.model import Model


def lagrange_terms(kinetic: Callable[[jax.Array, jax.Array], jax.Array], potential: Callable[[jax.Array], jax.Array],
                   q: jax.Array, qd: jax.Array, Q_extra: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """M(q) = d^2T/dqd^2 and P1 = dT/dq - (d^2T/dqd dq) qd - dV/dq + Q (seed 004 "LEMT"), all by AD."""
    M = jax.hessian(kinetic, argnums=1)(q, qd)
    dTdq = jax.grad(kinetic, argnums=0)(q, qd)
    mixed = jax.jvp(lambda q_: jax.grad(kinetic, argnums=1)(q_, qd), (q,), (qd,))[1]
    Q = dTdq - mixed - jax.grad(potential)(q)
    return M, Q if Q_extra is None else Q + Q_extra


@compiled
def reactions(mech: Model, state: State, lam: jax.Array) -> dict[str, jax.Array]:
    """Joint reactions in physical units: {joint name: forces (P, 2) the joint applies on every point}, from
    F_points = (dPhi_rows/dP)^T lambda_rows (seed 004: the multipliers are the reactions). For a revolute joint or a
    pin (p, q) the force on p is lambda itself (N); for a rod/body distance row it is the tension along the rod."""
    _, vjp = jax.vjp(lambda P: mech.phi_points(P, state.t), mech.points(state.x.reshape(-1)))
    out = {}
    for name, (r0, nr) in mech.joint_rows:
        out[name] = vjp(jnp.zeros_like(lam).at[r0:r0 + nr].set(lam[r0:r0 + nr]))[0]
    return out
