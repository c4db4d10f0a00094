"""Whether the gradient of an event rollout can be trusted locally: :func:`gradient_trust` and its
:class:`TrustReport`.

The derivatives of :func:`diffchain.event_rollout` are those of the event sequence that happened: the impacts, limit
hits and releases that occurred, with their times moving with the inputs (seed 000 §7, §12.1). They are the
derivatives of the rollout wherever a small change of the inputs keeps that sequence; where it does not, the rollout
jumps (a contact that appears or disappears) and no derivative predicts the change. The sequence is about to change
where

* a free point passes close to an obstacle line without touching it (a *near miss*: a little lower and it hits),
  or a free joint turns back close to its limit;
* an impact or a limit hit is *grazing*: met at a small normal (angular) speed, so that its time moves by
  d(gap) / v_n, and a little less speed would miss it;
* a stuck point's normal reaction (a held joint's holding torque) dips close to zero and grows again (a little less
  and it would be released);
* the last event happens close to the end of the run (a little later and it falls outside);
* an accepted velocity-error estimate is close to the halving threshold (a little more and that sub-quantum is
  halved: another discretisation, seed §12.2), or a quantum used up its budget of solver calls.

:func:`gradient_trust` measures each of these margins on what the rollout returned (the event states after every
quantum and their :class:`~diffchain.StepReport`): fixed shapes, a few reductions over the run, under ``jit`` and
``vmap``. Between two quantum ends a free point's normal gap g(s) is taken as the quadratic with its end values of
g and of its rate v_n (exact under constant acceleration, e.g. a point in flight under gravity): a near miss is a
quantum in which v_n turns from approaching (< 0) to receding (>= 0), at the gap
g* = g_0 - v_0^2 dt / (2 (v_1 - v_0)); the same for a joint's margin to its limits.
"""
from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._events.detection import _slack, limit_arc
from .._events.state import EventState, Events, StepReport
from .._model.checks import describe
from .._model.model import Model, check_model


class TrustReport(eqx.Module):
    """The margins of an event rollout to a change of its event sequence (:func:`gradient_trust`), smallest over the
    run, each with the time where it occurs (nan where there is none: the margin is then inf).

      clearance, clearance_time:          near miss of a free contact point: its smallest gap to a line it did not
                                          touch, at a turn of its normal velocity (m)
      angle_clearance, angle_clearance_time: a free joint turning back short of its limit (rad)
      approach, approach_time:            the slowest impact: its normal speed towards the line (m/s)
      limit_approach, limit_approach_time: the slowest limit hit: its joint's angular speed (rad/s)
      reaction, reaction_time:            a stuck point's normal reaction at a local minimum, staying stuck (N)
      holding, holding_time:              a held joint's holding torque at a local minimum, the joint staying held (N m)
      time_to_end:                        the run's end time minus its last event's (s)
      halving_margin:                     the smallest |ln(error / threshold)| of an accepted quantum's error estimate
      exhausted:                          quanta whose budget of solver calls ran out (int)
      trusted:                            every margin above its tolerance (:func:`gradient_trust`)
    """

    clearance: jax.Array
    clearance_time: jax.Array
    angle_clearance: jax.Array
    angle_clearance_time: jax.Array
    approach: jax.Array
    approach_time: jax.Array
    limit_approach: jax.Array
    limit_approach_time: jax.Array
    reaction: jax.Array
    reaction_time: jax.Array
    holding: jax.Array
    holding_time: jax.Array
    time_to_end: jax.Array
    halving_margin: jax.Array
    exhausted: jax.Array
    trusted: jax.Array


def _smallest(values, times):
    """The smallest of ``values`` (any shape, inf: none) and its entry of ``times`` (broadcast; nan where none)."""
    shape = jnp.broadcast_shapes(jnp.shape(values), jnp.shape(times))
    values, times = (jnp.broadcast_to(a, shape).reshape(-1) for a in (values, times))
    if not values.size:  # (no obstacle line, or a run too short)
        return jnp.asarray(jnp.inf, values.dtype), jnp.asarray(jnp.nan, values.dtype)
    i = jnp.argmin(values)
    return values[i], jnp.where(jnp.isfinite(values[i]), times[i], jnp.nan)


def _turn(g0, g1, r0, r1, dt, where):
    """The smallest gap of g(s) over a quantum [0, dt] given by its end values g0, g1 and rates r0, r1 (the quadratic
    with these rates) where the rate turns from approaching (r0 < 0) to receding (r1 >= 0), and the time of that
    minimum from the quantum's start; inf and 0 elsewhere."""
    turn = where & (r0 < 0) & (r1 >= 0)
    dr = jnp.where(turn, r1 - r0, 1.0)
    s = -r0 * dt / dr
    low = jnp.minimum(jnp.minimum(g0, g1), g0 - r0**2 * dt / (2.0 * dr))
    return jnp.where(turn, jnp.maximum(low, 0.0), jnp.inf), jnp.where(turn, s, 0.0)


def _dip(values, where):
    """``values`` (T, ...) at their interior local minima (entries 1..T-2 no larger than both neighbours, all three
    ``where``); inf elsewhere. Returns the (T-2, ...) minima."""
    mid = values[1:-1]
    local = where[:-2] & where[1:-1] & where[2:] & (mid <= values[:-2]) & (mid <= values[2:])
    return jnp.where(local, mid, jnp.inf)


def gradient_trust(model: Model, events: Events, start: EventState, trajectory: tuple[EventState, StepReport],
                   dt: ArrayLike, *, tol: float = 1e-3) -> TrustReport:
    """The margins of an event rollout to a change of its event sequence (module docstring): where its gradient
    stops predicting a small change of its inputs. ``start``: the rollout's start :class:`~diffchain.EventState`;
    ``trajectory``: the (EventStates, StepReports) that :func:`diffchain.event_rollout` returns; ``dt`` its time step.

    ``trusted`` is every margin above its tolerance: ``tol`` (default 1e-3) times the model's longest length L for
    the gaps, ``tol`` rad for the angles; for the approach speeds the speed at which a point decelerated by g (the
    model's weight per unit mass) would have stopped that gap short, sqrt(2 g tol L), and sqrt(2 (g / L) tol) for the
    angular speeds; ``tol`` times the weight for the reactions (times L for the torques), dt for the time to the end,
    ``tol`` for the halving margin; and no exhausted quantum. A margin under its tolerance does not make the
    gradient wrong: it says that a change of the inputs of about that relative size may change what happens, and
    with it the result by more than the gradient predicts.

    Works under ``jit`` and ``vmap`` (over rollouts)."""
    check_model(model, "gradient_trust")
    if not isinstance(events, Events):
        raise TypeError(f"gradient_trust: events must be a diffchain.Events, got {describe(events)}")
    if not isinstance(start, EventState):
        raise TypeError(f"gradient_trust: start must be the rollout's start EventState, got {describe(start)}")
    if (not isinstance(trajectory, tuple) or len(trajectory) != 2 or not isinstance(trajectory[0], EventState)
            or not isinstance(trajectory[1], StepReport)):
        raise TypeError("gradient_trust: trajectory must be the (EventStates, StepReports) that event_rollout "
                        f"returns, got {describe(trajectory)}")
    states, reports = trajectory
    if states.state.x.ndim != start.state.x.ndim + 1:
        raise ValueError(f"gradient_trust: the trajectory's states must have one leading time axis more than the "
                         f"start (one rollout; vmap for a batch), got x of shape {states.state.x.shape} and a start "
                         f"of shape {start.state.x.shape}")
    es = jax.tree.map(lambda a, b: jnp.concatenate([jnp.asarray(a)[None], b]), start, states)  # T + 1 quantum ends
    x, v, t = es.state.x, es.state.v, es.state.t
    dt = jnp.asarray(dt, x.dtype)
    L = model.length_scale()
    weight = model.weight()
    mass = jnp.sum(model.m) if model.serial else jnp.trace(model.M) / 2
    g = weight / mass

    # near misses of the contacts: free at both ends of a quantum, no impact in it; every line
    points, rates = jax.vmap(model.contact_points)(x), jax.vmap(model.contact_rates)(v)
    gap = jax.vmap(lambda p: _slack(events.z, events.z0, p))(points)                  # (T+1, F, K)
    rate = jax.vmap(lambda r: _slack(events.z, 0.0 * events.z0, r))(rates)
    free = jax.vmap(lambda s: model.free_contacts(events.contact, s))(es.stuck)       # (T+1, F)
    quiet = (free[:-1] & free[1:] & ~reports.impacts)[..., None]
    low, s = _turn(gap[:-1], gap[1:], rate[:-1], rate[1:], dt, quiet)
    clearance, clearance_time = _smallest(low, t[:-1, None, None] + s)

    # joints turning back short of a limit: the margins to the upper and the lower limit
    lo, hi, limited = limit_arc(events)
    omega = jnp.asarray(jax.vmap(model.angle_rates)(x, v))  # (T+1, F)
    theta = es.theta
    free_l = (limited & ~es.held[:-1] & ~es.held[1:] & ~reports.limit_hits)
    lows = [_turn(m[:-1], m[1:], r[:-1], r[1:], dt, free_l) for m, r in ((hi - theta, -omega), (theta - lo, omega))]
    angle_clearance, angle_clearance_time = _smallest(jnp.stack([lows[0][0], lows[1][0]]),
                                                      t[None, :-1, None] + jnp.stack([lows[0][1], lows[1][1]]))

    # impacts and limit hits: their approach speeds (event_step records them), at the quantum's last event
    approach, approach_time = _smallest(reports.approach[:, 0], reports.event_time)
    limit_approach, limit_approach_time = _smallest(reports.approach[:, 1], reports.event_time)

    # stuck points and held joints whose reaction dips and grows again (the reactions of a valid cache)
    normal = jnp.where(es.fresh[:, None], jnp.sum(es.normal * es.R, -1), jnp.inf)
    reaction, reaction_time = _smallest(_dip(normal, es.stuck), t[1:-1, None])
    torque = jnp.where(es.fresh[:, None], -es.side * es.tau_w, jnp.inf)
    holding, holding_time = _smallest(_dip(torque, es.held), t[1:-1, None])

    time_to_end = t[-1] - jnp.max(reports.event_time, initial=-jnp.inf)
    ratio = reports.error / events.threshold
    halving_margin = jnp.min(jnp.where(ratio > 0, jnp.abs(jnp.log(jnp.where(ratio > 0, ratio, 1.0))), jnp.inf),
                             initial=jnp.inf)
    exhausted = jnp.sum(reports.exhausted)
    trusted = ((clearance > tol * L) & (angle_clearance > tol) & (approach > jnp.sqrt(2 * g * tol * L))
               & (limit_approach > jnp.sqrt(2 * g / L * tol)) & (reaction > tol * weight) & (holding > tol * weight * L)
               & (time_to_end > dt) & (halving_margin > tol) & (exhausted == 0))
    return TrustReport(clearance, clearance_time, angle_clearance, angle_clearance_time, approach, approach_time,
                       limit_approach, limit_approach_time, reaction, reaction_time, holding, holding_time,
                       time_to_end, halving_margin, exhausted, trusted)
