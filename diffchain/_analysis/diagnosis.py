"""Whether a run can be trusted: :func:`diagnose` and its :class:`Report`, and the run-time check of the rollouts.

One measure for every model, taken on the states a rollout returns (never inside its loop):

* **finite**: every position and velocity of every step;
* **constraints**, to a tolerance that scales with the dtype and the model: for a chain the rod lengths and slider
  lines and their rates (:func:`diffchain.constraint_violation`, seed 000 §3: ``|x_{i+1} - x_i| = l_i``,
  ``(v_{i+1} - v_i)^T (x_{i+1} - x_i) = 0``); for a mechanism the loop closure ``Phi(q, t)`` and its rate
  ``Phi_q q_dot + Phi_t`` (seed 001 eq. 8.21, seed 003). Allowed at a step: a position error of
  ``rtol * L + 8 eps n max|x|`` and a rate of ``100 rtol (1 + max|v|) + 8 eps n max|v| (1 + max|x| / L_min)``, with
  L the longest rod (body, rod or slider base; 1 without), eps the machine epsilon of the states' dtype, n the number
  of points and by default ``rtol = max(1e-2, eps ** (1/3))`` (1e-2 in float64 and float32). The projected
  integrators keep the constraints to round-off; the seed's constant-acceleration quantum with its PD drift correction
  (SeedQuantum, the event rollouts) leaves up to 5e-4 of the longest rod and 7e-4 (1 + max|v|) in the rates on the
  library's tested event scenarios (random drops of 3-8 links), and a first-order integrator with Baumgarte's
  stabilisation up to 5e-4 and 1.1e-2 (1 + max|v|) (the four-bar with SemiImplicitEuler at dt = 2e-3): the rates get a
  hundred times the position level's tolerance, and a run is judged mostly by its positions. A run that leaves its
  branch crosses the tolerance at once (the N-four-bar at dt = 5e-3: from 1e-5 to 1e8 of a crank within ten steps, the
  step it leaves its branch), a diverging one before it is not finite (SeedQuantum on a 5-link pendulum at dt = 1e-3: at t = 7.8 s, its energy
  more than doubled; not finite at t = 9.1 s);
* **singular passages** (mechanisms, in :func:`diagnose` only): the conditioning of the constraint Jacobian at each
  step, its smallest relative pivot among the first ``nominal_rank`` of complete pivoting
  (:func:`diffchain._solvers.mechanism.pivot_sequence`, seed 001 §8.10); below ``sqrt(eps)`` the solver's accelerations
  have lost half their digits, and at 0 it drops rows (``Info.status`` SINGULAR). A passage close to a singular
  configuration is not itself a failure: a run that keeps its branch passes it on its constraints, one that leaves it
  leaves them there (the IFToMM N-four-bar at dt = 5e-3);
* **exhausted event budgets** (event rollouts): the quanta whose last slot was forced (``StepReport.exhausted``).
  They are counted, not failures: the forced finish still advances exactly dt and puts contact points back onto their
  obstacle, but that quantum's error was not tested.

The rollouts (:func:`diffchain.rollout` of a chain or a mechanism, :func:`diffchain.event_rollout`) with
their default ``check=True`` raise a ``ValueError`` when their final state is not finite (a run that diverged: NaN and
inf persist) or off its constraints, naming its time, the errors and the tolerances (one ``lax.cond`` per call,
:func:`diffchain._model.checks.runtime_checks`; readable under ``jax.jit``, the batch element named under ``vmap``);
:func:`diffchain.step` checks its new state. :func:`diagnose` finds the first bad step of a trajectory, without
raising. ``check=False`` leaves the check out.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._state import State
from .._model.checks import compiled
from .._model.model import Model, check_model

if TYPE_CHECKING:
    from .._events.state import EventState, StepReport

# chains of up to this many points are checked rod by rod, a loop written out in the program (fast on every backend,
# also where XLA CPU hands a reduction over a short minor axis to XNNPACK, JAX's default: 16x slower at 6 points);
# longer ones by one reduction over the rods, so that the program's size stays bounded
UNROLL_MAX = 64
RATE_FACTOR = 100.0  # the rate level's tolerance is this many times the position level's (module docstring)
HINT = ("The results cannot be trusted ({remedy}); check=False returns them without this check, and "
        "dc.diagnose(model, trajectory) reports on them (Report: first bad step, largest errors, singular passages)")


class Report(eqx.Module):
    """What :func:`diagnose` found on a run: ``ok`` at a glance, and where and by how much it failed.

    Steps count the trajectory's entries (0 = the state after the first step); -1 where nothing happened.

      ok:              finite, on its constraints within tolerance and never singular (exhausted budgets aside)
      finite:          every position and velocity finite;  first_nonfinite: the first step holding NaN or inf
      violation, tolerance:            the largest position-level constraint error (m) and the tolerance at its step
      rate_violation, rate_tolerance:  the same for the velocity level (m/s)
      first_violation: the first step beyond either tolerance
      conditioning:    the smallest relative pivot of the constraint Jacobian along the run (mechanisms; inf where
                       not measured: chains, event rollouts);  singular_tolerance: below it a step is singular
      first_singular:  the first singular step
      exhausted:       event quanta whose budget of solver calls ran out (0 outside event rollouts);
                       first_exhausted: the first of them
      first_bad:       the first step that is not finite, off the constraints or singular
      times:           the time of each step (to read the steps above as times)

    All fields are arrays, so reports come out of ``jit`` and stack under ``vmap`` (one entry per batch element).
    :meth:`summary` writes one as a line of text.
    """

    ok: jax.Array
    finite: jax.Array
    first_nonfinite: jax.Array
    violation: jax.Array
    tolerance: jax.Array
    rate_violation: jax.Array
    rate_tolerance: jax.Array
    first_violation: jax.Array
    conditioning: jax.Array
    singular_tolerance: jax.Array
    first_singular: jax.Array
    exhausted: jax.Array
    first_exhausted: jax.Array
    first_bad: jax.Array
    times: jax.Array

    def summary(self) -> str:
        """One line: "ok" or what failed first, where and by how much (a report of one run, not a batch)."""
        if np.ndim(self.ok):
            bad = int(np.sum(~np.asarray(self.ok)))
            return f"a batch of {np.size(self.ok)} runs: {bad} failed (index a report, e.g. report[k], for one run)"

        def at(k):
            k = int(k)
            return f"step {k} (t = {float(np.asarray(self.times)[k]):.6g})"

        parts = []
        if not bool(self.finite):
            parts.append(f"not finite from {at(self.first_nonfinite)} on")
        if int(self.first_violation) >= 0:
            parts.append(f"off its constraints from {at(self.first_violation)} on: largest error "
                         f"{float(self.violation):.3g} (tolerance {float(self.tolerance):.3g}), rate "
                         f"{float(self.rate_violation):.3g} (tolerance {float(self.rate_tolerance):.3g})")
        if int(self.first_singular) >= 0:
            parts.append(f"singular at {at(self.first_singular)}: conditioning {float(self.conditioning):.3g} "
                         f"< {float(self.singular_tolerance):.3g}")
        head = "ok" if bool(self.ok) else "FAILED: " + "; ".join(parts)
        tail = []
        if np.isfinite(float(self.conditioning)) and int(self.first_singular) < 0:
            tail.append(f"conditioning >= {float(self.conditioning):.3g}")
        if int(self.exhausted):
            tail.append(f"{int(self.exhausted)} quanta exhausted their budget (first at {at(self.first_exhausted)})")
        return head + (f" ({'; '.join(tail)})" if tail else "")

    def __getitem__(self, k):
        """The report of batch element ``k`` (of a report computed under ``vmap``)."""
        return jax.tree_util.tree_map(lambda a: a[k], self)


def _first(bad):
    """Index of the first True of ``bad`` (T,), -1 if none."""
    return jnp.where(jnp.any(bad), jnp.argmax(bad), -1)


def default_rtol(dtype) -> float:
    """The default relative tolerance of the constraint check: 1e-2 (a rod 1 % off its length), or eps ** (1/3) of
    ``dtype`` where larger (half precision)."""
    return max(1e-2, float(jnp.finfo(dtype).eps) ** (1.0 / 3.0))


class _Measures(eqx.Module):
    """Per step (T,): finite, position error and its tolerance, rate error and its tolerance; conditioning (or
    None), exhausted (or None); and the times."""
    finite: jax.Array
    pos: jax.Array
    pos_tol: jax.Array
    vel: jax.Array
    vel_tol: jax.Array
    times: jax.Array
    cond: jax.Array | None = None
    exhausted: jax.Array | None = None


def _split(model, trajectory):
    """(kind, states, step reports or None) of a rollout's trajectory: 'chain', 'mechanism' or 'events'."""
    from .._events.state import EventState, StepReport

    reports = None
    if isinstance(trajectory, tuple) and len(trajectory) == 2 and isinstance(trajectory[0], EventState):
        trajectory, reports = trajectory
        if not isinstance(reports, StepReport):
            raise TypeError(f"diagnose: an event trajectory is (EventStates, StepReports) as event_rollout returns it, "
                            f"got a second part of type {type(reports).__name__}")
    if isinstance(trajectory, EventState):
        trajectory = trajectory.state
    if not isinstance(trajectory, State):
        raise TypeError("diagnose: trajectory must be the states a rollout returns (a State with a leading time axis), "
                        "or event_rollout's (EventStates, StepReports); got "
                        f"{type(trajectory).__name__}")
    check_model(model, "diagnose")
    if not model.serial:
        return "mechanism", trajectory, reports
    return ("events" if reports is not None else "chain"), trajectory, reports


def _chain_errors(chain: Model, x, v):
    """Per step of (T, n, 2) positions and velocities: the largest rod-length or slider-line error and the largest
    stretch rate or speed off a slider line (:func:`diffchain.constraint_violation` on each step, the rods' terms to
    first order in the error: (|x_{i+1} - x_i|^2 - l_i^2) / (2 l_i) and (x_{i+1} - x_i)^T (v_{i+1} - v_i) / l_i, the
    form of a mechanism's distance rows, seed 003). The slider terms
    are left out where the chain is known to have no slider (their all-zero arrays would be constant-folded by XLA,
    slowly for long batched runs)."""
    if chain.n > UNROLL_MAX:  # long chains: one reduction over the rods
        dx, dv = x[:, 1:] - x[:, :-1], v[:, 1:] - v[:, :-1]
        inv = jnp.where(chain.rod_on, 1.0 / chain.l, 0.0)
        pos = jnp.max(jnp.abs((jnp.sum(dx * dx, -1) - chain.l**2) * (0.5 * inv)), axis=-1)
        vel = jnp.max(jnp.abs(jnp.sum(dx * dv, -1) * inv), axis=-1)
    elif chain.n > 1:  # by components and rod by rod: a reduction over a short minor axis is slow on XLA CPU
        X, Y, U, V = x[..., 0], x[..., 1], v[..., 0], v[..., 1]
        inv = jnp.where(chain.rod_on, 1.0 / chain.l, 0.0)
        pos = vel = jnp.zeros(x.shape[:1], x.dtype)
        for k in range(chain.n - 1):
            # to first order in the error (no square root, no division: the rollouts' check is one pass over the run)
            dX, dY, dU, dV = X[:, k + 1] - X[:, k], Y[:, k + 1] - Y[:, k], U[:, k + 1] - U[:, k], V[:, k + 1] - V[:, k]
            pos = jnp.maximum(pos, jnp.abs((dX * dX + dY * dY - chain.l[k] ** 2) * (0.5 * inv[k])))
            vel = jnp.maximum(vel, jnp.abs((dX * dU + dY * dV) * inv[k]))
    else:
        pos = vel = jnp.zeros(x.shape[:1], x.dtype)
    mask = chain.slider_mask
    if not isinstance(mask, jax.core.Tracer) and not bool(np.any(np.asarray(mask))):
        return pos, vel  # no slider, known at trace time
    if chain.n > UNROLL_MAX:
        line = jnp.max(jnp.where(mask, jnp.abs(jnp.sum(chain.s * x, -1) - chain.c), 0.0), axis=-1)
        line_rate = jnp.max(jnp.where(mask, jnp.abs(jnp.sum(chain.s * v, -1)), 0.0), axis=-1)
        return jnp.maximum(pos, line), jnp.maximum(vel, line_rate)
    for i in range(chain.n):
        line = jnp.abs(chain.s[i, 0] * x[:, i, 0] + chain.s[i, 1] * x[:, i, 1] - chain.c[i])
        line_rate = jnp.abs(chain.s[i, 0] * v[:, i, 0] + chain.s[i, 1] * v[:, i, 1])
        pos = jnp.maximum(pos, jnp.where(mask[i], line, 0.0))
        vel = jnp.maximum(vel, jnp.where(mask[i], line_rate, 0.0))
    return pos, vel


def _tolerances(longest, shortest, n, eps, rtol, size, speed):
    pos_tol = rtol * longest + 8 * eps * n * size
    vel_tol = RATE_FACTOR * rtol * (1.0 + speed) + 8 * eps * n * speed * (1.0 + size / shortest)
    return pos_tol, vel_tol


def _measures(model, trajectory, rtol=None, conditioning=False) -> _Measures:
    from .._solvers.rank import pivot_sequence

    kind, states, reports = _split(model, trajectory)
    x, v = states.x, states.v
    if x.ndim != 3:
        raise ValueError(f"diagnose: the trajectory's positions must have shape (T, points, 2) (one run; vmap diagnose "
                         f"for a batch), got {x.shape}")
    dtype = x.dtype
    eps = float(jnp.finfo(dtype).eps)
    rtol = default_rtol(dtype) if rtol is None else rtol
    flat_x, flat_v = x.reshape(x.shape[0], x.shape[1] * 2), v.reshape(v.shape[0], v.shape[1] * 2)
    size, speed = jnp.max(jnp.abs(flat_x), axis=1), jnp.max(jnp.abs(flat_v), axis=1)
    finite = jnp.isfinite(size) & jnp.isfinite(speed)   # (NaN propagates through max; inf is not finite)
    times = jnp.broadcast_to(jnp.asarray(states.t, dtype), x.shape[:1])
    n = x.shape[1]
    cond = None
    if kind == "mechanism":
        mech = model
        lengths = [jnp.ravel(mech.dist.L), jnp.ravel(mech.line.L)]
        lengths = jnp.concatenate([jnp.asarray(a, dtype) for a in lengths])
        longest = jnp.max(lengths) if lengths.size else 1.0
        shortest = jnp.min(lengths) if lengths.size else 1.0

        def one(xk, vk, tk):
            q, qd = xk.reshape(-1), vk.reshape(-1)
            phi, rate = jax.jvp(mech.phi, (q, tk), (qd, jnp.ones_like(tk)))
            return jnp.max(jnp.abs(phi), initial=0.0), jnp.max(jnp.abs(rate * mech.on), initial=0.0)

        pos, vel = jax.vmap(one)(x, v, times)
        if conditioning:
            r = mech.nominal_rank if mech.nominal_rank >= 0 else min(mech.n_rows, 2 * mech.n)

            def cond_one(xk, tk):
                J = jax.jacfwd(mech.phi)(xk.reshape(-1), tk)
                piv = pivot_sequence(J, mech.on)[3]
                c = jnp.min(piv[:r], initial=jnp.inf)
                return jnp.where(jnp.isfinite(c), c, jnp.inf)

            cond = jax.lax.map(lambda a: cond_one(*a), (x, times), batch_size=256)
            cond = jnp.where(finite, cond, jnp.inf)
    else:
        chain = model
        if chain.n > 1:
            longest, shortest = jnp.max(chain.l), jnp.min(chain.l)
        else:
            longest = shortest = 1.0
        pos, vel = _chain_errors(chain, x, v)
    pos_tol, vel_tol = _tolerances(longest, shortest, n, eps, rtol, size, speed)
    exhausted = None if reports is None else jnp.asarray(reports.exhausted, bool)
    return _Measures(finite, pos, pos_tol, vel, vel_tol, times, cond, exhausted)


@compiled
def diagnose(model: Model, trajectory: State | tuple[EventState, StepReport], *, rtol: float | None = None,
             singular_tol: float | None = None) -> Report:
    """The :class:`Report` of a run: whether it is finite, stays on its constraints, passes close to a singular
    configuration, and (events) how often a quantum used up its budget.

    ``model`` is the chain or mechanism that was simulated; ``trajectory`` what the rollout returned as its second
    output: the States of :func:`~diffchain.rollout` (of a chain or a mechanism), or the (EventStates,
    StepReports) of :func:`~diffchain.event_rollout`. ``rtol`` (default ``max(1e-2, eps ** (1/3))`` of the states'
    dtype) sets the constraint tolerance (positions ``rtol`` times the longest rod, rates ``100 rtol``) and
    ``singular_tol`` (default ``sqrt(eps)``) the conditioning below which a step counts as singular (module
    docstring). Works under ``jit`` and ``vmap`` (a report per batch element); for a mechanism the conditioning costs
    one pivoting of the constraint Jacobian per step (about what one solver call costs).
    """
    m = _measures(model, trajectory, rtol, conditioning=True)
    dtype = m.pos.dtype
    T = m.pos.shape[0]
    eps = float(jnp.finfo(dtype).eps)
    singular_tol = eps ** 0.5 if singular_tol is None else singular_tol
    over = m.finite & ((m.pos > m.pos_tol) | (m.vel > m.vel_tol))
    cond = jnp.full((T,), jnp.inf, dtype) if m.cond is None else m.cond
    singular = cond < singular_tol
    exhausted = jnp.zeros((T,), bool) if m.exhausted is None else m.exhausted
    if T == 0:
        zero, none = jnp.zeros((), dtype), jnp.asarray(-1)
        return Report(jnp.asarray(True), jnp.asarray(True), none, zero, zero, zero, zero, none,
                      jnp.asarray(jnp.inf, dtype), jnp.asarray(singular_tol, dtype), none, jnp.asarray(0), none, none,
                      m.times)
    ratio_pos = jnp.where(m.finite, m.pos / m.pos_tol, -jnp.inf)
    ratio_vel = jnp.where(m.finite, m.vel / m.vel_tol, -jnp.inf)
    kp, kv = jnp.argmax(ratio_pos), jnp.argmax(ratio_vel)
    first_nonfinite, first_violation, first_singular = _first(~m.finite), _first(over), _first(singular)
    firsts = jnp.stack([first_nonfinite, first_violation, first_singular])
    first_bad = jnp.min(jnp.where(firsts >= 0, firsts, T), initial=T)
    first_bad = jnp.where(first_bad < T, first_bad, -1)
    return Report(
        ok=first_bad < 0, finite=first_nonfinite < 0, first_nonfinite=first_nonfinite,
        violation=jnp.where(m.finite[kp], m.pos[kp], 0.0), tolerance=m.pos_tol[kp],
        rate_violation=jnp.where(m.finite[kv], m.vel[kv], 0.0), rate_tolerance=m.vel_tol[kv],
        first_violation=first_violation, conditioning=jnp.min(cond),
        singular_tolerance=jnp.asarray(singular_tol, dtype),
        first_singular=first_singular, exhausted=jnp.sum(exhausted), first_exhausted=_first(exhausted),
        first_bad=first_bad, times=m.times)


def run_checks(who: str, model, trajectory, remedy: str) -> list:
    """The checks of a result for :func:`diffchain._model.checks.runtime_checks`: raise, naming its time, when the state of
    ``trajectory`` (one entry: :func:`diffchain.step`'s new state, or a rollout's final state, :func:`check_run`) is
    not finite or off the constraints. Only scalars enter them. A failed run is not bad input: they raise a plain
    ``ValueError``, not a :class:`diffchain.InputError`."""
    m = _measures(model, trajectory)
    if m.pos.shape[0] == 0:
        return []
    over = m.finite & ((m.pos > m.pos_tol) | (m.vel > m.vel_tol))
    kn, kv = _first(~m.finite), _first(over)
    nonfinite_first = (kn >= 0) & ((kv < 0) | (kn < kv))
    violation_first = (kv >= 0) & ~nonfinite_first
    hint = HINT.format(remedy=remedy)
    path = model.serial
    what = "rod-length / slider-line" if path else "loop-closure Phi(q, t)"
    rate = "stretch rate" if path else "Phi_q q_dot + Phi_t"
    k = jnp.maximum(kv, 0)
    if who == "step":  # one new state
        nonfinite = "the new state is not finite (t = {1:.6g})"
        leaves = "the new state is off the constraints (t = {1:.6g})"
    else:
        nonfinite = "the run ends in a state that is not finite (t = {1:.6g})"
        leaves = "the run ends off its constraints (t = {1:.6g})"
    return [
        (nonfinite_first, f"{who}: {nonfinite}: the positions or velocities hold NaN or inf. {hint}",
         jnp.stack([jnp.maximum(kn, 0).astype(m.times.dtype), m.times[jnp.maximum(kn, 0)]]), ValueError),
        (violation_first, f"{who}: {leaves}: the {what} error is {{2:.3g}} (tolerance {{3:.3g}}) and its {rate} "
         f"{{4:.3g}} (tolerance {{5:.3g}}). {hint}",
         jnp.stack([k.astype(m.times.dtype), m.times[k], m.pos[k], m.pos_tol[k], m.vel[k], m.vel_tol[k]]),
         ValueError)]


def check_run(who: str, model, final, trajectory, remedy: str):
    """``(final, trajectory)`` of a rollout after :func:`run_checks` of its final state: not finite (a run that
    diverged: NaN and inf persist) or off the constraints. The final state alone, so that a caller who keeps only the
    final states pays O(n), and the trajectory need not be written (checking every step made a batched point-major
    rollout 2.4-3.5x slower); :func:`diagnose` finds the first bad step. One ``lax.cond`` of scalars; the check is tied
    to a scalar 1.0 (:func:`diffchain._model.checks.runtime_checks`), by which the final positions are then multiplied
    (exactly: the same bits, the same derivatives)."""
    from .._model.checks import runtime_checks

    one_step = jax.tree_util.tree_map(lambda a: jnp.asarray(a)[None], final)  # (an EventState: its chain's state)
    checks = run_checks(who, model, one_step, remedy)
    if not checks:
        return final, trajectory
    get_final = (lambda f: f.x) if isinstance(final, State) else (lambda f: f.state.x)
    x_final = get_final(final)
    (one,) = runtime_checks((jnp.ones((), x_final.dtype),), checks)
    return eqx.tree_at(get_final, final, x_final * one), trajectory
