"""Loop-closure functions and closed-loop inverse dynamics of mechanisms (seed 001 §8.11–8.12).

* :func:`loop_closure_terms` / :func:`loop_closure_dynamics` (seed 001 eqs. 8.56–8.60): the user gives q = gamma(y);
  G = d gamma/dy by jacfwd, g = G_dot y_dot by a nested jvp, and G^T M G y_dd = G^T (Q - M g). Integrating y keeps
  every constraint exactly: no drift, no stabilisation.
* :func:`actuator_forces` (seed 001 eq. 8.63): G_u^T u = G^T tau_ID with the classification under-, properly or
  redundantly actuated, exact or minimum-norm u. :func:`mechanism_inverse_dynamics` applies it to motors of a mechanism.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import equinox as eqx
import jax
import jax.numpy as jnp

from .._solvers.dense import null_space_basis
from .._xla import linalg
from .._constraints.system import system_terms
from .._solvers.rank import rank_info
from .._state import Control, State
from .._model.checks import compiled

if TYPE_CHECKING:
    from .._model.model import Model

UNDER, PROPER, REDUNDANT, UNDER_AND_REDUNDANT = 0, 1, 2, 3
ACTUATION = {UNDER: "under-actuated", PROPER: "properly actuated", REDUNDANT: "redundantly actuated",
             UNDER_AND_REDUNDANT: "under-actuated and redundantly actuated"}


# ---------------------------------------------------------------------------------------------------------------------
def loop_closure_terms(gamma: Callable[[jax.Array], jax.Array], y: jax.Array,
                       yd: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """q = gamma(y), q_d = G y_d, G = d gamma / dy (eq. 8.58, jacfwd), g = G_dot y_d (eq. 8.60, nested jvp)."""
    q = gamma(y)
    G = jax.jacfwd(gamma)(y)
    qd, g = jax.jvp(lambda y_: jax.jvp(gamma, (y_,), (yd,))[1], (y,), (yd,))
    return q, qd, G, g


def loop_closure_dynamics(M: Callable[[jax.Array], jax.Array], Q: Callable[[jax.Array, jax.Array], jax.Array],
                          gamma: Callable[[jax.Array], jax.Array], y: jax.Array,
                          yd: jax.Array) -> tuple[jax.Array, jax.Array]:
    """y_dd from G^T M G y_dd = G^T (Q - M g) (seed 001 eqs. 8.45–8.46 with G, g from eqs. 8.58–8.60); M(q), Q(q, q_d)
    are callables. Returns (y_dd, q_dd)."""
    q, qd, G, g = loop_closure_terms(gamma, y, yd)
    Mq = M(q)
    ydd = linalg.solve(G.T @ Mq @ G, G.T @ (Q(q, qd) - Mq @ g))
    return ydd, G @ ydd + g


def mechanism_loop_closure_dynamics(mech, gamma, y, yd, t=0.0, tau=None, F=None):
    """:func:`loop_closure_dynamics` for a mechanism: ``gamma`` maps y to the flat coordinates q (2N,)."""
    return loop_closure_dynamics(lambda q: mech.M, lambda q, qd: mech.applied_forces(q, qd, t, tau, F), gamma, y, yd)


# ---------------------------------------------------------------------------------------------------------------------
class Actuation(eqx.Module):
    u: jax.Array             # actuator forces (exact, or minimum-norm when redundantly actuated)
    kind: jax.Array          # UNDER / PROPER / REDUNDANT / UNDER_AND_REDUNDANT
    rank: jax.Array          # rank of G_u
    residual: jax.Array      # |G_u^T u - G^T tau_ID| (> 0 when under-actuated: the motion is not achievable)


@compiled
def actuator_forces(G: jax.Array, tau_id: jax.Array, Bu: jax.Array, free: jax.Array | None = None,
                    tol: float = 1e-9) -> Actuation:
    """Seed 001 eq. 8.63: G_u^T u = G^T tau_ID, with Bu (n, p) the actuator map tau = Bu u (Q [u; 0] in the seed:
    a selection matrix for joint actuators, a general matrix for motors of a mechanism). ``free`` masks the valid
    columns of a fixed-shape G. Cases (not exclusive): rank G_u < n - r under-actuated, p > rank G_u redundantly
    actuated, else properly actuated with the unique u = G_u^-T G^T tau_ID. The minimum-norm least-squares u is
    returned in every case (exact unless under-actuated and the motion is infeasible)."""
    if free is not None:
        G = G * free[None, :]
    Gu_T = G.T @ Bu                                  # (n_y, p) = (Bu^T G)^T = G_u^T
    rhs = G.T @ tau_id
    p = Bu.shape[1]
    dof = G.shape[1] if free is None else jnp.sum(free)
    _, rk, _, _, _ = rank_info(Gu_T, jnp.ones((Gu_T.shape[0],), bool), tol=tol)
    u = jnp.linalg.pinv(Gu_T, rtol=tol) @ rhs
    under, redundant = rk < dof, p > rk
    kind = jnp.where(under & redundant, UNDER_AND_REDUNDANT, jnp.where(under, UNDER, jnp.where(redundant, REDUNDANT,
                                                                                                    PROPER)))
    return Actuation(u, kind, rk, jnp.max(jnp.abs(Gu_T @ u - rhs), initial=0.0))


def motor_map(mech, q):
    """Bu (2N, n_motors): generalized force of a unit torque of each motor (d motor angle / dq)^T."""
    return jax.jacfwd(mech.motor_angles)(q).T


@compiled
def mechanism_inverse_dynamics(mech: Model, state: State, qdd: jax.Array, F: jax.Array | None = None,
                               tol: float = 1e-9) -> Actuation:
    """Motor torques u that produce the accelerations ``qdd`` (N, 2), consistent with the constraints (including any
    drivers), via eq. 8.63 with tau_ID = M q_dd - Q (q, q_d; no motors) and G the null-space basis of eq. 8.51."""
    M, Q, J, gamma, on = system_terms(mech, state, Control(jnp.zeros((mech.motor_idx.shape[0],), mech.dtype), F))
    G, _, free = null_space_basis(J, gamma, on, tol=tol)
    tau_id = M @ qdd.reshape(-1) - Q
    return actuator_forces(G, tau_id, motor_map(mech, state.x.reshape(-1)), free, tol)
