"""Simulation, loop-closure functions and closed-loop inverse dynamics of mechanisms (seed 001 §8.11–8.12).

* :func:`mechanism_rollout`: :func:`diffchain.rollout` of a mechanism, ``lax.scan`` of a diffchain integrator over
  the mechanism's accelerations (Baumgarte stabilisation with the integrator's ``stab``, or ``Projected``).
* :func:`loop_closure_terms` / :func:`loop_closure_dynamics` (seed 001 eqs. 8.56–8.60): the user gives q = gamma(y);
  G = d gamma/dy by jacfwd, g = G_dot y_dot by a nested jvp, and G^T M G y_dd = G^T (Q - M g). Integrating y keeps
  every constraint exactly: no drift, no stabilisation.
* :func:`actuator_forces` (seed 001 eq. 8.63): G_u^T u = G^T tau_ID with the classification under-, properly or
  redundantly actuated, exact or minimum-norm u. :func:`mechanism_inverse_dynamics` applies it to motors of a Mechanism.
"""
from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from .rollout import _scan_rollout, control_checks, dt_checks
from .projection import ChainIntegrator, Projected
from .._solvers.dense import KKT, null_space_basis
from .._solvers.mechanism import check_mechanism_state, check_motor_torques, mechanism_dynamics, mechanism_terms
from .._solvers.rank import rank_info
from .._model.chain import Control, State, runtime_checks
from .._analysis.diagnosis import check_run

UNDER, PROPER, REDUNDANT, UNDER_AND_REDUNDANT = 0, 1, 2, 3
ACTUATION = {UNDER: "under-actuated", PROPER: "properly actuated", REDUNDANT: "redundantly actuated",
             UNDER_AND_REDUNDANT: "under-actuated and redundantly actuated"}


def mechanism_rollout(mech, state: State, controls, dt, *, n_steps, solver, integrator, checkpoint, check, who):
    """:func:`diffchain.rollout` of a mechanism: ``controls`` holds the motor torques (``Control(tau=(T, n_motors))``,
    a policy ``state -> Control(tau=(n_motors,))``, or None); ``integrator`` a plain one (its ``stab``, T_stab =
    stab_factor * dt, is Baumgarte's time constant, seed 001 §8.3, alpha = beta = 1/T_stab; ``stab_factor=None``
    integrates without stabilisation) or one of them ``Projected()``, which moves every step's end onto the loop
    closure and its rate (:func:`project_mechanism`). The run is checked as a chain's: a ``ValueError`` says when its
    final state is not finite or off the loop closure Phi(q, t) or its rate Phi_q q_dot + Phi_t beyond a tolerance
    that scales with the dtype (:mod:`diffchain._analysis.diagnosis`; a run that leaves its branch at a singular
    configuration leaves them there)."""
    projected = integrator if isinstance(integrator, Projected) else None
    if isinstance(integrator, ChainIntegrator) and projected is None:
        raise TypeError(f"{who}: integrator must be a plain integrator (RK4(), SemiImplicitEuler(), SeedQuantum(), "
                        f"VelocityVerlet()) or one of them Projected(): {type(integrator).__name__} works on chains")
    integrator = projected.base if projected else integrator
    check_mechanism_state(mech, state, who)
    n_m, dtype = mech.motor_idx.shape[0], state.x.dtype

    if controls is None:
        if n_steps is None:
            raise ValueError(f"{who}: a policy (or controls=None) needs n_steps")
        controls = lambda s: Control(tau=jnp.zeros((n_m,), dtype))  # noqa: E731
    elif isinstance(controls, Control):
        if controls.tau.ndim != 2:
            raise ValueError(f"{who}: controls must carry a leading time axis, tau of shape (T, n_motors) = (T, {n_m}),"
                             f" got {controls.tau.shape} (for one control held over n_steps, pass the policy "
                             "lambda s: control)")
        check_motor_torques(mech, controls, who, steps=True)
    pending = dt_checks(dt, who, check)
    pending += control_checks(controls, who, check) if isinstance(controls, Control) else []
    if pending:  # tied to the start: no array of the inputs passes through the check
        state = State(runtime_checks((state.x,), pending)[0], state.v, state.t)
    stab = integrator.stab(dt)

    def body(s, u):
        check_motor_torques(mech, u, who)
        s = integrator(lambda s_: mechanism_dynamics(mech, s_, u.tau if n_m else None, solver=solver, stab=stab)[0],
                       s, dt)
        if projected:
            s = project_mechanism(mech, s, solver, projected.iterations)
        return s, s

    final, traj = _scan_rollout(mech, body, state, controls, n_steps, checkpoint, lambda s: s)
    if check:  # the run itself: finite and on its constraints (diffchain._analysis.diagnosis): its final state
        final, traj = check_run(who, mech, final, traj, "a smaller dt, or a stronger stabilisation such as "
                                "integrator=RK4(stab_factor=20)")
    return final, traj


def project_mechanism(mech, state: State, solver=KKT(), iterations: int = 1) -> State:
    """``state`` moved onto the loop closure Phi(q, t) = 0 by ``iterations`` Newton steps and its velocities onto
    Phi_q q_dot + Phi_t = 0, both in the mass metric: each is the constrained solve M dq = J^T lambda, J dq = -r
    (``solver.system`` with Q = 0: the smallest correction in the metric of M, redundant rows dropped by the solver's
    rank decisions), r the residual."""
    q, v, t = state.x.reshape(-1), state.v.reshape(-1), jnp.asarray(state.t, state.x.dtype)
    zero = jnp.zeros_like(q)
    for _ in range(iterations):
        J = jax.jacfwd(mech.phi)(q, t)
        q = q + solver.system(mech.M, zero, J, -mech.phi(q, t), mech.on)[0]
    J, phi_t = jax.jacfwd(mech.phi, argnums=(0, 1))(q, t)
    v = v + solver.system(mech.M, zero, J, -(J @ v + phi_t), mech.on)[0]
    return State(q.reshape(state.x.shape), v.reshape(state.v.shape), state.t)


# ---------------------------------------------------------------------------------------------------------------------
def loop_closure_terms(gamma, y, yd):
    """q = gamma(y), q_d = G y_d, G = d gamma / dy (eq. 8.58, jacfwd), g = G_dot y_d (eq. 8.60, nested jvp)."""
    q = gamma(y)
    G = jax.jacfwd(gamma)(y)
    qd, g = jax.jvp(lambda y_: jax.jvp(gamma, (y_,), (yd,))[1], (y,), (yd,))
    return q, qd, G, g


def loop_closure_dynamics(M, Q, gamma, y, yd):
    """y_dd from G^T M G y_dd = G^T (Q - M g) (seed 001 eqs. 8.45–8.46 with G, g from eqs. 8.58–8.60); M(q), Q(q, q_d)
    are callables. Returns (y_dd, q_dd)."""
    q, qd, G, g = loop_closure_terms(gamma, y, yd)
    Mq = M(q)
    ydd = jnp.linalg.solve(G.T @ Mq @ G, G.T @ (Q(q, qd) - Mq @ g))
    return ydd, G @ ydd + g


def mechanism_loop_closure_dynamics(mech, gamma, y, yd, t=0.0, tau=None, F=None):
    """:func:`loop_closure_dynamics` for a Mechanism: ``gamma`` maps y to the flat coordinates q (2N,)."""
    return loop_closure_dynamics(lambda q: mech.M, lambda q, qd: mech.applied_forces(q, qd, t, tau, F), gamma, y, yd)


# ---------------------------------------------------------------------------------------------------------------------
class Actuation(eqx.Module):
    u: jax.Array             # actuator forces (exact, or minimum-norm when redundantly actuated)
    kind: jax.Array          # UNDER / PROPER / REDUNDANT / UNDER_AND_REDUNDANT
    rank: jax.Array          # rank of G_u
    residual: jax.Array      # |G_u^T u - G^T tau_ID| (> 0 when under-actuated: the motion is not achievable)


def actuator_forces(G, tau_id, Bu, free=None, tol=1e-9):
    """Seed 001 eq. 8.63: G_u^T u = G^T tau_ID, with Bu (n, p) the actuator map tau = Bu u (Q [u; 0] in the seed:
    a selection matrix for joint actuators, a general matrix for motors of a Mechanism). ``free`` masks the valid
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


def mechanism_inverse_dynamics(mech, state: State, qdd, F=None, tol=1e-9):
    """Motor torques u that produce the accelerations ``qdd`` (N, 2), consistent with the constraints (including any
    drivers), via eq. 8.63 with tau_ID = M q_dd - Q (q, q_d; no motors) and G the null-space basis of eq. 8.51."""
    M, Q, J, gamma, on = mechanism_terms(mech, state, None, F)
    G, _, free = null_space_basis(J, gamma, on, tol=tol)
    tau_id = M @ qdd.reshape(-1) - Q
    return actuator_forces(G, tau_id, motor_map(mech, state.x.reshape(-1)), free, tol)
