"""Kinematic analysis of mechanisms (seed 003 §"kinematic analysis"; seed 001 §8.10 configuration ambiguity).

* :func:`assemble`: position analysis Phi(q, t) = 0 from an approximate guess. A robust start by the seed's penalty
  function Psi = |q - q0|^2 + mu |Phi|^2 with mu raised stepwise (Gauss–Newton on Psi), then Newton steps in
  damped-least-squares (minimum-norm) form dq = -J^T (J J^T + eps I)^-1 Phi, which also works for redundant rows and
  for mobility > 0 (it stays near the guess). Fixed iteration counts (``lax.scan``): differentiable, no while_loop.
  The result carries the residual max|Phi| and a status; an unreachable assembly is reported, never silently NaN.
* :func:`velocities`: J q_d = -Phi_t (seed 003); with mobility > 0 the M-weighted projection of a guess.
* :func:`accelerations`: J q_dd = gamma, the same way.
* :func:`kinematic_analysis`: the three in sequence over a time grid (lax.scan), each position from the previous one.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy.typing as npt

from .._solvers.dense import saddle_point_solve
from .._xla import linalg
from .._constraints.system import constraint_terms
from .._solvers.rank import rank_info
from .._state import State
from .._model.checks import compiled, runtime_checks

if TYPE_CHECKING:
    from .._model.model import Model

ASSEMBLED, UNREACHABLE, INCONSISTENT_DRIVERS = 0, 1, 2
KIN_STATUS = {ASSEMBLED: "assembled", UNREACHABLE: "no configuration satisfies the constraints near the guess "
              "(unreachable assembly: a loop cannot close)",
              INCONSISTENT_DRIVERS: "velocity/acceleration equations are inconsistent (redundant or contradicting "
              "drivers, or a singular configuration)"}


class KinInfo(eqx.Module):
    residual: jax.Array      # max |Phi| (position) or max |J qd + Phi_t| / |J qdd - gamma|
    rank: jax.Array
    mobility: jax.Array
    status: jax.Array


@compiled
def assemble(mech: Model, guess: State, *, n_penalty: int = 8, n_newton: int = 12, tol: float = 1e-9,
             check: bool = False) -> tuple[State, KinInfo]:
    """A State on Phi(q, t) = 0 near ``guess`` (velocities kept; see :func:`velocities`) and a :class:`KinInfo`.

    Penalty start (seed 003): (I + mu J^T J) dq = -(q - q0) - mu J^T Phi, mu = 10^0 .. 10^(n_penalty-1) (scaled by the
    model size); then ``n_newton`` minimum-norm Newton steps. Status UNREACHABLE if max|Phi| > tol * size afterwards.
    """
    q0, t = guess.x.reshape(-1), guess.t
    phi = lambda q: mech.phi(q, t)  # noqa: E731
    size = 1.0 + jnp.max(jnp.abs(q0))
    n = q0.shape[0]
    eye = jnp.eye(n, dtype=q0.dtype)

    def penalty_step(q, mu):
        J, F = jax.jacfwd(phi)(q), phi(q)
        dq = linalg.solve(eye + mu * J.T @ J, -(q - q0) - mu * J.T @ F)
        return q + dq, None

    def newton_step(q, _):
        J, F = jax.jacfwd(phi)(q), phi(q)
        m = F.shape[0]
        eps = 1e-14 * (1.0 + jnp.max(jnp.abs(J)) ** 2)
        dq = -J.T @ linalg.solve(J @ J.T + eps * jnp.eye(m, dtype=q.dtype), F)
        return q + dq, None

    mus = (10.0 ** jnp.arange(n_penalty, dtype=q0.dtype)) / size**2
    q, _ = jax.lax.scan(penalty_step, q0, mus)
    q, _ = jax.lax.scan(newton_step, q, None, length=n_newton)
    res = jnp.max(jnp.abs(phi(q)), initial=0.0)
    _, r, mob, _, _ = rank_info(jax.jacfwd(phi)(q), mech.on)
    ok = jnp.isfinite(res) & (res <= tol * size)
    status = jnp.where(ok, ASSEMBLED, UNREACHABLE)
    q = jnp.where(jnp.all(jnp.isfinite(q)), q, q0)
    if check:
        (q,) = runtime_checks((q,), [(~ok, f"assemble: {KIN_STATUS[UNREACHABLE]}: the constraint residual must be at "
                                           f"most {tol:g} of the mechanism's size, got {{0:.3g}} of it", res / size)])
    return State(q.reshape(guess.x.shape), guess.v, t), KinInfo(res, r, mob, status)


@compiled
def velocities(mech: Model, state: State, *, check: bool = False) -> tuple[State, KinInfo]:
    """Velocity analysis J q_d = -Phi_t (seed 003). With mobility 0 (enough drivers) the solution is unique; otherwise
    the velocities closest to ``state.v`` in the kinetic-energy metric. Returns (State, KinInfo)."""
    q, v0 = state.x.reshape(-1), state.v.reshape(-1)
    t = jnp.asarray(state.t, q.dtype)
    J = jax.jacfwd(mech.phi)(q, t)
    phi_t = jax.jvp(lambda t_: mech.phi(q, t_), (t,), (jnp.ones_like(t),))[1]
    qd, info = _project(mech, J, mech.M @ v0, -phi_t, check)
    return State(state.x, qd.reshape(state.x.shape), state.t), info


@compiled
def accelerations(mech: Model, state: State, a_guess: jax.Array | None = None, *,
                  check: bool = False) -> tuple[jax.Array, KinInfo]:
    """Acceleration analysis J q_dd = gamma = -(J q_d)_q q_d - 2 Phi_qt q_d - Phi_tt (seed 003). Returns (a, KinInfo)."""
    q, qd = state.x.reshape(-1), state.v.reshape(-1)
    J, gamma = constraint_terms(mech.phi, q, qd, state.t)
    a0 = jnp.zeros_like(q) if a_guess is None else a_guess.reshape(-1)
    qdd, info = _project(mech, J, mech.M @ a0, gamma, check)
    return qdd.reshape(state.x.shape), info


def _project(mech, J, Mw, rhs, check):
    indep, r, mob, _, _ = rank_info(J, mech.on)
    w, _ = saddle_point_solve(mech.M, Mw, J, rhs, indep)
    res = jnp.max(jnp.abs((J @ w - rhs) * mech.on), initial=0.0)
    bad = ~(res <= 1e-8 * (1.0 + jnp.max(jnp.abs(rhs))))
    if check:
        (w,) = runtime_checks((w,), [(bad, f"{KIN_STATUS[INCONSISTENT_DRIVERS]}: the residual of J w = rhs must be "
                                          "at most 1e-8 (1 + max|rhs|), got {0:.3g}", res)])
    return w, KinInfo(res, r, mob, jnp.where(bad, INCONSISTENT_DRIVERS, ASSEMBLED))


@compiled
def kinematic_analysis(mech: Model, state: State, ts: npt.ArrayLike, *,
                       n_newton: int = 6) -> tuple[State, jax.Array, KinInfo]:
    """Positions, velocities and accelerations of a driven mechanism on the time grid ``ts`` (seed 003): at each time
    Newton from the previous configuration, then velocity and acceleration analysis. Returns (states, a, KinInfo) with
    a leading time axis."""

    def body(s, t):
        s, pinfo = assemble(mech, State(s.x, s.v, t), n_penalty=0, n_newton=n_newton)
        s, vinfo = velocities(mech, s)
        a, ainfo = accelerations(mech, s)
        status = jnp.maximum(pinfo.status, jnp.maximum(vinfo.status, ainfo.status))
        return s, (s, a, KinInfo(pinfo.residual, pinfo.rank, pinfo.mobility, status))

    _, out = jax.lax.scan(body, state, jnp.asarray(ts, state.x.dtype))
    return out
