"""The event rollout's integrators: velocity Verlet (the default) and the seed's quantum, plain or projected, and a
closed chain (pinned at both ends) landing on a floor and stopping at a joint limit."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc
from reference import verlet_reference

DT = 1e-3


def pinned_chain(n, span, length):
    """n points, both ends pinned (guided, a^w = 0) ``span`` apart, rods of ``length``, bent up symmetrically."""
    guided = np.zeros(n, bool)
    guided[[0, -1]] = True
    chain = dc.Chain(np.ones(n), np.full(n - 1, length), guided=guided)
    k = n - 1
    # the rods' angles from the horizontal: phi, psi, ..., -psi, -phi (k rods); their x-projections add up to span
    if k == 3:
        phi = np.arccos((span - length) / (2 * length))
        angles = [phi, 0.0, -phi]
    else:
        phi = 1.0
        psi = np.arccos(span / (2 * length) - np.cos(phi))
        angles = [phi, psi, -psi, -phi]
    pts = [np.zeros(2)]
    for a in angles:
        pts.append(pts[-1] + length * np.array([np.cos(a), np.sin(a)]))
    x = jnp.asarray(np.array(pts))
    return chain, dc.State(x, jnp.zeros_like(x))


def energy(chain, start, traj):
    return np.concatenate([[float(dc.energy(chain, start))], np.asarray(jax.vmap(lambda s: dc.energy(chain, s))(traj))])


@pytest.mark.slow
@pytest.mark.parametrize("integrator", [dc.VelocityVerlet(), dc.SeedQuantum()], ids=["verlet", "seed"])
def test_event_rollout_is_the_plain_scheme_between_events(integrator):
    """Where nothing happens an event rollout is its integrator's scheme: references diffchain.rollout with the
    seed's quantum, and velocity Verlet written out with diffchain.forward_dynamics (:func:`verlet_reference`; the
    plain rollout's velocity Verlet evaluates a at the start of every step again, the event rollout reuses the last
    call: they differ by O(dt^3) per step)."""
    chain, state = pinned_chain(5, 2.0, 0.8)
    events = dc.Events(chain.n, ground=-5.0)
    _, (traj, rep) = jax.jit(lambda s: dc.event_rollout(chain, events, dc.EventState(s), None, DT, n_steps=300,
                                                        integrator=integrator))(state)
    if isinstance(integrator, dc.VelocityVerlet):
        ref = jax.jit(lambda s: verlet_reference(chain, s, None, DT, 300, integrator.stab(DT)))(state)
    else:
        _, ref = jax.jit(lambda s: dc.rollout(chain, s, None, DT, n_steps=300, integrator=integrator))(state)
    assert int(np.asarray(rep.events).sum()) == 0
    np.testing.assert_allclose(traj.state.x, ref.x, rtol=0, atol=1e-12)
    np.testing.assert_allclose(traj.state.v, ref.v, rtol=0, atol=1e-10)


@pytest.mark.slow
def test_velocity_verlet_events_are_second_order_in_energy():
    """The closed chain swinging freely for 0.5 s: the largest energy error shrinks 16x when dt shrinks 4x with
    velocity Verlet (second order), 4x with the seed's quantum (first order in the velocity)."""
    chain, state = pinned_chain(5, 2.0, 0.8)
    events = dc.Events(chain.n, ground=-5.0)

    def error(integrator):
        run = jax.jit(lambda dt: dc.event_rollout(chain, events, dc.EventState(state), None, dt, n_steps=2000,
                                                  integrator=integrator)[1][0].state)  # one program for both dt
        out = []
        for dt, steps in ((1e-3, 500), (2.5e-4, 2000)):  # the same 0.5 s
            E = energy(chain, state, jax.tree.map(lambda q: q[:steps], run(dt)))
            out.append(np.abs(E - E[0]).max())
        return out[0] / out[1]

    verlet, seed = error(dc.VelocityVerlet()), error(dc.SeedQuantum())
    assert verlet > 10 and 3 < seed < 5, (verlet, seed)  # (4^2 = 16 asymptotically; 4^1 = 4)


def four_bar(span, l1, l2, l3, phi):
    """A four-bar as a chain of 4 points between two pins (0, 0) and (span, 0): crank l1 at angle phi, coupler l2,
    rocker l3, on the upper branch."""
    B, D = l1 * np.array([np.cos(phi), np.sin(phi)]), np.array([span, 0.0])
    d = np.linalg.norm(D - B)
    a = (l2**2 - l3**2 + d**2) / (2 * d)
    u = (D - B) / d
    C = B + a * u + np.sqrt(l2**2 - a**2) * np.array([-u[1], u[0]])
    chain = dc.Chain(np.ones(4), np.array([l1, l2, l3]), guided=np.array([True, False, False, True]))
    x = jnp.asarray(np.array([[0.0, 0.0], B, C, D]))
    return chain, dc.State(x, jnp.zeros_like(x))


def scenario(name):
    """(chain, start, events, torques, the joint with a stop). The four-bar's rocker-coupler joint swings into its
    stop and is held there by gravity until a crank torque (from 0.9 s) drives it off; its crank-coupler point then
    lands. The 5-point chain's second joint hits its stop as it falls; its middle point lands."""
    if name == "four-bar":
        chain, state = four_bar(1.0, 0.5, 0.9, 0.7, 1.9)
        events = dc.Events(4, ground=-0.2, theta_max=[np.inf, np.inf, -0.9])
        return chain, state, events, jnp.zeros((2500, 4)).at[900:, 0].set(-8.0), 2
    chain, state = pinned_chain(5, 2.0, 0.8)
    events = dc.Events(5, ground=-0.9, theta_max=[np.inf, 1.2, np.inf, np.inf])
    return chain, state, events, jnp.zeros((2000, 5)), 1


@pytest.mark.slow
@pytest.mark.parametrize("name", ["four-bar", "5-point-chain"])
def test_closed_chain_lands_on_a_floor_and_stops_at_a_limit(name):
    """A four-bar (a chain of 4 points between two pins) and a 5-point chain pinned at both ends, under gravity, with a
    joint stop and a floor; velocity Verlet, projected. References: the floor and the stop (nothing beyond them by
    more than 1e-9); the rods and pins (closure residual <= 1e-8); the joint that hits its stop stops there (its
    angular velocity 0 at the end of the hit's quantum) and is held; the point that lands sticks (velocity 0); an
    impact or a stop may only remove energy (a quantum with an event gains no more than the quiet quanta of the run,
    the integrator's own error)."""
    chain, state, events, tau, j = scenario(name)
    floor = float(events.z0[0, 1])
    integrator = dc.Projected(dc.VelocityVerlet())
    final, (traj, rep) = jax.jit(lambda s: dc.event_rollout(chain, events, dc.EventState(s), dc.Control(tau=tau), DT,
                                                            integrator=integrator))(state)
    x = np.asarray(traj.state.x)
    assert x[..., 1].min() >= floor - 1e-9
    rods = np.linalg.norm(np.diff(x, axis=1), axis=-1) - np.asarray(chain.l)
    pins = np.abs(x[:, [0, -1]] - np.asarray(state.x)[[0, -1]]).max()
    assert np.abs(rods).max() <= 1e-8 and pins <= 1e-8
    angles = np.asarray(jax.vmap(dc.joint_angles)(traj.state))[:, j]
    assert angles.max() <= float(events.theta_max[j]) + 1e-9
    hits = np.flatnonzero(np.asarray(rep.limit_hits)[:, j])
    impacts = np.flatnonzero(np.asarray(rep.impacts).any(-1))
    assert len(hits) >= 1 and len(impacts) >= 1, (hits, impacts)
    k = hits[0]
    omega = np.asarray(jax.vmap(dc.joint_velocities)(traj.state))[:, j]
    assert np.asarray(traj.held)[k, j] and abs(omega[k]) < 1e-9
    landed = np.asarray(final.stuck)
    assert landed.any() and np.abs(np.asarray(final.state.v)[landed]).max() < 1e-9
    E = energy(chain, state, traj.state)
    dE, event = np.diff(E), np.asarray(rep.events) > 0
    work = np.asarray(tau).any(-1)  # (the torque's work is no gain of the events')
    assert dE[event & ~work].max() <= max(dE[~event & ~work].max(), 0.0) + 1e-9


@pytest.mark.slow
def test_closed_chain_derivative_matches_central_differences():
    """The four-bar with its floor and stop (events armed, none reached in 0.2 s), the default integrator: the
    derivative of a final-state loss with respect to a crank torque (forward mode: one input; reverse mode through
    events is tests/events/test_event_gradients.py's) equals central differences."""
    chain, state, events, _, _ = scenario("four-bar")
    steps = 200

    def loss(torque):
        u = dc.Control(tau=jnp.zeros((steps, chain.n)).at[:, 0].set(torque))
        out, (_, rep) = dc.event_rollout(chain, events, dc.EventState(state), u, DT)
        return out.state.x[1, 1] + 0.3 * out.state.v[2, 0], rep.events.sum()

    (value, n_events), (g, _) = jax.jit(lambda u: jax.jvp(loss, (u,), (1.0,)))(0.2)
    assert int(n_events) == 0
    f, h = jax.jit(lambda u: loss(u)[0]), 1e-5
    fd = (float(f(0.2 + h)) - float(f(0.2 - h))) / (2 * h)
    assert np.isfinite(float(g)) and abs(float(g) - fd) <= 1e-6 * max(1.0, abs(fd)), (float(g), fd)
