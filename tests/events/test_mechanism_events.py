"""Events on a mechanism built with the MechanismBuilder: a four-bar whose rocker hits an angle stop and whose coupler
point lands on a floor, through the same event rollout as a chain's (seed 000 §7, §12.1 on natural coordinates).

Every expected value comes from the rules themselves: the stop's and the point's velocities after an inelastic impact
are zero, nothing passes an obstacle, the loop closes (Phi = 0), an impact is an M-orthogonal projection (the kinetic
energy cannot rise), and the gradient is checked against central differences.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc
from diffchain import systems
from diffchain._events import dynamics
from diffchain._events.constraints import impulse_projection

LO, FLOOR, DT, T, TAU, T_ON = 1.28, -0.3, 1e-3, 1500, 30.0, 0.5


def fourbar(lo=LO):
    """Crank A0-A, coupler A-B with the point C below it, rocker B0-B with a stop at angle >= lo against the ground,
    a motor on the crank."""
    return systems.four_bar(stop=lo)


def test_bad_mechanism_event_input_is_refused():
    mech, s0 = fourbar()
    with pytest.raises(ValueError, match=r"lo < hi"):
        b = dc.MechanismBuilder()
        b.ground("O", (0, 0)), b.point("A", (1, 0), mass=1.0), b.body("link", "O", "A")
        b.limit("stop", "ground", "link", lo=1.0, hi=0.5)
    with pytest.raises(ValueError, match="unknown body 'lnk'"):
        b.limit("stop", "ground", "lnk", lo=0.5)
    with pytest.raises(ValueError, match=r"MechanismBuilder.limit"):
        dc.Events(mech, ground=FLOOR, theta_min=0.1)
    with pytest.raises(ValueError, match=r"unknown points \['Z'\]"):
        dc.Events(mech, ground=FLOOR, contact=["Z"])
    events = dc.Events(mech, ground=FLOOR, contact=["C"])
    with pytest.raises(ValueError, match=r"EventState\(state, model=mechanism\)"):
        dc.event_rollout(mech, events, dc.EventState(s0), None, DT, n_steps=2)
    with pytest.raises(ValueError, match=r"one torque per motor.*\(T, 1\)"):
        dc.event_rollout(mech, events, dc.EventState(s0, model=mech), dc.Control(tau=jnp.zeros((2, 3))), DT)
    with pytest.raises(TypeError, match="event_rollout: Recursive.. solves serial chains only .* needs a dense solver"):
        dc.event_rollout(mech, events, dc.EventState(s0, model=mech), None, DT, n_steps=2, solver=dc.Recursive())


@pytest.fixture(scope="module")
def run():
    mech, s0 = fourbar()
    events = dc.Events(mech, ground=FLOOR, contact=["C"])
    es = dc.EventState(s0, model=mech)
    tau = jnp.where(jnp.arange(T) * DT >= T_ON, TAU, 0.0)[:, None]
    final, (traj, rep) = dc.event_rollout(mech, events, es, dc.Control(tau=tau), DT,
                                          integrator=dc.Projected(dc.VelocityVerlet()))
    return mech, events, es, traj, rep


def _c(mech):
    return mech.point_names.index("C")


@pytest.mark.slow
def test_stop_hit_held_released_then_point_lands_and_sticks(run):
    mech, _, _, traj, rep = run
    q, qd = traj.state.x.reshape(T, -1), traj.state.v.reshape(T, -1)
    theta = jax.vmap(mech.limit_angles)(q)[:, 0]
    omega = jax.vmap(lambda a, b: jax.jvp(mech.limit_angles, (a,), (b,))[1])(q, qd)[:, 0]
    c = _c(mech)
    C = jax.vmap(mech.points)(q)[:, c]
    Cd = (qd @ mech.W.T).reshape(T, -1, 2)[:, c]
    hits, lands = np.flatnonzero(rep.limit_hits[:, 0]), np.flatnonzero(rep.impacts[:, c])
    released = np.flatnonzero(rep.limit_releases[:, 0])
    assert hits.size == 1 and lands.size == 1 and released.size == 1
    hit, land, off = int(hits[0]), int(lands[0]), int(released[0])
    # the stop is hit while falling, held by gravity until the motor drives it off, then C lands
    assert hit * DT < T_ON <= off * DT < land * DT
    assert np.all(traj.held[hit:off, 0]) and not np.any(traj.held[:hit, 0]) and not np.any(traj.held[off + 1:, 0])
    # inelastic: the stop's relative angular velocity and the landed point's velocity vanish, and stay so
    assert float(jnp.max(jnp.abs(omega[hit:off]))) < 1e-9
    assert float(jnp.max(jnp.abs(theta[hit:off] - LO))) < 1e-9
    assert np.all(traj.stuck[land:, c]) and not rep.releases.any()
    assert float(jnp.max(jnp.abs(Cd[land:]))) < 1e-9
    # nothing passes the floor or the stop; the loop stays closed
    assert float(jnp.min(C[:, 1])) > FLOOR - 1e-9 and float(jnp.min(C[land:, 1])) < FLOOR + 1e-9
    assert float(jnp.min(theta)) > LO - 1e-9
    closure = jax.vmap(mech.phi)(q, traj.state.t)
    assert float(jnp.max(jnp.abs(closure))) <= 1e-8
    assert not rep.exhausted.any()


@pytest.mark.slow
def test_no_impact_raises_the_energy(run):
    """The quanta with an impact change the mechanism's energy by no more than the quiet quanta do (the motor's work
    per quantum), and each impact itself, the M-orthogonal projection, lowers the kinetic energy."""
    mech, events, es, traj, rep = run
    E = jax.vmap(lambda x, v: mech.energy(dc.State(x, v)))(traj.state.x, traj.state.v)
    dE = np.diff(np.asarray(E))
    event = np.asarray(rep.events[1:] > 0)
    assert event.sum() == 2
    assert dE[event].max() <= dE[~event].max() + 1e-12
    assert dE[event].min() < -0.1  # the impacts take energy out
    # each impact alone, on random velocities, in a free, a held and a stuck state
    ke = lambda u: 0.5 * u.reshape(-1) @ mech.M @ u.reshape(-1)  # noqa: E731
    for k, key in zip((600, 400, 1400), jax.random.split(jax.random.PRNGKey(0), 3)):
        es_k = jax.tree_util.tree_map(lambda a: a[k], traj)
        v = jax.random.normal(key, es_k.state.v.shape)
        dv = impulse_projection(mech, events, es_k, es_k.state.x, v, es_k.state.t)
        assert float(ke(v + dv)) <= float(ke(v)) * (1 + 1e-12)


@pytest.mark.slow
def test_motor_gradient_matches_central_differences(run):
    """d (C's x after 0.15 s) / d tau and / d (a horizontal point force on C) on an event-free stretch after the
    release, against central differences."""
    mech, events, _, traj, _ = run
    start = jax.tree_util.tree_map(lambda a: a[550], traj)
    c = _c(mech)
    P = len(mech.point_names)

    def loss(u, es, n):  # u = (motor torque, force on C along x)
        controls = dc.Control(tau=jnp.full((n, 1), u[0]), F=jnp.zeros((n, P, 2)).at[:, c, 0].set(u[1]))
        final, _ = dc.event_rollout(mech, events, es, controls, DT, integrator=dc.Projected(dc.VelocityVerlet()),
                                    check=False)
        return mech.points(final.state.x.reshape(-1))[c, 0]

    seg = jax.jit(jax.value_and_grad(lambda u: loss(u, start, 150)))  # (one program for both)
    u0, eps = jnp.array([TAU, 2.0]), 1e-4
    g = seg(u0)[1]
    for k in range(2):
        e = jnp.zeros(2).at[k].set(eps)
        fd = (seg(u0 + e)[0] - seg(u0 - e)[0]) / (2 * eps)
        assert np.isfinite(float(g[k])) and abs(float(g[k]) - float(fd)) < 1e-6 * max(1.0, abs(float(fd)))
    assert abs(float(g[1])) > 1e-4  # (the force moves C)


@pytest.mark.slow
def test_solvers_agree_on_the_events():
    """Range space and null space give the dense KKT's run (the same events at the same quanta, states to 1e-9)."""
    mech, s0 = fourbar()
    events = dc.Events(mech, ground=FLOOR, contact=["C"])
    es = dc.EventState(s0, model=mech)
    tau = jnp.where(jnp.arange(700) * DT >= T_ON, TAU, 0.0)[:, None]
    runs = [dc.event_rollout(mech, events, es, dc.Control(tau=tau), DT, solver=s)[1]
            for s in (dc.KKT(), dc.RangeSpace(), dc.NullSpace())]
    for traj, rep in runs[1:]:
        assert np.array_equal(rep.limit_hits, runs[0][1].limit_hits)
        assert float(jnp.max(jnp.abs(traj.state.x - runs[0][0].state.x))) < 1e-9


def test_a_chain_and_the_same_chain_built_as_a_mechanism_have_the_same_events():
    """One rule for every model: a free 3-link chain with its last point stuck on the floor and its second joint held
    (seed 000 §7, §12.1), as a chain (the recursion, seed Part II) and built point by point with the MechanismBuilder
    (a dense solve of its rows, the joint as an angle stop): the same accelerations, holding torque and ground
    reaction, and the same impact (the velocities' projection in the mass metric)."""
    rng = np.random.default_rng(3)
    m, lengths = rng.uniform(0.5, 2.0, 4), rng.uniform(0.5, 1.0, 3)
    chain = dc.free_chain(3, mass=m, length=lengths)
    state = dc.from_joint_angles(chain, jnp.array([-0.4, 0.7, -0.5]), rng.normal(size=3), base=jnp.array([0.0, 2.0]),
                                 base_velocity=rng.normal(size=2))
    b = dc.MechanismBuilder()
    for k, xy in enumerate(np.asarray(state.x)):
        b.point(f"p{k}", tuple(xy), mass=m[k])
    for k in range(3):
        b.rod(f"rod{k}", f"p{k}", f"p{k + 1}", length=lengths[k])
    b.limit("joint1", "rod0", "rod1", lo=-3.0, hi=0.7)
    mech, s_m = b.build()
    np.testing.assert_allclose(s_m.x, state.x, atol=1e-12)  # (its coordinates: the four points, in order)
    stuck, held = np.array([False, False, False, True]), np.array([False, True, False, False])
    normal, pin = np.array([[0.0, 1.0]] * 4), np.asarray(state.x) + 0.01
    es_c = dc.EventState(state, stuck=stuck, held=held, side=np.where(held, 1.0, 0.0), normal=normal, pin=pin)
    es_m = dc.EventState(state, model=mech, stuck=stuck, held=[True, False, False, False], side=[1.0, 0, 0, 0],
                         normal=normal, pin=pin)
    ev_c = dc.Events(chain.n, ground=0.0, theta_max=[np.inf, 0.7, np.inf])
    ev_m = dc.Events(mech, ground=0.0)
    for impulse in (False, True):
        a_c, tau_c, R_c = dynamics.constrained_dynamics(chain, ev_c, es_c, state.x, state.v, state.t,
                                                       dc.Control(n=4), 5 * DT, jnp.asarray(impulse), dc.Recursive())
        a_m, tau_m, R_m = dynamics.constrained_dynamics(mech, ev_m, es_m, state.x, state.v, state.t,
                                                       mech.zero_control(mech.dtype), 5 * DT, jnp.asarray(impulse),
                                                       dc.KKT())
        np.testing.assert_allclose(a_m, a_c, atol=1e-10 * np.abs(np.asarray(a_c)).max(), err_msg=f"impulse {impulse}")
        if not impulse:
            np.testing.assert_allclose(tau_m[0], tau_c[1], rtol=1e-10)
            np.testing.assert_allclose(R_m[3], R_c[3], rtol=1e-10)
