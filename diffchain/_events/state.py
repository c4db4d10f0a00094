"""What an event rollout carries (seed 000 §7, §12): the :class:`Events` (obstacle lines, angle limits, the budget of
one quantum), the :class:`EventState` (the state with the masks of what is switched on), the :class:`StepReport` of a
quantum, and the check of a start (:func:`check_event_state`). The dynamics are in :mod:`diffchain._events.quantum`."""
from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
from jax.typing import ArrayLike, DTypeLike

from .detection import _slack, limit_arc
from .._model.geometry import wrapped_joint_angles
from .._model.model import Model
from .._state import Control, State
from .._model.checks import _require, runtime_checks
from .._model.rods import check_state
from .._model.host import array, xp, zeros as host_zeros
from .._model.geometry import wrap_angle
from .._xla.batching import RARE_SHARE


class Events(eqx.Module):
    """What can happen to a chain of n points: obstacle lines, angle limits, and the budget of one quantum.

      z0:        (K,2) a point of each obstacle line (seed §7)
      z:         (K,2) its unit normal, pointing to the free side: point i penetrates when z^T (x_i - z0) < 0
      contact:   (n,)  which points can touch the obstacles (guided points never do)
      theta_min, theta_max: scalars or (n-1,): joint angle limits theta_i in [theta^m_i, theta^M_i] (seed §12.1;
                 -inf/inf = none) of the angles of :func:`diffchain.joint_angles` (joint 1 against the world); stored
                 as (n,) with no limit on joint n. A limit is a stop in the limit's direction that the joint's
                 continuous angle cannot pass from either side: with only theta^m the joint may turn the other way
                 round up to theta^m + 2 pi (where it is stopped, coming back to the same direction), with only
                 theta^M down to theta^M - 2 pi (:func:`diffchain._events.detection.limit_arc`)
      threshold: halving threshold on the velocity error estimate max_i |a_i' - a_i| h, in m/s (seed §12.2: "e.g. 1")
      max_depth: at most this many halvings of a sub-quantum (static)
      slots:     solver calls per quantum (static); a quiet quantum uses 1 (2 when the control changed), an impact
                 2 more, a halving 1-2 more, a constraint switched on again by the scuffing test 2 more (its impulse
                 and a refresh)
      chatter_count, chatter_window: a constraint released ``chatter_count`` times within about ``chatter_window``
                 quanta stays active (seed §12.2 chattering and scuffing)
      rare_share: under ``vmap``, a quantum's later slots (after an impact, a limit hit, a rejected trial) run only
                 on the copies that need them, gathered into a batch of ``rare_share`` of the batch (at least 8
                 copies) while they are that few, and on the whole batch otherwise (static; default 1/16). It sets
                 speed only, never results: a larger share costs more where few copies have events, a smaller one
                 runs the whole batch sooner.
    """

    z0: jax.Array
    z: jax.Array
    contact: jax.Array
    theta_min: jax.Array
    theta_max: jax.Array
    threshold: jax.Array
    chatter_count: jax.Array
    chatter_window: jax.Array
    max_depth: int = eqx.field(static=True)
    slots: int = eqx.field(static=True)
    rare_share: float = eqx.field(static=True, default=RARE_SHARE)

    def __init__(self, n: int | Model, *, ground: ArrayLike | None = None,
                 lines: tuple[npt.ArrayLike, npt.ArrayLike] | None = None, contact: npt.ArrayLike | None = None,
                 theta_min: npt.ArrayLike | None = None, theta_max: npt.ArrayLike | None = None,
                 threshold: ArrayLike = 1.0, max_depth: int = 3, slots: int = 8, chatter_count: ArrayLike = 3,
                 chatter_window: ArrayLike = 20, rare_share: float = RARE_SHARE, dtype: DTypeLike = float) -> None:
        """``ground=y`` is the horizontal line {y = ground} with normal +y; ``lines=(z0, z)`` any set of lines.

        ``n``: a chain's number of points, or the model (a chain or a mechanism). For a mechanism
        ``contact`` names the points that can touch the obstacles (default: every moving point), the angle limits are
        its stops (:meth:`MechanismBuilder.limit`), and the masks have one entry per feature
        (:attr:`diffchain.Model.n_features`)."""
        dt = jnp.result_type(dtype)
        stops = None
        if isinstance(n, Model) and not n.serial:
            n, contact, *stops = _mechanism_features(n, contact, theta_min, theta_max, dt)
        elif isinstance(n, Model):
            n = n.n_features
        np_ = xp(ground, lines, contact, theta_min, theta_max)  # (known values: built on the host, :mod:`host`)
        z0, z = [], []
        if ground is not None:
            z0.append(np_.asarray([[0.0, ground]], dt))
            z.append(np_.asarray([[0.0, 1.0]], dt))
        if lines is not None:
            z0.append(np_.reshape(np_.asarray(lines[0], dt), (-1, 2)))
            z.append(np_.reshape(np_.asarray(lines[1], dt), (-1, 2)))
        self.z0 = array(np_.concatenate(z0) if z0 else np.zeros((0, 2)), dt)
        self.z = array(np_.concatenate(z) if z else np.zeros((0, 2)), dt)
        self.contact = array(np.ones((n,), bool) if contact is None else contact, bool)

        def full(v, fill, name):  # joints 1..n-1; joint n (minus the last link's absolute angle) has no limit
            v = np_.asarray(fill if v is None else v, dt)
            _require(v.ndim == 0 or v.shape == (n - 1,), f"Events: {name} must be a scalar or have one entry per "
                     f"link, shape (n-1,) = ({n - 1},) for n = {n} points (joint 1 against the world), got {v.shape}")
            return array(np_.concatenate([np_.broadcast_to(v, (n - 1,)), np_.full((1,), fill, dt)]), dt)

        self.theta_min, self.theta_max = stops or (full(theta_min, -np.inf, "theta_min"),
                                                   full(theta_max, np.inf, "theta_max"))
        _require(self.z0.shape == self.z.shape, f"Events: z0 and z must both be (K, 2), got {self.z0.shape}, {self.z.shape}")
        self.z0, self.z, self.theta_min, self.theta_max = runtime_checks(
            (self.z0, self.z, self.theta_min, self.theta_max), _value_checks(self.z0, self.z, self.theta_min,
                                                                             self.theta_max))
        self.threshold, self.chatter_count, self.chatter_window = (array(v, dt) for v in (threshold, chatter_count,
                                                                                           chatter_window))
        self.max_depth, self.slots = int(max_depth), int(slots)
        _require(isinstance(rare_share, (int, float)) and not isinstance(rare_share, bool) and 0 < rare_share <= 1,
                 f"Events: rare_share must be a number in (0, 1] (a share of the batch), got {rare_share!r}")
        self.rare_share = float(rare_share)

    def __check_init__(self):
        n = self.contact.shape[0]
        _require(self.z0.shape == self.z.shape, f"Events: z0 and z must both be (K, 2), got {self.z0.shape}, {self.z.shape}")
        _require(self.theta_min.shape == (n,) and self.theta_max.shape == (n,),
                 f"Events: theta_min and theta_max must have shape ({n},)")
        _require(self.slots >= 3, f"Events: slots must be >= 3 (refresh, trial, forced finish), got {self.slots}")
        _require(self.max_depth >= 0, f"Events: max_depth must be >= 0, got {self.max_depth}")

    @property
    def n(self) -> int:
        return self.contact.shape[0]


def _value_checks(z0, z, lo, hi) -> list:
    """The checks of the values of :class:`Events` (now where they are known, when the program runs where they are
    traced: :func:`diffchain._model.checks.runtime_checks`): finite obstacle points, unit normals, and angle limits
    with theta_min < theta_max, within [-pi, pi] where finite (-inf, inf: none). Only a few numbers enter them: the
    first bad line's or joint's values."""
    xp_ = xp(z0, z, lo, hi)
    checks = []
    if z0.shape[0]:
        bad_point = ~xp_.all(xp_.isfinite(z0), axis=-1)
        norms = xp_.sqrt(xp_.sum(z * z, axis=-1))
        bad_normal = ~(xp_.abs(norms - 1) < 1e-6)
        checks += [(bad_point, "Events: the obstacle points z0 must be finite, got the point {got}",
                    z0[xp_.argmax(bad_point)]),
                   (bad_normal, "Events: obstacle normals z must be unit vectors (norm 1 to 1e-6), got a normal of "
                    "norm {got}", norms[xp_.argmax(bad_normal)])]
    order = ~(lo < hi)
    wrapped = (xp_.isfinite(lo) & (lo < -np.pi)) | (xp_.isfinite(hi) & (hi > np.pi))
    first, far = xp_.argmax(order), xp_.argmax(wrapped)
    return checks + [
        (order, "Events: need theta_min < theta_max at every joint (-inf, inf: no limit): joint {0:.0f} has "
                "theta_min = {1:.6g}, theta_max = {2:.6g}", xp_.stack([first + 1.0, lo[first], hi[first]])),
        (wrapped, "Events: angle limits must lie in [-pi, pi] (joint angles are wrapped to (-pi, pi]): joint {0:.0f} "
                  "has theta_min = {1:.6g}, theta_max = {2:.6g}", xp_.stack([far + 1.0, lo[far], hi[far]]))]


def _mechanism_features(mech, contact, theta_min, theta_max, dt):
    """A mechanism's (F, contact mask (F,), theta_min (F,), theta_max (F,)) for :class:`Events`."""
    if theta_min is not None or theta_max is not None:
        raise ValueError("Events: a mechanism's angle limits are its stops, set by MechanismBuilder.limit(name, "
                         "body_a, body_b, lo, hi); got theta_min/theta_max")
    F, names = mech.n_features, mech.point_names
    if contact is None:  # every moving point
        mask = np.any(np.asarray(mech.W).reshape(len(names), -1) != 0, -1)
    elif all(isinstance(c, str) for c in contact):
        unknown = [c for c in contact if c not in names]
        _require(not unknown, f"Events: contact names unknown points {unknown} (the mechanism's points: {names})")
        mask = np.isin(np.asarray(names), np.asarray(contact, dtype=object))
    else:
        mask = np.asarray(contact, bool)
        _require(mask.shape == (len(names),), f"Events: contact must be point names or one bool per point of the "
                 f"mechanism, shape ({len(names)},), got {mask.shape}")
    def pad(v, fill, dtype=dt):
        np_ = xp(v)
        return array(np_.concatenate([np_.asarray(v, dtype), np_.full((F - v.shape[0],), fill, dtype)]))

    return F, pad(mask, False, bool), pad(mech.limit_lo, -np.inf), pad(mech.limit_hi, np.inf)


@eqx.filter_jit
def _features(model, x):
    """The contact points, their angles (the wrapped joint angles of a chain, ``model`` None) and the zero control of
    the points x (..., N, 2) of an :class:`EventState` (one program, also for a state built outside ``jit``)."""
    lead = x.shape[:-2]
    if model is None:
        return x, wrapped_joint_angles(x), Control(F=jnp.zeros(lead + (x.shape[-2], 2), x.dtype))
    f = lambda y: (model.contact_points(y), model.feature_angles(y))  # noqa: E731
    for _ in lead:
        f = jax.vmap(f)
    control = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, lead + a.shape), model.zero_control(x.dtype))
    return *f(x), control


class EventState(eqx.Module):
    """A :class:`State` and the event masks (seed §7, §12): the constraints that are currently switched on.

      stuck:   (n,)   points stuck to an obstacle;  pin (n,2) where,  normal (n,2) the obstacle's normal z
      held:    (n,)   joints held at a limit;       side (n,) +1 at theta^M, -1 at theta^m
      chatter: (2,n)  release counters of the contacts and the limits (seed §12.2 chattering / scuffing)
      theta:   (n,)   the joint angles on their continuous branch (a joint turned once around is at theta + 2 pi),
                      against which the limits are tested; by default the wrapped angles of ``state``, in (-pi, pi]
                      (give it, e.g. theta^m + 2 pi - 0.5, to start a joint with a one-sided limit on the far branch)

    and what the last quantum's final solver call found at ``state`` ("first same as last"): accelerations ``a``
    (n,2), constraint torques ``tau_w`` (n,) and reactions ``R`` (n,2) under ``control``, with the constraints above.
    ``fresh`` says they are valid; then a next quantum with the same control skips its refresh call (with velocity
    Verlet the last call is at the predicted velocity: the cache is part of that scheme, see
    :func:`diffchain._events.quantum._velocity`). The cache
    assumes the chain, the events and dt of that quantum: :func:`event_rollout` clears ``fresh`` at its start; clear
    it yourself (``eqx.tree_at(lambda e: e.fresh, es, False)``) before calling :func:`event_step` with a changed one.
    """

    state: State
    stuck: jax.Array
    pin: jax.Array
    normal: jax.Array
    held: jax.Array
    side: jax.Array
    chatter: jax.Array
    theta: jax.Array
    a: jax.Array
    tau_w: jax.Array
    R: jax.Array
    control: Control
    fresh: jax.Array

    def __init__(self, state: State, stuck: npt.ArrayLike | None = None, pin: npt.ArrayLike | None = None,
                 normal: npt.ArrayLike | None = None, held: npt.ArrayLike | None = None,
                 side: npt.ArrayLike | None = None, chatter: npt.ArrayLike | None = None,
                 theta: npt.ArrayLike | None = None, *, model: Model | None = None) -> None:
        """``model``: the model whose state this is (its masks have one entry per feature,
        :attr:`diffchain.Model.n_features`); a chain's state needs none (its features are its points and joints)."""
        dt, lead = state.x.dtype, state.x.shape[:-2]
        n = state.x.shape[-2] if model is None else model.n_features
        points, angles, control = _features(model, state.x)
        zeros = lambda shape, dtype=dt: host_zeros(lead + shape, dtype, state.x)  # noqa: E731
        self.state = state
        self.stuck = zeros((n,), bool) if stuck is None else array(stuck, bool)
        self.pin = points if pin is None else array(pin, dt)
        self.normal = zeros((n, 2)) if normal is None else array(normal, dt)
        self.held = zeros((n,), bool) if held is None else array(held, bool)
        self.side = zeros((n,)) if side is None else array(side, dt)
        self.chatter = zeros((2, n)) if chatter is None else array(chatter, dt)
        self.theta = angles if theta is None else array(theta, dt)
        self.a, self.R = zeros(state.x.shape[-2:]), zeros((n, 2))
        self.tau_w = zeros((n,))
        self.control = control
        self.fresh = zeros((), bool)

    @property
    def x(self) -> jax.Array:
        return self.state.x

    @property
    def v(self) -> jax.Array:
        return self.state.v

    @property
    def t(self) -> jax.Array:
        return self.state.t


class StepReport(eqx.Module):
    """What happened during one quantum (all fixed-shape arrays, so reports stack along a rollout).

      impacts, limit_hits:            (n,) points that stuck / joints that hit a limit
      releases, limit_releases:       (n,) points that left the ground / joints that left a limit
      substeps:  accepted sub-quanta;  halvings: rejected ones (error estimate above threshold)
      events:    event cuts (impulses);  slots: solver calls used;  exhausted: the budget ran out (forced finish)
      error:     largest accepted velocity-error estimate max_i |a'_i - a_i| h
      approach:  (2,) the slowest approach of an impact (its normal speed towards the line, m/s) and of a limit hit
                 (its joint's angular speed, rad/s) in this quantum; inf where none (:func:`diffchain.gradient_trust`)
      event_time: the time of the quantum's last event (impact, limit hit or impulse); -inf where none
    """

    impacts: jax.Array
    limit_hits: jax.Array
    releases: jax.Array
    limit_releases: jax.Array
    substeps: jax.Array
    halvings: jax.Array
    events: jax.Array
    slots: jax.Array
    exhausted: jax.Array
    error: jax.Array
    approach: jax.Array
    event_time: jax.Array


def _cache(es):  # the fields of EventState filled by the last quantum's final solver call
    return es.a, es.tau_w, es.R, es.control, es.fresh


def _none(x):
    return x is None


def check_event_state(chain: Model, events: Events, es: EventState, tol: float = 1e-6) -> EventState:
    """Raise if ``es`` is not a valid start: off the rod/slider manifold (:func:`diffchain.check_state`), a free contact
    point below an obstacle line, or a free joint outside its angle limits (by more than ``tol``, relative to the
    longest rod / in radians; its continuous angle, on the branch of ``es.theta``, against
    :func:`diffchain._events.detection.limit_arc`). Works under ``jit``; returns ``es``."""
    model, F = chain, chain.n_features
    general = not model.serial
    if events.n != F:
        raise ValueError(f"Events are for {events.n} features, the mechanism has {F} (its points and stops): build "
                         "them with dc.Events(mechanism, ...)" if general else
                         f"Events are for n = {events.n} points, the chain has n = {F}")
    if es.stuck.shape[-1] != F:
        raise ValueError(f"EventState: its masks have {es.stuck.shape[-1]} entries, the model has {F} features: build "
                         "it with dc.EventState(state, model=mechanism) for a mechanism")
    if general:
        model.check_inputs(es.state, None, "check_event_state")
        closure = jnp.max(jnp.abs(model.phi(es.state.x.reshape(-1), es.state.t)), initial=0.0)
        (x,) = runtime_checks((es.state.x,), [(closure > tol * model.length_scale(), f"check_event_state: the state "
                              f"must satisfy the mechanism's constraints Phi(q, t) = 0 (to {tol:g} of its longest "
                              f"body), got |Phi| = {{0:.3g}}", closure)])
        state = State(x, es.state.v, es.state.t)
    else:
        state = check_state(chain, es.state, tol)
    scale = model.length_scale()
    free = model.free_contacts(events.contact, es.stuck)
    depth = _slack(events.z, events.z0, model.contact_points(state.x))
    below = jnp.any(free[:, None] & (depth < -tol * scale))
    theta = es.theta + wrap_angle(model.feature_angles(state.x) - es.theta)
    lo, hi, limited = limit_arc(events)
    out = ~es.held & limited & ((theta > hi + tol) | (theta < lo - tol))
    deepest = -jnp.min(jnp.where(free[:, None], depth, jnp.inf), initial=jnp.inf)
    excess = jnp.max(jnp.where(~es.held & limited, jnp.maximum(theta - hi, lo - theta), -jnp.inf), initial=-jnp.inf)
    (x,) = runtime_checks((state.x,), [
        (below, f"check_event_state: every free contact point must start on or above its obstacle lines (to {tol:g} "
                f"of the longest rod), got one {{0:.3g}} m below", deepest),
        (jnp.any(out), f"check_event_state: every free joint must start within its angle limits (to {tol:g} rad), got "
                       f"one {{0:.3g}} rad outside", excess)])
    return eqx.tree_at(lambda e: e.state.x, es, x)
