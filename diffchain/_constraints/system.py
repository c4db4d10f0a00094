"""Every model's constrained system M q_dd = Q + J^T lambda, J q_dd = gamma (seed 001 eq. 8.36; seed 003 natural
coordinates), assembled in one place from the catalogue of constraint kinds, for any model and any dense solver.

The rows, in this order:
  * the position-level kinds, Phi(q, t) = 0 (:meth:`diffchain._model.model.Model.phi`: distances, a chain's rods,
    coincidences, points on lines, drivers; :mod:`diffchain._constraints.kinds`): J = dPhi/dq and gamma = -(J q_d)_q q_d
    - 2 Phi_qt q_d - Phi_tt by automatic differentiation (:func:`constraint_terms`);
  * the point kinds of seed 000 §6, two rows per point that carries one (a chain's points; the mechanism builder makes
    none): S_i a_i = beta_i, a guided point's a_i = a^w_i (§6.1), a slider's s_i^T a_i = (its drift correction) on
    the line {s_i^T x = c_i} (§6.3) (:class:`~diffchain._constraints.kinds.PointKinds`);
  * with ``active``, a chain's held joints (seed 000 Part II, eq. 13; :mod:`diffchain._constraints.held`), whose
    multipliers are the holding torques tau_w.
One drift correction for all (time constant T = ``stab``): every violated quantity eps obeys
eps'' = -eps/T^2 - 2 eps'/T, seed 000 §12.2 eq. (33), which is Baumgarte's stabilisation with alpha = beta = 1/T
(seed 001 eqs. 8.21-8.22; seed 004). The seed-000 recursion solves the same rows in closed form
(:mod:`diffchain._constraints.chain`), so that on a chain every solver differentiates the same constraints.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._state import Control, State
from .._model.forces import external_forces
from .chain import _inv
from .held import _active_mask, active_terms, joint_rows


def constraint_terms(phi: Callable[[jax.Array, jax.Array], jax.Array], q: jax.Array, qd: jax.Array, t: ArrayLike,
                     stab: ArrayLike | None = None) -> tuple[jax.Array, jax.Array]:
    """J = dPhi/dq (jacfwd) and gamma = -(J q_d)_q q_d - 2 Phi_qt q_d - Phi_tt (seed 003; seed 004 P2), by nested jvp.

    With ``stab`` = T_stab, Baumgarte's k_stab = -2 alpha Phi_dot - beta^2 Phi, alpha = beta = 1/T_stab (seed 001 eqs.
    8.21–8.22) is added to gamma.
    """
    t = jnp.asarray(t, q.dtype)
    one = jnp.ones_like(t)
    J = jax.jacfwd(phi)(q, t)

    def phi_dot(q_, t_):
        return jax.jvp(phi, (q_, t_), (qd, one))[1]

    pd, pdd = jax.jvp(phi_dot, (q, t), (qd, one))
    gamma = -pdd
    if stab is not None:
        w = 1.0 / stab
        gamma = gamma - 2.0 * w * pd - w**2 * phi(q, t)
    return J, gamma


def point_rows(model, q, qd, a_w, stab=None):
    """J (2G, 2N), gamma (2G,), on (2G,) of the point kinds of the first G points
    (:class:`~diffchain._constraints.kinds.PointKinds`), two rows per point (x, then y): a guided point's both, a
    slider's first."""
    G = model.guided.shape[0]
    P, V = model.points(q)[:G], model.point_velocities(qd)[:G]
    S, mask, beta = model.point_kinds.rows(P, V, a_w[:G], _inv(stab))
    g = jnp.arange(G)
    J = jnp.zeros((G, 2, G, 2), q.dtype).at[g, :, g, :].set(S).reshape(2 * G, 2 * G)
    J = J if model.W is None else J @ model.W[: 2 * G]
    on = mask.reshape(-1)
    return J * on[:, None], beta.reshape(-1) * on, on


def point_residual(model, q):
    """The point rows' position errors (2G,) (:meth:`~diffchain._constraints.kinds.PointKinds.residual`)."""
    return model.point_kinds.residual(model.points(q)[: model.guided.shape[0]]).reshape(-1)


def constraint_rows(model, state: State, a_w, stab=None):
    """J (m, 2N), gamma (m,), on (m,) of the rows of Phi and of the point kinds (module docstring) at ``state``, the
    guided points' prescribed accelerations ``a_w``; rows switched off are zero."""
    q, qd = state.x.reshape(-1), state.v.reshape(-1)
    J, gamma = constraint_terms(model.phi, q, qd, state.t, stab)
    Jp, gp, onp = point_rows(model, q, qd, a_w, stab)
    return jnp.concatenate([J, Jp]), jnp.concatenate([gamma, gp]), jnp.concatenate([model.rows_on, onp])


def constraint_jacobian(model, x, t=0.0):
    """J (m, 2N) and on (m,) of :func:`constraint_rows` at the positions x (N, 2) alone (rows switched off: zero)."""
    q, zero = x.reshape(-1), jnp.zeros_like(x)
    Jp, _, onp = point_rows(model, q, zero.reshape(-1), zero)
    return jnp.concatenate([jax.jacfwd(model.phi)(q, t), Jp]), jnp.concatenate([model.rows_on, onp])


def system_terms(model, state: State, control: Control, stab=None, *, active=None, alpha_w=None, theta_bar=None):
    """(M, Q, J, gamma, on) of ``model`` at ``state`` under ``control`` (module docstring), q = state.x.reshape(-1):
    M the constant mass matrix, Q the applied forces (gravity, motor torques, dampers, drag, point forces), and the
    rows of the constraints switched on (rows switched off are zero, ``on`` False). ``active`` (n,), on a chain,
    appends one row of seed eq. (13) per joint, held at the angular accelerations ``alpha_w`` (PD towards
    ``theta_bar``)."""
    J, gamma, on = constraint_rows(model, state, control.a_w, stab)
    if active is not None:
        active = _active_mask(model, active)
        G = joint_rows(state.x).reshape(model.n, -1)
        rhs = active_terms(model, state, alpha_w, theta_bar, stab)
        J = jnp.concatenate([J, G * active[:, None]])
        gamma = jnp.concatenate([gamma, jnp.where(active, rhs, 0.0)])
        on = jnp.concatenate([on, active])
    if model.serial:  # a chain's forces in the seed's closed form (§4): the same Q, fewer operations
        Q = external_forces(model, state, control).reshape(-1)
    else:
        tau = control.tau if model.motor_idx.shape[0] else None
        Q = model.applied_forces(state.x.reshape(-1), state.v.reshape(-1), state.t, tau, control.F)
    return model.M, Q, J, gamma, on
