"""Three event defects found by checking event rollouts against closed forms, and random drops (seed 000 §7, §12).

* a one-sided angle limit that a joint driven once around passed by wrapping (checked against the continuous angle,
  the statics of the held joint and the work of the driving torque);
* an impact that added kinetic energy where two rods lie nearly in line between two stuck points (checked against
  the M-orthogonal projection, in closed form for that pose);
* a quantum that used up its budget of solver calls and left a point below the floor (checked against the floor);
* random drops with contacts and limits on both sides or one: no energy gained at an impact, no penetration, no NaN.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc
from diffchain._events import dynamics
from reference import verlet_reference

DT = 1e-3
G = 9.81


@pytest.mark.slow
# ---------------------------------------------------------------------------------------------------------------------
# 1. one-sided limits and wrapping
@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["lower-limit", "upper-limit"])
def test_one_sided_limit_stops_a_joint_driven_once_around(sign):
    """A pendulum (unit mass and length) with only a lower limit theta^m = -1 (sign +1; mirrored: only an upper limit
    theta^M = +1), driven by a constant torque tau = 15 N m > m g l towards the free side, turns once around and comes
    back to the limit's direction from the other side. A relative angle is continuous: the joint may turn up to
    theta^m + 2 pi and no further, so there it stops and is held.

    References: the same pendulum without limits, velocity Verlet written out (tests/reference.py, the events' scheme):
    identical until it reaches
    theta^m + 2 pi, and the hit in the quantum where it does; the continuous angle (np.unwrap of the wrapped angles)
    stays in [theta^m, theta^m + 2 pi] (within the seed's angle-crossing model, §12.1: the cut is within (omega dt)^3 / 6 of
    the limit); held, the joint sits at the limit's direction and the holding torque is the statics
    tau_w = m g l cos(theta^m) - tau (moment balance about the pivot). Before the fix the wrapped angle jumped past
    +-pi into the "forbidden" range, the joint was held 2.19 rad from the limit and the drift correction flung the
    pendulum (energy -4.7 J -> 14,000 J)."""
    chain = dc.pendulum(1)
    lim, tau = -1.0 * sign, 15.0 * sign
    events = dc.Events(chain.n, **({"theta_min": lim} if sign > 0 else {"theta_max": lim}))
    T = 2500
    theta0 = -0.5 * sign
    state = dc.from_joint_angles(chain, jnp.array([theta0]))
    controls = dc.Control(tau=jnp.zeros((T, 2)).at[:, 0].set(tau))
    final, (traj, rep) = jax.jit(lambda s: dc.event_rollout(chain, events, dc.EventState(s), controls, DT))(state)
    # the free pendulum with the events' integrator (used up to the limit's time only)
    free = dc.State(jax.jit(lambda s: verlet_reference(chain, s, controls, DT, T, 5 * DT))(state).x)

    def continuous(x):
        angles = jax.vmap(lambda x: dc.joint_angles(dc.State(x)))(x)
        return np.unwrap(np.concatenate([[theta0], np.asarray(angles)[:, 0]]))  # |steps| << pi

    theta, theta_free = continuous(traj.state.x), continuous(free.x)
    assert np.all(np.isfinite(theta))
    far = lim + sign * 2 * np.pi
    lo, hi = min(lim, far), max(lim, far)
    # the cut follows the angle's quadratic in the quantum (§12.1), the point its own: at the cut the angle is off by
    # the cubic term of a point on that quadratic, omega^3 s^3 / 6 (s <= dt, omega the joint's rate at the hit)
    passed = np.flatnonzero(sign * (theta_free - far) > 0)[0]
    cubic = abs(theta_free[passed] - theta_free[passed - 1]) ** 3 / 6  # (omega dt)^3 / 6
    assert theta.min() >= lo - cubic and theta.max() <= hi + cubic, f"left [{lo}, {hi}]: {theta.min(), theta.max()}"
    hits = np.flatnonzero(np.asarray(rep.limit_hits)[:, 0])
    assert len(hits) == 1, f"one hit expected, got quanta {hits}"
    k = hits[0]  # theta[k + 1] is the angle after quantum k
    assert k == np.flatnonzero(sign * (theta_free - far) > 0)[0] - 1, "the hit is where the free pendulum passes"
    np.testing.assert_allclose(theta[: k + 1], theta_free[: k + 1], atol=1e-9)
    # held at the limit's direction from then on, with the statics torque
    np.testing.assert_allclose(theta[k + 3:], far, atol=1e-7)
    assert np.asarray(traj.held)[k:, 0].all() and np.all(np.asarray(traj.side)[k:, 0] == sign)
    np.testing.assert_allclose(float(final.tau_w[0]), G * np.cos(lim) - tau, rtol=1e-9)


def test_one_sided_limit_start_on_the_far_branch():
    """With only theta^m = -1, a start whose wrapped angle is -2 is below the limit on the angle's own branch and is
    refused, unless its continuous angle is given on the far branch (-2 + 2 pi): then it is allowed."""
    chain = dc.pendulum(1)
    events = dc.Events(chain.n, theta_min=-1.0)
    state = dc.from_joint_angles(chain, jnp.array([-2.0]))
    with pytest.raises(Exception, match="angle limits"):
        dc.check_event_state(chain, events, dc.EventState(state))
    es = dc.EventState(state, theta=jnp.array([-2.0 + 2 * np.pi, 0.0]))
    dc.check_event_state(chain, events, es)


# ---------------------------------------------------------------------------------------------------------------------
# 2. the impact impulse near a singular pose
def _near_line(beta, u=3e-3, w=0.1):
    """Points 1 and 3 at the ends of two unit rods bent by +-beta from the line between them; point 1 stuck at rest,
    point 3 landing: moving down at w and along the line at u; point 2 moving up at 1e-3. Rod 2 then stretches at
    about u: the drift of the seed quantum, which a quantum's PD correction leaves at this level."""
    c, s = np.cos(beta), np.sin(beta)
    x = np.array([[0.0, 0.0], [c, s], [2 * c, 0.0]])
    return x, np.array([[0.0, 0.0], [0.0, 1e-3], [u, -w]])


@pytest.mark.parametrize("solver", [dc.Recursive(), dc.ShortChain(), dc.KKT()], ids=["recursive", "short", "kkt"])
def test_impact_between_two_stuck_points_adds_no_energy(solver):
    """The inelastic impulse is the M-orthogonal projection of v onto the velocities the constraints allow,
    v+ = v - M^-1 J^T (J M^-1 J^T)^+ J v, which never adds kinetic energy. Here both ends are stuck and the two rods
    are not parallel (beta > 0): the only allowed velocity is 0, so v+ = 0 (closed form). For beta = 0 (exactly in
    line, J rank-deficient) point 2 may still move across the line: v+ = (0, v_2y). The seed's rule applied
    literally keeps the rods' stretching rates, which 1/(2 sin beta) amplifies: with beta = 1e-3 a drift of 3e-3 m/s
    gave point 2 1.5 m/s (kinetic energy 5e-3 -> 1.1 J)."""
    chain = dc.free_chain(2, mass=1.0, length=1.0)
    events = dc.Events(chain.n, ground=0.0)
    call = jax.jit(lambda es: dynamics.constrained_dynamics(chain, events, es, es.x, es.v, es.t, dc.Control(n=3), 5 * DT,
                                                      jnp.ones((), bool), solver))
    ke = lambda v: 0.5 * float(np.sum(np.asarray(v) ** 2))  # noqa: E731 (unit masses)
    for beta in (1e-1, 1e-3, 1e-6, 0.0):
        x, v = _near_line(beta)
        es = dc.EventState(dc.State(jnp.asarray(x), jnp.asarray(v)), stuck=[True, False, True],
                           normal=jnp.array([[0.0, 1.0]] * 3))
        v_new = v + np.asarray(call(es)[0])
        assert np.all(np.isfinite(v_new))
        assert ke(v_new) <= ke(v) * (1 + 1e-12), f"beta {beta}: kinetic energy {ke(v)} -> {ke(v_new)}"
        np.testing.assert_allclose(v_new[[0, 2]], 0.0, atol=1e-12)
        if beta >= 1e-3:  # regular: nothing may move
            np.testing.assert_allclose(v_new, 0.0, atol=1e-12)
        elif beta == 0.0:  # singular: point 2 keeps its velocity across the line
            np.testing.assert_allclose(v_new[1], [0.0, v[1, 1]], atol=1e-12)


def test_impact_in_a_quantum_between_two_stuck_points_adds_no_energy():
    """The same pose in an event quantum without gravity: point 1 stuck, point 3 lands 0.5 dt into the quantum. No
    force acts but the impact and the PD drift correction of rod 2 (time constant T = 5 dt: it changes the stretching
    rate u by at most 2 u dt / T over the quantum, i.e. the kinetic energy by about 1e-5 J at these speeds); the
    impact must not add energy (before the fix: 5e-3 -> 1.1 J)."""
    chain = dc.free_chain(2, mass=1.0, length=1.0, g=0.0)
    x, v = _near_line(1e-3)
    x[1:, 1] += 5e-5
    events = dc.Events(chain.n, ground=0.0)
    es = dc.EventState(dc.State(jnp.asarray(x), jnp.asarray(v)), stuck=[True, False, False],
                       normal=jnp.array([[0.0, 1.0]] * 3))
    out, rep = jax.jit(lambda e: dc.event_step(chain, events, e, dc.Control(n=3), DT))(es)
    assert bool(rep.impacts[2])
    ke = lambda v: 0.5 * float(np.sum(np.asarray(v) ** 2))  # noqa: E731
    assert ke(out.state.v) <= ke(v) + 1e-5, f"kinetic energy {ke(v)} -> {ke(out.state.v)}"
    assert np.abs(np.asarray(out.state.v)).max() <= np.abs(v).max()


@pytest.mark.slow
def test_impulse_never_adds_energy_on_random_near_singular_poses():
    """Random chains with random stuck points, held joints and rods bent by at most 1e-7..1e-2 rad (nearly straight
    runs between pins), velocities off the constraints by random drift: the impulse never raises the kinetic
    energy beyond round-off, and equals numpy's projection (pseudo-inverse) where the pose is well conditioned."""
    rng = np.random.default_rng(7)
    for n_links in (3, 5, 9):
        chain = dc.free_chain(n_links, mass=rng.uniform(0.5, 2.0, n_links + 1), length=rng.uniform(0.3, 1.0, n_links))
        events = dc.Events(chain.n, ground=0.0)
        call = jax.jit(lambda es, chain=chain, events=events: dynamics.constrained_dynamics(
            chain, events, es, es.x, es.v, es.t, dc.Control(n=chain.n), 5 * DT, jnp.ones((), bool)))
        m = np.repeat(np.asarray(chain.m), 2)
        for trial in range(6):
            bend = 10.0 ** rng.uniform(-7, -2) * rng.choice([-1.0, 1.0], n_links)
            state = dc.from_joint_angles(chain, jnp.asarray(bend), rng.normal(size=n_links), base=(0.0, 1.0),
                                         base_velocity=rng.normal(size=2))
            v = np.asarray(state.v) + 1e-3 * rng.normal(size=(chain.n, 2))  # drift off the rods
            stuck = rng.random(chain.n) < 0.4
            stuck[[0, -1]] = True
            held = np.zeros(chain.n, bool)
            held[1:-1] = rng.random(chain.n - 2) < 0.2
            es = dc.EventState(dc.State(state.x, jnp.asarray(v)), stuck=stuck, held=held)
            v_new = v + np.asarray(call(es)[0])
            ke0, ke1 = (0.5 * np.sum(m * w.reshape(-1) ** 2) for w in (v, v_new))
            assert np.all(np.isfinite(v_new)) and ke1 <= ke0 * (1 + 1e-12), (n_links, trial, ke0, ke1)
            np.testing.assert_allclose(v_new[stuck], 0.0, atol=1e-12 * (1 + np.abs(v).max()))


# ---------------------------------------------------------------------------------------------------------------------
# 3. a quantum that uses up its budget
def test_exhausted_budget_leaves_no_point_below_the_floor():
    """A tilted rod falls at 1 m/s onto the floor: its low end lands 0.3 dt into the quantum, the other 0.6 dt. With
    3 slots (refresh, the first impact's impulse, forced finish) the last slot finishes the quantum without its own
    detection; the second end must still not end below the floor (the obstacle line is the reference), and the
    report must say that the budget ran out. Then the next quanta stick it there. Before the fix it ended 0.3 mm
    below."""
    chain = dc.free_chain(1, mass=1.0, length=1.0)
    events = dc.Events(chain.n, ground=0.0, slots=3)
    x = jnp.array([[0.0, 0.3e-3], [1.0, 0.6e-3]])
    x = x.at[1, 0].set(np.sqrt(1.0 - 0.3e-3**2))
    v = jnp.array([[0.0, -1.0], [0.0, -1.0]])
    final, (traj, rep) = jax.jit(lambda e: dc.event_rollout(chain, events, e, None, DT, n_steps=20))(
        dc.EventState(dc.State(x, v)))
    assert bool(rep.exhausted[0]) and bool(rep.impacts[0, 0])
    y = np.asarray(traj.state.x[..., 1])
    assert y.min() >= -1e-9, f"penetration {y.min()}"
    assert bool(final.stuck.all())
    assert np.all(np.isfinite(np.asarray(traj.state.v)))


# ---------------------------------------------------------------------------------------------------------------------
# 4. random drops
def _random_drop(rng, k):
    """A k-link chain (random masses and lengths) with random interior limits -- both sides, lower or upper only, or
    none -- dropped spinning from a random pose inside its limits; returns (m, l, lo, hi, theta, theta_dot, base,
    base_velocity) as arrays."""
    m, l = rng.uniform(0.5, 2.0, k + 1), rng.uniform(0.2, 0.5, k)
    lo, hi = np.full(k, -np.inf), np.full(k, np.inf)
    theta = rng.uniform(-np.pi, np.pi, k)
    for j in range(1, k):  # joint 1 (against the world) is free
        kind = rng.integers(4)
        if kind == 0:
            lo[j], hi[j] = -rng.uniform(0.5, 2.5), rng.uniform(0.5, 2.5)
            theta[j] = rng.uniform(0.8 * lo[j], 0.8 * hi[j])
        elif kind == 1:
            lo[j] = -rng.uniform(0.3, 2.5)
            theta[j] = rng.uniform(lo[j] + 0.05, 3.0)
        elif kind == 2:
            hi[j] = rng.uniform(0.3, 2.5)
            theta[j] = rng.uniform(-3.0, hi[j] - 0.05)
    theta_dot = rng.normal(scale=rng.choice([2.0, 8.0]), size=k)
    return m, l, lo, hi, theta, theta_dot, rng.uniform(0.3, 1.0), np.array([rng.normal(), -rng.uniform(0.0, 3.0)])


@pytest.mark.slow
def test_random_drops_gain_no_energy_at_impacts_and_do_not_penetrate():
    """32 random drops (3, 4, 6 and 8 links, 8 each, 1.5 s, no torques), contacts with the floor and joint limits on
    both sides, on one side or none, with the seed's quantum (whose own error is this test's floor for the energy;
    velocity Verlet, whose floor is far lower: test_velocity_verlet_events_keep_energy). References: the floor (no
    point below it by more than 1e-9 m); the energy,
    conserved but for impacts (which may only remove it), the seed quantum's own O(dt^2) error and the PD drift
    correction, so that a quantum with an event may not gain more than the quiet quanta of the same drop gain; the
    limits' arcs (:func:`diffchain._events.detection.limit_arc`) for the continuous joint angles (np.unwrap of the angles of
    the positions), to within 2e-3 rad: the error that the seed quantum is allowed (quanta are accepted with a
    velocity error up to ``threshold`` = 1 m/s, seed §12.2, i.e. up to threshold dt / 2 = 0.5 mm of position per
    quantum, 2.5e-3 rad on a 0.2 m rod), which the PD correction of a held angle takes back (a held joint of a
    flailing 8-link chain was seen 1.3e-4 rad beyond its limit); the angle-crossing model of §12.1 adds less (a joint
    cut at its limit at 19 rad/s: 2.1e-5 rad). The defect this guards against is of order 1 rad."""
    rng = np.random.default_rng(2024)
    T = 1500
    for k in (3, 4, 6, 8):
        drops = [_random_drop(rng, k) for _ in range(8)]
        stack = [np.stack(a) for a in zip(*drops)]

        @jax.jit
        @jax.vmap
        def run(m, l, lo, hi, theta, theta_dot, height, base_v):
            chain = dc.free_chain(k, mass=m, length=l)
            events = dc.Events(chain.n, ground=0.0, theta_min=lo, theta_max=hi)
            state = dc.from_joint_angles(chain, theta, theta_dot, base_velocity=base_v)
            state = dc.State(state.x.at[:, 1].add(height - jnp.min(state.x[:, 1])), state.v)
            es = dc.EventState(state)
            _, (traj, rep) = dc.event_rollout(chain, events, es, None, DT, n_steps=T, integrator=dc.SeedQuantum())
            E = jnp.concatenate([dc.energy(chain, state)[None], dc.energy(chain, traj.state)])
            return jnp.concatenate([state.x[None], traj.state.x]), E, rep.events, rep.exhausted

        x, E, n_events, exhausted = map(np.asarray, run(*map(jnp.asarray, stack)))
        assert np.all(np.isfinite(x)) and np.all(np.isfinite(E)), f"{k} links: NaN"
        assert x[..., 1].min() >= -1e-9, f"{k} links: penetration {x[..., 1].min()}"
        beyond = 0.0
        for i, (m, l, lo, hi, *_) in enumerate(drops):
            dE = np.diff(E[i])
            event = n_events[i] > 0
            assert event.sum() > 0
            assert dE[event].max() <= max(dE[~event].max(), 0.0) + 1e-9, f"{k} links, drop {i}: impact gained energy"
            d = np.diff(x[i], axis=1)
            phi = np.arctan2(d[..., 1], d[..., 0])
            th = np.angle(np.exp(1j * np.concatenate([phi[:, :1], np.diff(phi, axis=1)], 1)))  # in (-pi, pi]
            th = np.unwrap(th, axis=0)  # the continuous joint angles, from the start's wrapped ones
            assert np.abs(np.diff(th, axis=0)).max() < 1.0
            for j in range(1, k):  # [theta^m, theta^M], or [theta^m, theta^m + 2 pi] / [theta^M - 2 pi, theta^M]
                if np.isfinite(lo[j]) or np.isfinite(hi[j]):
                    lo_e = lo[j] if np.isfinite(lo[j]) else hi[j] - 2 * np.pi
                    hi_e = hi[j] if np.isfinite(hi[j]) else lo[j] + 2 * np.pi
                    beyond = max(beyond, lo_e - th[:, j].min(), th[:, j].max() - hi_e)
                    assert beyond < 2e-3, (k, i, j, beyond)
        print(f"{k} links: {int((n_events > 0).sum())} quanta with events, {int(exhausted.sum())} exhausted, "
              f"deepest point {x[..., 1].min():.2e} m, farthest beyond a limit {beyond:.1e} rad")
