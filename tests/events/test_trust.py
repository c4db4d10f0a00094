"""The gradient-trust report (:func:`diffchain.gradient_trust`) against closed forms: a point mass thrown under a
ceiling (its apex clearance and its impact speed on the floor, exact under constant gravity), pushed up almost off
the floor (its smallest reaction), a pendulum swinging short of a joint limit, into it, and held at it, and the
pendulum as a mechanism against a stop. Each group is one compiled program over its cases (``vmap``)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc

pytestmark = pytest.mark.slow

G = 9.81
CEILING = 3.0
Y0 = 1.0


def _throws():
    """The point mass from (0, 1), floor y = 0, ceiling y = 3: thrown at vy = 6 (apex 0.165 below the ceiling), at
    vy = 6.263 (grazing: 7.5e-4 below), at 6.266 (it touches the ceiling), and at rest on the floor (stuck) under an
    upward force that rises to m g - 0.05 and falls again."""
    point = dc.Chain(jnp.array([1.0]), jnp.zeros((0,)))
    events = dc.Events(1, lines=(jnp.array([[0.0, 0.0], [0.0, CEILING]]), jnp.array([[0.0, 1.0], [0.0, -1.0]])))
    dt, T = 1e-2, 150
    t = dt * jnp.arange(T)
    lift = (G - 0.05) * jnp.sin(np.pi * t / t[-1])
    forces = jnp.zeros((4, T, 1, 2)).at[3, :, 0, 1].set(lift)
    free = lambda vy: dc.EventState(dc.State(jnp.array([[0.0, Y0]]), jnp.array([[0.5, vy]])))  # noqa: E731
    resting = dc.EventState(dc.State(jnp.zeros((1, 2)), jnp.zeros((1, 2))), stuck=jnp.array([True]),
                            pin=jnp.zeros((1, 2)), normal=jnp.array([[0.0, 1.0]]))
    starts = jax.tree.map(lambda *a: jnp.stack(a), free(6.0), free(6.263), free(6.266), resting)

    def run(start, F):
        final, traj = dc.event_rollout(point, events, start, dc.Control(tau=jnp.zeros((T, 1)), F=F), dt)
        return dc.gradient_trust(point, events, start, traj, dt), final.state.x[0, 0]

    report, x_end = jax.jit(jax.vmap(run))(starts, forces)
    return report, x_end, lift


@pytest.fixture(scope="module")
def throws():
    return _throws()


def test_apex_clearance_and_impact_speed(throws):
    """Thrown at vy = 6: the apex is vy^2 / 2g above the start, at t = vy / g; it falls from there onto the floor at
    sqrt(2 g H) and t = vy / g + sqrt(2 H / g) (constant gravity: the event rollout's quadratic is exact)."""
    r, _, _ = throws
    vy = 6.0
    H = Y0 + vy**2 / (2 * G)
    np.testing.assert_allclose(r.clearance[0], CEILING - H, rtol=1e-12)
    np.testing.assert_allclose(r.clearance_time[0], vy / G, rtol=1e-12)
    np.testing.assert_allclose(r.approach[0], np.sqrt(2 * G * H), rtol=1e-12)
    np.testing.assert_allclose(r.approach_time[0], vy / G + np.sqrt(2 * H / G), rtol=1e-12)
    np.testing.assert_allclose(r.time_to_end[0], 1.5 - r.approach_time[0], rtol=1e-12)
    assert bool(r.trusted[0]) and int(r.exhausted[0]) == 0
    assert np.isinf(r.angle_clearance[0]) and np.isinf(r.limit_approach[0]) and np.isinf(r.holding[0])


def test_grazing_throw_is_flagged_and_the_result_jumps(throws):
    """At vy = 6.263 the apex passes 7.5e-4 below the ceiling (under the tolerance 1e-3 of the 1 m scale): not
    trusted. It lands where it flies 0.5 m/s for vy / g + sqrt(2 H / g). 0.003 m/s more and it touches the ceiling
    before its apex, sticks (inelastic), drops from there straight down and ends short of 0.5 vy / g: 0.4 m shorter,
    a jump that no derivative at 6.263 predicts."""
    r, x_end, _ = throws
    np.testing.assert_allclose(r.clearance[1], CEILING - Y0 - 6.263**2 / (2 * G), rtol=1e-9)
    assert not bool(r.trusted[1])
    # the ceiling met at sqrt(vy^2 - 2 g (3 - 1)) = 0.15 m/s, slower than the floor later
    np.testing.assert_allclose(r.approach[2], np.sqrt(6.266**2 - 2 * G * (CEILING - Y0)), rtol=1e-9)
    H = Y0 + 6.263**2 / (2 * G)
    np.testing.assert_allclose(x_end[1], 0.5 * (6.263 / G + np.sqrt(2 * H / G)), rtol=1e-9)
    assert x_end[2] <= 0.5 * 6.266 / G and x_end[1] - x_end[2] > 0.35


def test_near_release_reaction(throws):
    """At rest on the floor under an upward force F(t) = (m g - 0.05) sin(pi t / t_end): its normal reaction is
    m g - F, smallest (0.05 between two quantum ends) at the middle of the run, where it stays stuck."""
    r, _, lift = throws
    reaction = G - np.asarray(lift)
    j = int(np.argmin(reaction))
    np.testing.assert_allclose(r.reaction[3], reaction[j], rtol=1e-9)
    np.testing.assert_allclose(r.reaction_time[3], 1e-2 * (j + 1), rtol=1e-12)  # (the end of quantum j)
    assert r.reaction[3] < 0.06 and bool(r.trusted[3])  # 0.05 N > 1e-3 of its weight


def _agm(a, b):
    for _ in range(30):
        a, b = (a + b) / 2, np.sqrt(a * b)
    return a


def test_pendulum_limits():
    """A 1 m pendulum (joint angle from the x axis, hanging at -pi/2) released at rest 1 rad from the bottom:
    (a) with a limit 1.05 rad on the other side, it turns back 0.05 rad short of it, half a period later,
        T/2 = 2 sqrt(l/g) K(sin(1/2)) (the complete elliptic integral, by the arithmetic-geometric mean);
    (b) with the limit 0.5 rad on the other side, it hits it at the angular speed sqrt(2 g/l (sin(th_hit) -
        sin(th_0))) (energy), stops there (inelastic), is released at rest and, a period of its 0.5 rad swing later,
        comes back to the limit at rest: a grazing return, flagged;
    (c) held at the limit of (a) by a torque that pushes into it, tau = -(m g l |cos th| + 0.05 + cos^2(pi t /
        t_end)): the holding torque is the rest, smallest (0.05) at the middle.
    The integrator's energy error at dt = 1e-3 (second order) is below 1e-5: the tolerances of (a) and (b)."""
    chain = dc.pendulum(1)
    th0, dt, T = -np.pi / 2 + 1.0, 1e-3, 3000
    lo_a, lo_b = -np.pi / 2 - 1.05, -np.pi / 2 - 0.5
    ev_a, ev_b = dc.Events(chain, theta_min=lo_a), dc.Events(chain, theta_min=lo_b)
    swing = dc.EventState(dc.from_joint_angles(chain, jnp.array([th0])))
    held = dc.EventState(dc.from_joint_angles(chain, jnp.array([lo_a])), held=jnp.array([True, False]),
                         side=jnp.array([-1.0, 0.0]))
    t = dt * jnp.arange(T)
    push = -(G * abs(np.cos(lo_a)) + 0.05 + jnp.cos(np.pi * t / t[-1]) ** 2)
    taus = jnp.zeros((3, T, 2)).at[2, :, 0].set(push)
    stack = lambda *a: jax.tree.map(lambda *b: jnp.stack(b), *a)  # noqa: E731

    def run(events, start, tau):
        _, traj = dc.event_rollout(chain, events, start, dc.Control(tau=tau), dt)
        return dc.gradient_trust(chain, events, start, traj, dt)

    r = jax.jit(jax.vmap(run))(stack(ev_a, ev_b, ev_a), stack(swing, swing, held), taus)
    half_period = 2 * np.sqrt(1 / G) * np.pi / (2 * _agm(1.0, np.cos(0.5)))
    np.testing.assert_allclose(r.angle_clearance[0], 0.05, atol=1e-5)
    np.testing.assert_allclose(r.angle_clearance_time[0], half_period, atol=1e-5)
    np.testing.assert_allclose(r.limit_approach[1], np.sqrt(2 * G * (np.sin(th0) - np.sin(lo_b))), rtol=1e-5)
    assert 0 < r.limit_approach_time[1] < half_period
    period_b = 4 * np.sqrt(1 / G) * np.pi / (2 * _agm(1.0, np.cos(0.25)))
    assert r.angle_clearance[1] < 1e-5 and not bool(r.trusted[1])
    np.testing.assert_allclose(r.angle_clearance_time[1], r.limit_approach_time[1] + period_b, atol=5 * dt)
    holding = -np.asarray(push) - G * abs(np.cos(lo_a))
    j = int(np.argmin(holding))
    np.testing.assert_allclose(r.holding[2], holding[j], rtol=1e-9)
    np.testing.assert_allclose(r.holding_time[2], dt * (j + 1), rtol=1e-9)
    assert bool(r.trusted[0]) and bool(r.trusted[2]) and np.all(np.isinf(r.clearance))


def test_mechanism_limit_hit():
    """The same pendulum built as a mechanism (a massless body from a ground point O to a point P of 1 kg, released
    at rest 1 rad from the bottom) against a stop 0.5 rad past the bottom: the report reads the mechanism's stop as
    a chain's limit. It hits it at the angular speed of energy, sqrt(2 g (sin th_0 - sin th_hit)), at the time of
    the swing of amplitude 1 rad: sqrt(l/g) (K(k) + F(phi, k)), k = sin(1/2), sin(phi) = sin(0.5/2) / k (a quarter
    period to the bottom, then the incomplete elliptic integral; K by the arithmetic-geometric mean, F by Simpson's
    rule on 2000 intervals, both to 1e-12)."""
    th0, lo, dt = -np.pi / 2 + 1.0, -np.pi / 2 - 0.5, 1e-3
    b = dc.MechanismBuilder()
    b.ground("O", (0.0, 0.0))
    b.point("P", (np.cos(th0), np.sin(th0)), mass=1.0)
    b.body("arm", "O", "P")
    b.limit("stop", "ground", "arm", lo=lo)
    mech, start = b.build()
    events = dc.Events(mech, contact=[])
    es = dc.EventState(start, model=mech)
    r = jax.jit(lambda es: dc.gradient_trust(mech, events, es, dc.event_rollout(mech, events, es, None, dt,
                                                                                  n_steps=1500)[1], dt))(es)
    k = np.sin(0.5)
    phi = np.arcsin(np.sin(0.25) / k)
    theta = np.linspace(0.0, phi, 2001)
    w = np.r_[1, np.tile([4, 2], 999), 4, 1] * (phi / 2000) / 3
    F = w @ (1 / np.sqrt(1 - k**2 * np.sin(theta) ** 2))
    t_hit = np.sqrt(1 / G) * (np.pi / (2 * _agm(1.0, np.cos(0.5))) + F)
    np.testing.assert_allclose(r.limit_approach, np.sqrt(2 * G * (np.sin(th0) - np.sin(lo))), rtol=1e-5)
    np.testing.assert_allclose(r.limit_approach_time, t_hit, atol=1e-4)
    assert np.all(np.isinf(r.clearance)) and bool(r.trusted)
