"""A mechanism's constrained dynamics M q_dd = Q + J^T lambda, J q_dd = gamma (seed 001 §8.4-8.12, seed 004): its
terms (J and gamma of Phi(q, t) by automatic differentiation), :func:`mechanism_dynamics` with any dense solver
(:mod:`diffchain._solvers.dense`; :func:`diffchain.forward_dynamics` is its public entry), and the joint reactions
from the multipliers.
"""
from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from .._model.chain import Control, State
from .._model.checks import compiled


# ---------------------------------------------------------------------------------------------------------------------
# constraint terms
def constraint_terms(phi, q, qd, t, stab=None):
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


def lagrange_terms(kinetic, potential, q, qd, Q_extra=None):
    """M(q) = d^2T/dqd^2 and P1 = dT/dq - (d^2T/dqd dq) qd - dV/dq + Q (seed 004 "LEMT"), all by AD."""
    M = jax.hessian(kinetic, argnums=1)(q, qd)
    dTdq = jax.grad(kinetic, argnums=0)(q, qd)
    mixed = jax.jvp(lambda q_: jax.grad(kinetic, argnums=1)(q_, qd), (q,), (qd,))[1]
    Q = dTdq - mixed - jax.grad(potential)(q)
    return M, Q if Q_extra is None else Q + Q_extra


def mechanism_terms(mech, state: State, tau=None, F=None, stab=None):
    """(M, Q, J, gamma, on) of a mechanism at ``state`` (x = coordinate points (N, 2))."""
    q, qd = state.x.reshape(-1), state.v.reshape(-1)
    J, gamma = constraint_terms(mech.phi, q, qd, state.t, stab)
    Q = mech.applied_forces(q, qd, state.t, tau, F)
    return mech.M, Q, J, gamma, mech.on


def mechanism_dynamics(mech, state: State, control: Control, solver, stab=None):
    """A mechanism's :class:`Solution` (no checks: :func:`diffchain.forward_dynamics` is the public entry): the
    accelerations a (N, 2) of its coordinate points, the multipliers lambda (``forces``, one per row of mech.phi) and
    the rank information ``info`` (:class:`Info`) of M q_dd = Q + J^T lambda, J q_dd = gamma (seed 001 eq. 8.36)."""
    tau = control.tau if mech.motor_idx.shape[0] else None
    sol = solver.system(*mechanism_terms(mech, state, tau, control.F, stab), mech.nominal_rank)
    return eqx.tree_at(lambda s: s.a, sol, sol.a.reshape(state.x.shape))


@compiled
def reactions(mech, state: State, lam):
    """Joint reactions in physical units: {joint name: forces (P, 2) the joint applies on every point}, from
    F_points = (dPhi_rows/dP)^T lambda_rows (seed 004: the multipliers are the reactions). For a revolute joint or a
    pin (p, q) the force on p is lambda itself (N); for a rod/body distance row it is the tension along the rod."""
    q = state.x.reshape(-1)
    P = mech.points(q)

    def phi_P(P_):
        rows = [mech.dist(P_, state.t), mech.coin(P_, state.t), mech.line(P_, state.t)]
        rows += [d(P_, state.t) for d in mech.drivers]
        return jnp.concatenate([r.astype(q.dtype) for r in rows]) * mech.on

    _, vjp = jax.vjp(phi_P, P)
    out = {}
    for name, (r0, nr) in mech.joint_rows:
        out[name] = vjp(jnp.zeros_like(lam).at[r0:r0 + nr].set(lam[r0:r0 + nr]))[0]
    return out
