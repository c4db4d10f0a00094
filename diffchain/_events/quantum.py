"""Ground contact, angle limits, anomalies and adaptive substep halving (seed 000 §7, §12, §12.2).

Events switch constraints on and off through **masks in the state** (:class:`EventState`), never by changing shapes:

* a point that reaches an obstacle line sticks (seed §7): it becomes a guided point whose prescribed acceleration is
  the PD correction towards its pin (a^w = -(x - x_pin)/T^2 - 2 v/T, seed eq. 33); it is released when the ground would
  have to pull it (z^T R < 0 for the reaction R, i.e. z^T F > 0 for the other forces on it, seed §7.2);
* a joint that reaches an angle limit becomes active (seed §12.1) with alpha^w = 0 plus the PD correction towards the
  limit angle (:func:`diffchain._constraints.held.active_terms`); it is released when its constraint torque tau^w would
  pull it into the limit;
* impacts are inelastic impulses (seed §7 Z1–Z3): the velocity jump is the M-orthogonal projection of v onto the
  velocities the constraints allow (rods, stuck points, held joints, sliders; :func:`impulse_projection`), which is
  the seed's rule (external forces and velocity-product terms zeroed, a^w = -v for the pinned points, alpha^w =
  -omega^z for the held joints; then v += a) where the rods do not stretch, and which never raises the kinetic
  energy, also where the constrained velocities degenerate (a nearly straight run between pins);
* chattering and scuffing (seed §12.2, Figs. 4–5): every release adds 1 to a per-constraint counter that decays with
  time constant ``chatter_window`` quanta; a constraint whose counter has reached ``chatter_count`` is not released
  (kept active "where physically unjustified", as the seed prescribes) until the counter decays;
* Euler with back-tracking (seed §12.2, Fig. 6): the velocity error of a sub-quantum of length h is estimated by
  max_i |a_i' - a_i| h (a at its start, a' at its end); above ``threshold`` the sub-quantum is redone at half the
  length, down to ``max_depth`` halvings; after an accepted sub-quantum the length doubles again.

Bounded work. One quantum runs at most ``slots`` slots; each slot makes **exactly one** solver call, whose inputs are
selected by masks: *refresh* (accelerations at the current state, with the release test), *trial* (integrate a
sub-quantum with the seed's constant acceleration, then accelerations at its end: accept or halve) or *event* (a
trial that crossed a contact or limit is cut at the event time, found from the seed's quadratic
(:mod:`diffchain._events.detection`), and the slot's solver call is the impulse). A quiet quantum takes two slots, or
one when it starts with the accelerations that the last quantum's final call found there under the same control ("first
same as last", :class:`EventState`). That one slot is first tried written for the quiet case alone
(:func:`_quiet_trial`, without the slot's masks, selects and conds), whose result is then the quantum. Where the
trial crosses something, is rejected or releases a constraint, the quantum is run by the general slots from its start
instead; the slots run only until the quantum is complete (:func:`diffchain._xla.batching.scan_until`: a ``lax.scan``
of slots skipped by a cond once it is; under ``vmap`` only on the chains that need them, gathered into a small batch
when they are few). The slot is traced once (under ``vmap`` also its gathered copy), not once per slot. The other
rarely needed parts (the held-joint solver, the event times, the reactions) are skipped under ``vmap`` when no chain
needs them (:func:`diffchain._xla.batching.rare_cond`). A last forced slot finishes the quantum whatever happened, so
every quantum advances exactly dt; the report says when the budget ran out. No ``while_loop``: everything is
reverse-differentiable, also ``grad`` of a ``vmap``.
"""
from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from jax.typing import ArrayLike

from .._simulate.integrators import Integrator, SeedQuantum, VelocityVerlet
from .._simulate.projection import Projected
from .._solvers.base import Solver
from .._solvers.choice import check_solver
from .._xla.batching import rare_cond, scan_until
from .._model.checks import compiled
from .._model.forces import _speed
from .detection import _ends_beyond, _quantum, detect, limit_arc
from .._model.model import Model
from .state import EventState, Events, StepReport, _cache, _none
from .._state import Control, State
from .constraints import onto_obstacles, project_onto_active
from .dynamics import _where, constrained_dynamics


# the name of the slots' result, which event_rollout's reverse pass keeps instead of recomputing the slots
SLOTS = "diffchain.event_slots"


class _Carry(eqx.Module):
    """What one slot of a quantum hands the next (:func:`_event_quantum`)."""

    es: EventState    # the event state at the sub-quantum's start (its cache fields empty)
    a: jax.Array      # (N, 2) the accelerations there, from the last solver call
    tau_w: jax.Array  # the held joints' torques of that call
    R: jax.Array      # the stuck points' reactions of that call
    valid: jax.Array  # () whether a, tau_w, R belong to the state (else the next slot is a refresh)
    t: jax.Array      # () the time reached in the quantum, 0 to dt
    level: jax.Array  # () int: halvings of the sub-quantum length, dt / 2**level
    rep: StepReport   # the quantum's report so far
    left: jax.Array   # (2, F) the contacts and limits released in this quantum (the scuffing test)
    kick: jax.Array   # () constraints switched on again by the scuffing test: their impulse comes next


def _error_estimate(a1, a, h):
    """Seed §12.2 (Euler with back-tracking): the velocity error of a sub-quantum of length h, max_i |a'_i - a_i| h.
    The norm's derivative is finite where a point's acceleration did not change
    (:func:`~diffchain._model.forces._speed`): the estimate is carried in the StepReport, and JAX before 0.7 sends its
    zero cotangent through that norm."""
    d = a1 - a
    return jnp.max(_speed(d[..., 0], d[..., 1])) * h


def _release_tests(chain: Model, events: Events, es: EventState, R, tau_w):
    """Seed §7.2 and §12.1: a stuck point leaves when the ground would pull it (z^T R < 0); a held joint when its
    constraint torque would pull it into the limit (side * tau_w > 0). Chatter-locked constraints stay.

    "Pull" means beyond round-off: 1e-9 of the chain's weight (times its longest rod for torques), so that a
    reaction that is zero up to round-off (e.g. right after an impact driven by inertia alone) holds the same way
    whichever solver computed it."""
    tol = 1e-9 * chain.weight()
    pull = jnp.sum(es.normal * R, -1) < -tol
    into = es.side * tau_w > tol * chain.length_scale()
    unlocked = es.chatter < events.chatter_count
    return es.stuck & pull & unlocked[0], es.held & into & unlocked[1]


def _velocity(integrator, v, a, a1, h):
    """The velocity at the end of an accepted sub-quantum of length h from the accelerations at its start (a) and at
    its end (a1, with the predicted velocity v + h a): the seed's v + h a, or velocity Verlet's v + h (a + a1) / 2.

    With velocity Verlet a1 is also the next sub-quantum's start accelerations (the cache, "first same as last"),
    although the velocity there is v + h (a + a1) / 2 and not the predicted one: the predictor-corrector form without
    a second evaluation (PEC), second order like the form with one (its difference is O(h^2) in a1). A quantum whose
    cache is not valid (a changed control, an event, a release) starts with a call at its start state."""
    if isinstance(integrator, VelocityVerlet):
        return v + 0.5 * h * (a + a1)
    return v + h * a


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _control_change(accel, a, operands, control, cached):
    """The change of the start accelerations ``a`` between the ``cached`` control and ``control``, where the two are
    equal (the cache is used only then): zero, with the derivative of ``accel(operands, control)`` along the
    controls' tangents (``accel`` is affine in the control, so that is A (d control - d cached), A = da/du at the
    start).

    The cached accelerations are those of the last quantum's control; without this term a derivative would take them
    as independent of this quantum's control, and a sequence of equal controls would have the derivatives of another
    program than the one a perturbation of a single control runs (a refresh at the start)."""
    return _zero(a, operands, control, cached)


def _zero(a, *args):
    """Zeros like ``a``, batched under ``vmap`` where any of ``args`` is (as the tangent of :func:`_control_change`
    is: JAX requires its value and its tangent to be batched alike)."""
    leaves = [x for x in jax.tree_util.tree_leaves(args) if jnp.issubdtype(x.dtype, jnp.inexact) and x.size]
    # (one element of each: a select, not 0 * x, since the arrays hold infinities, e.g. absent limits)
    return sum((jnp.where(jnp.isnan(x.reshape(-1)[0]), 0.0, 0.0).astype(a.dtype) for x in leaves), jnp.zeros_like(a))


@_control_change.defjvp
def _control_change_jvp(accel, primals, tangents):
    a, operands, control, cached = primals
    d = jax.tree_util.tree_map(lambda p, q: p - q.astype(p.dtype), tangents[2], tangents[3])
    return _zero(a, *primals[1:]), jax.jvp(lambda u: accel(operands, u), (control,), (d,))[1]


def _quiet_trial(chain: Model, events: Events, es: EventState, a, control: Control, dt, stab, solver, integrator):
    """The one slot of a quantum in which nothing happens, written for that case alone: the trial over the whole
    quantum from the cached start accelerations ``a`` (seed §3), its solver call at the end and the error
    estimate. Returns x1, v1, the call's (a, tau_w, R), the estimate, and whether the trial is quiet: nothing crosses
    an obstacle or a limit, the estimate accepts it and no constraint is released at its end. Then the first slot of
    :func:`event_step` would do exactly this and finish the quantum: both call the same functions (:func:`_quantum`,
    :func:`_ends_beyond`, :func:`constrained_dynamics`, :func:`_error_estimate`, :func:`_release_tests`)."""
    x, v = es.state.x, es.state.v
    h = dt
    x1, v1 = _quantum(x, v, a, h)
    (_, hit), (_, _, hit_hi, hit_lo) = _ends_beyond(chain, events, es, x, x1)
    limit = jnp.any(hit_hi | hit_lo)
    a1, tau_w, R = constrained_dynamics(chain, events, es, x1, v1, es.state.t + h, control, stab, False, solver)
    v1 = _velocity(integrator, v, a, a1, h)
    err = _error_estimate(a1, a, h)
    quiet = (((err <= events.threshold) | (events.max_depth == 0)) & ~jnp.any(hit) & ~limit
             & ~jnp.any(jnp.stack(_release_tests(chain, events, es, R, tau_w))))
    return x1, v1, (a1, tau_w, R), err, quiet


@compiled
def event_step(model: Model, events: Events, es: EventState, control: Control, dt: ArrayLike, *,
               solver: Solver | None = None, integrator: Integrator = VelocityVerlet()) -> tuple[EventState, StepReport]:
    """One quantum of length ``dt`` with contacts, angle limits, anomalies and adaptive halving (seed §7, §12).

    Returns the new :class:`EventState` and a :class:`StepReport`. Within a quantum the positions follow the seed's
    quadratic (the event times are its roots); ``integrator`` sets the velocity update:
    :class:`diffchain.VelocityVerlet`
    (the default: second order; on a swinging chain its energy error is a few thousandths of the seed's) or
    :class:`diffchain.SeedQuantum` (the seed as written, whose energy grows), and its ``stab_factor`` the PD drift
    correction time constant stab_factor * dt; :class:`diffchain.Projected` around either moves the state onto the
    constraints switched on after each quantum.
    ``solver``: :class:`diffchain.Recursive` (O(n), point masses; the default for a chain) or a dense solver such as
    :class:`diffchain.KKT` (rigid links too; the default, and the only kind, for a mechanism).

    ``model``: a chain or a mechanism (its contacts are its points, its limits its angle
    stops, its control the motor torques ``Control(tau=...)``); ``control`` None: no input. A ``dt`` known at trace
    time must be > 0 (events need forward time; a traced one is not checked).
    """
    chain = model  # (a chain or a mechanism)
    from .._simulate.rollout import dt_checks

    check_event_integrator(integrator, "event_step")
    dt_checks(dt, "event_step", traced=False)  # (a known dt: > 0, events need forward time)
    if control is None:  # no input: the cached control's pytree, zero
        control = jax.tree_util.tree_map(jnp.zeros_like, es.control)
    return _event_quantum(chain, events, es, control, dt, solver, integrator)


def check_event_integrator(integrator, who):
    """TypeError unless ``integrator`` is one whose positions follow the seed's quadratic within a quantum (or such an
    integrator, projected)."""
    base = integrator.base if isinstance(integrator, Projected) else integrator
    if not isinstance(base, (VelocityVerlet, SeedQuantum)):
        got = (f"the class {integrator.__name__}" if isinstance(integrator, type)
               else f"{integrator!r} (of type {type(integrator).__name__})")
        raise TypeError(f"{who}: integrator must be VelocityVerlet() or SeedQuantum() (their positions follow the "
                        f"seed's constant-acceleration quadratic, whose roots are the event times), or one of them "
                        f"Projected(), got {got}")


# an inner program: traced once per model, shapes and options, so that every program around it (a rollout, its
# gradient, their vmaps) reuses that trace and its derivatives (the first gradient of an event rollout traces in
# ~8 s, the next in ~0.2 s); XLA inlines it, the compiled code is the same
@eqx.filter_jit
def _event_quantum(chain: Model, events: Events, es: EventState, control: Control, dt, solver, integrator,
                   timed=True):
    """:func:`event_step` from ``es``. ``timed`` False (or a traced boolean) holds the event times' derivatives at
    zero (the times themselves are unchanged): a derivative of the quantum without the saltation term
    (:func:`diffchain.event_linearize`)."""
    projected = integrator if isinstance(integrator, Projected) else None
    integrator = integrator.base if projected else integrator
    n, dtype = chain.n_features, chain.dtype
    if events.n != n:
        raise ValueError(f"event_step: the Events are for {events.n} features, the mechanism has {n} (its points and "
                         "stops): build them with dc.Events(mechanism, ...)" if not chain.serial else
                         f"event_step: the Events are for n = {events.n} points, the chain has n = {n}")
    chain.check_inputs(es.state, control, "event_step")
    if control.F is None:  # the cached control holds point forces (zero without any): the same pytree
        control = eqx.tree_at(lambda u: u.F, control, jnp.zeros_like(es.control.F), is_leaf=_none)
    solver = check_solver(solver, "event_step", chain)
    dt = jnp.asarray(dt, dtype)
    stab = jnp.inf if integrator.stab_factor is None else integrator.stab_factor * dt  # inf: no correction
    t0 = es.state.t
    zb, zi = jnp.zeros((n,), bool), jnp.zeros((), jnp.int32)
    report0 = StepReport(zb, zb, zb, zb, zi, zi, zi, zi, jnp.zeros((), bool), jnp.zeros((), dtype),
                         jnp.full((2,), jnp.inf, dtype), jnp.full((), -jnp.inf, dtype))

    def solve(es_, x, v, t, impulse):  # (t: the call's time, for a mechanism's drivers)
        return constrained_dynamics(chain, events, es_, x, v, t, control, stab, impulse, solver)

    def release(es_, rep, R, tau_w, gate):
        """Where ``gate``, switch off the constraints that pass the release test; count the releases (chatter
        counters)."""
        rel_c, rel_l = (rel & gate for rel in _release_tests(chain, events, es_, R, tau_w))
        es_ = eqx.tree_at(lambda e: (e.stuck, e.held, e.chatter), es_,
                          (es_.stuck & ~rel_c, es_.held & ~rel_l, es_.chatter + jnp.stack([rel_c, rel_l])))
        rep = eqx.tree_at(lambda r: (r.releases, r.limit_releases), rep, (rep.releases | rel_c, rep.limit_releases | rel_l))
        return es_, rep, (rel_c, rel_l)

    # first same as last: with the same control, the accelerations the last quantum found at its end are those at
    # this start; only the release test has to be redone (the chatter counters have decayed since)
    # (a control that *is* the cached one, as :func:`event_rollout` passes with no input, needs no comparison)
    compared = [(p, q) for p, q in zip(jax.tree_util.tree_leaves(control), jax.tree_util.tree_leaves(es.control))
                if p is not q]
    hit = functools.reduce(jnp.logical_and, [jnp.all(p == q) for p, q in compared], es.fresh.astype(bool))
    # the slots carry the event masks only; the cache fields are set again at the end
    es0 = eqx.tree_at(_cache, es, (None,) * 5)
    if compared:  # the cached accelerations with the derivative of a change of control (:func:`_control_change`)
        arrays, static = eqx.partition((chain, events, es0, stab), eqx.is_array)

        def accel(arrays, u):  # the start accelerations under the control u (affine in u)
            chain_, events_, es_, stab_ = eqx.combine(arrays, static)
            s = es_.state
            return constrained_dynamics(chain_, events_, es_, s.x, s.v, s.t, u, stab_, False, solver)[0]

        cached = jax.tree_util.tree_map(lambda p, q: q.astype(p.dtype), control, es.control)
        es = eqx.tree_at(lambda e: e.a, es, es.a + _control_change(accel, es.a, arrays, control, cached))

    def start(es):  # the slots' first carry: the release test at the start
        es_rel, rep0, (rel_c, rel_l) = release(eqx.tree_at(_cache, es, (None,) * 5), report0, es.R, es.tau_w, hit)
        released = jnp.any(rel_c) | jnp.any(rel_l)
        return _Carry(es=es_rel, a=es.a, tau_w=es.tau_w, R=es.R, valid=hit & ~released, t=jnp.zeros((), dtype),
                      level=zi, rep=rep0, left=jnp.stack([rel_c, rel_l]), kick=jnp.zeros((), bool))

    def cut(c, h):
        """Detect the first event of the sub-quantum [t, t + h] (seed §7, §12.1) and build the state at it, with the
        constraints that fire there (everything crossing within round-off of the earliest time) switched on. A
        ``kick`` is the impulse of constraints switched on again by the scuffing test: at once (s_e = 0), adding none."""
        es_, a, t, kick = c.es, c.a, c.t, c.kick
        x, v = es_.state.x, es_.state.v
        (s_c, hit_c, k), (s_l, hit_l, side) = detect(chain, events, es_, x, v, a, h)
        s_e = jnp.where(kick, 0.0, jnp.minimum(jnp.min(s_c, initial=h), jnp.min(s_l, initial=h)))
        if timed is not True:  # the event time's derivative scaled by ``timed`` (0: held), its value kept
            s_e = jax.lax.stop_gradient(s_e) + jnp.asarray(timed, s_e.dtype) * (s_e - jax.lax.stop_gradient(s_e))
        event = kick | (c.valid & (jnp.any(hit_c) | jnp.any(hit_l)))
        tol = 1e-9 * dt
        new_c = ~kick & hit_c & (s_c <= s_e + tol)
        new_l = ~kick & hit_l & (s_l <= s_e + tol)
        xe, ve = x + s_e * v + 0.5 * s_e**2 * a, v + s_e * a
        pe = chain.contact_points(xe)
        zk, z0k = events.z[k] if events.z.shape[0] else jnp.zeros_like(pe), events.z0[k] if events.z.shape[0] else pe
        proj = pe - zk * jnp.sum(zk * (pe - z0k), -1, keepdims=True)  # the pin: the contact point on the line
        # a constraint hit again in the quantum that released it is the seed's scuffing loop: lock it at once
        again = jnp.stack([new_c, new_l]) & c.left
        chatter = jnp.where(again, jnp.maximum(es_.chatter, jnp.e * events.chatter_count), es_.chatter)
        es_event = eqx.tree_at(lambda e: (e.state, e.stuck, e.pin, e.normal, e.held, e.side, e.chatter), es_,
                               (State(xe, ve, t0 + t + s_e), es_.stuck | new_c,
                                jnp.where(new_c[:, None], proj, es_.pin), jnp.where(new_c[:, None], zk, es_.normal),
                                es_.held | new_l, jnp.where(new_l, side, es_.side), chatter))
        # how fast the new constraints are met: the normal speed of an impact, the angular speed of a limit hit
        v_n = -jnp.sum(zk * chain.contact_rates(ve), -1)
        omega = jnp.abs(chain.angle_rates(xe, ve))
        approach = jnp.stack([jnp.min(jnp.where(new_c, v_n, jnp.inf), initial=jnp.inf),
                              jnp.min(jnp.where(new_l, omega, jnp.inf), initial=jnp.inf)])
        rep = c.rep
        rep = eqx.tree_at(lambda r: (r.impacts, r.limit_hits, r.events, r.slots, r.approach, r.event_time), rep,
                          (rep.impacts | (event & new_c), rep.limit_hits | (event & new_l), rep.events + event,
                           rep.slots + 1, jnp.where(event, jnp.minimum(rep.approach, approach), rep.approach),
                           jnp.where(event, t0 + t + s_e, rep.event_time)))
        return event, s_e, es_event, rep

    def slot(c, last):
        """One slot: one solver call. The last slot of the budget is forced to finish the quantum: its sub-quantum is
        the whole remaining time and is accepted without the error test; after an event there the rest drifts with
        the new velocities (a newly stuck point stays put); a refresh there integrates the rest with the accelerations
        it found."""
        es_, a, t = c.es, c.a, c.t
        x, v = es_.state.x, es_.state.v
        remaining = dt - t
        h = jnp.where(last, remaining, jnp.minimum(dt * 0.5 ** c.level.astype(dtype), remaining))
        event, s_e, es_event, rep = cut(c, h)
        trial = c.valid & ~event
        xe, ve = es_event.state.x, es_event.state.v
        x1, v1 = _quantum(x, v, a, h)
        # the slot's one solver call: at the current state (refresh), at the trial's end, or the impulse at the event
        es_call = _where(event, es_event, es_)
        xs = jnp.where(event, xe, jnp.where(trial, x1, x))
        vs = jnp.where(event, ve, jnp.where(trial, v1, v))
        a_s, tau_w, R = solve(es_call, xs, vs, t0 + jnp.where(event, t + s_e, jnp.where(trial, t + h, t)), event)
        # trial: accept or halve (seed §12.2 Euler with back-tracking)
        err = _error_estimate(a_s, a, h)
        reject = trial & (err > events.threshold) & (c.level < events.max_depth) & ~last
        accept = trial & ~reject
        forced = last & ~c.valid & ~event  # a refresh in the last slot
        rep = eqx.tree_at(lambda r: (r.substeps, r.halvings, r.error, r.exhausted), rep,
                          (rep.substeps + (accept | last), rep.halvings + reject,
                           jnp.where(accept, jnp.maximum(rep.error, err), rep.error), rep.exhausted | last))
        # the new state of the slot
        t_acc = jnp.where(h >= remaining, dt, t + h)
        es_acc = eqx.tree_at(lambda e: e.state, es_, State(x1, _velocity(integrator, v, a, a_s, h), t0 + t_acc))
        es_fin = eqx.tree_at(lambda e: e.state, es_, State(*_quantum(x, v, a_s, h), t0 + dt))
        v_e = ve + a_s
        es_imp = eqx.tree_at(lambda e: e.state, es_event, State(
            jnp.where(last, xe + (h - s_e) * v_e, xe), v_e, jnp.where(last, t0 + dt, es_event.state.t)))
        es_new = _where(event, es_imp, _where(accept, es_acc, _where(forced, es_fin, es_)))
        # the forced finish detects nothing after its event or refresh: a free contact point that ends it below an
        # obstacle line is put back onto the line (its velocity kept: the next quantum finds the contact at its
        # start, s = 0, and gives it its impulse); the cached accelerations are then not those of the new state
        x_on, moved = onto_obstacles(chain, events, es_new.stuck, es_new.state.x)
        moved = last & moved
        es_new = eqx.tree_at(lambda e: e.state.x, es_new, jnp.where(moved, x_on, es_new.state.x))
        t_new = jnp.where(last, dt, jnp.where(event, t + s_e, jnp.where(accept, t_acc, t)))
        # refresh or accepted trial: a_s are the accelerations at the new state; test releases there
        check = ~event & ~reject & ~forced
        es_new, rep, (rel_c, rel_l) = release(es_new, rep, R, tau_w, check)
        released = jnp.any(rel_c) | jnp.any(rel_l)
        # scuffing (seed §12.2, Fig. 4): a constraint released by an earlier slot of this quantum whose free motion
        # (this refresh, computed without it) heads straight back into the obstacle or limit is switched on again,
        # locked for chatter_window quanta, and gets its impulse in the next slot (it may be moving in: another
        # point's impact can have pushed it since its release). The releases of this quantum are undone with it where
        # the constraint still holds (within 1e-6 of the longest rod / 1e-6 rad): the impulse would push them in.
        left = c.left
        refresh = ~c.valid & ~event & ~last
        p = chain.contact_points(x)
        gap = jnp.sum(es_new.normal * (p - es_new.pin), -1)  # of a contact point from its line

        # ("heads back": its normal velocity or angular velocity changes sign within one quantum)
        def heads_back(_):
            back_c = left[0] & ~es_new.stuck & (jnp.sum(es_new.normal * chain.contact_rates(v + dt * a_s), -1) < 0)
            omega, alpha = chain.angle_rates(x, v, a_s)
            omega_next = omega + dt * alpha
            back_l = left[1] & ~es_new.held & (es_new.side * omega_next > 0)
            lo, hi, _ = limit_arc(events)
            limit = jnp.where(es_new.side > 0, hi, lo)
            undo = jnp.any(back_c) | jnp.any(back_l)
            on_c = (left[0] | rel_c) & ~es_new.stuck & (gap <= 1e-6 * chain.length_scale())
            on_l = (left[1] | rel_l) & ~es_new.held & (es_new.side * (chain.feature_angles(x, es_new.theta) - limit)
                                                        >= -1e-6)
            return jnp.stack([back_c | (undo & on_c), back_l | (undo & on_l)])

        back = rare_cond(refresh & jnp.any(left), heads_back, lambda _: jnp.zeros_like(left), None)
        lock = jnp.where(back, jnp.e * events.chatter_count, es_new.chatter)
        # pinned where it is now, projected on its line (it may have slid since it stuck)
        pin = p - es_new.normal * gap[:, None]
        es_new = eqx.tree_at(lambda e: (e.stuck, e.pin, e.held, e.chatter), es_new,
                             (es_new.stuck | back[0], jnp.where(back[0][:, None], pin, es_new.pin),
                              es_new.held | back[1], jnp.maximum(es_new.chatter, lock)))
        valid = check & ~released & ~jnp.any(back) & ~moved
        left = left | jnp.stack([rel_c, rel_l])
        level = jnp.where(reject, c.level + 1, jnp.where(accept, jnp.maximum(c.level - 1, 0), c.level))
        keep = lambda old, new: jnp.where(reject, old, new)  # noqa: E731
        return _Carry(es=es_new, a=keep(a, a_s), tau_w=keep(c.tau_w, tau_w), R=keep(c.R, R), valid=valid | reject,
                      t=t_new, level=level, rep=rep, left=left, kick=jnp.any(back))

    # most quanta are quiet: there the quiet trial's result is what the first slot gives; elsewhere the slots run the
    # quantum from its start (scan_until, see the module docstring)
    # the trial starts from es itself: where it is taken nothing was released at the start, so es is the carry's
    x1, v1, (a1, tau_w1, R1), err1, quiet = _quiet_trial(chain, events, es0, es.a, control, dt, stab, solver,
                                                         integrator)
    rep1 = eqx.tree_at(lambda r: (r.slots, r.substeps, r.error), report0, (report0.slots + 1, report0.substeps + 1,
                                                                            jnp.maximum(report0.error, err1)))

    def quiet_carry(_):  # the carry after the quiet trial as the first slot: the quantum is complete
        return _Carry(es=eqx.tree_at(lambda e: e.state, es0, State(x1, v1, t0 + dt)), a=a1, tau_w=tau_w1, R=R1,
                      valid=jnp.ones((), bool), t=dt, level=zi, rep=rep1, left=jnp.zeros((2, n), bool),
                      kick=jnp.zeros((), bool))

    last = jnp.arange(events.slots) == events.slots - 1
    done = lambda c: c.t >= dt  # noqa: E731
    rel_c, rel_l = _release_tests(chain, events, es0, es.R, es.tau_w)
    trial_ok = hit & ~(jnp.any(rel_c) | jnp.any(rel_l)) & quiet  # = start(es).valid & quiet
    decay = jnp.exp(-1.0 / events.chatter_window)
    u = jax.tree_util.tree_map(lambda p, q: p.astype(q.dtype), control, es.control)

    def finish(c):  # the chatter counters decay once per quantum, the continuous angles follow the new state (the
        # slots keep those of the start, within pi of every angle of the quantum)
        es_ = c.es
        es_ = eqx.tree_at(lambda e: (e.chatter, e.theta), es_, (es_.chatter * decay,
                                                                  chain.feature_angles(es_.state.x, es_.theta)))
        if projected:  # onto every constraint switched on: rods, sliders, pinned and stuck points, held joints (the
            # cache stays: the projection moves the state by its drift only)
            es_ = eqx.tree_at(lambda e: e.state, es_, project_onto_active(chain, events, es_, projected.iterations))
        es_ = eqx.tree_at(_cache, es_, (c.a, c.tau_w, c.R, None, c.valid), is_leaf=_none)
        return es_, c.rep  # (the control is set after the cond)

    # a cond: on one chain a quiet quantum skips the start's release test (under vmap it is a select of both)
    carry = scan_until(slot, jax.lax.cond(trial_ok, quiet_carry, start, es), last, done, events.rare_share)
    out, rep = finish(jax.tree.map(lambda v: checkpoint_name(v, SLOTS), carry))
    return eqx.tree_at(lambda e: e.control, out, u, is_leaf=_none), rep


