"""Three event defects found by checking event rollouts against closed forms, and random drops (seed 000 §7, §12).

* an impact that added kinetic energy where two rods lie nearly in line between two stuck points (checked against
  the M-orthogonal projection, in closed form for that pose);
* a quantum that used up its budget of solver calls and left a point below the floor (checked against the floor);
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc
from diffchain import events as ev

DT = 1e-3
G = 9.81


# ---------------------------------------------------------------------------------------------------------------------
# 2. the impact impulse near a singular pose
def _near_line(beta, u=3e-3, w=0.1):
    """Points 1 and 3 at the ends of two unit rods bent by +-beta from the line between them; point 1 stuck at rest,
    point 3 landing: moving down at w and along the line at u; point 2 moving up at 1e-3. Rod 2 then stretches at
    about u: the drift of the seed quantum, which a quantum's PD correction leaves at this level."""
    c, s = np.cos(beta), np.sin(beta)
    x = np.array([[0.0, 0.0], [c, s], [2 * c, 0.0]])
    return x, np.array([[0.0, 0.0], [0.0, 1e-3], [u, -w]])


@pytest.mark.parametrize("solver", [dc.ActiveRecursive(), dc.ActiveKKT()], ids=["recursive", "kkt"])
def test_impact_between_two_stuck_points_adds_no_energy(solver):
    """The inelastic impulse is the M-orthogonal projection of v onto the velocities the constraints allow,
    v+ = v - M^-1 J^T (J M^-1 J^T)^+ J v, which never adds kinetic energy. Here both ends are stuck and the two rods
    are not parallel (beta > 0): the only allowed velocity is 0, so v+ = 0 (closed form). For beta = 0 (exactly in
    line, J rank-deficient) point 2 may still move across the line: v+ = (0, v_2y). The seed's rule applied
    literally keeps the rods' stretching rates, which 1/(2 sin beta) amplifies: with beta = 1e-3 a drift of 3e-3 m/s
    gave point 2 1.5 m/s (kinetic energy 5e-3 -> 1.1 J)."""
    chain = dc.free_chain(2, mass=1.0, length=1.0)
    events = dc.Events(chain.n, ground=0.0)
    call = jax.jit(lambda es: ev.constrained_dynamics(chain, events, es, es.x, es.v, es.t, dc.Control(n=3), 5 * DT,
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


def test_impulse_never_adds_energy_on_random_near_singular_poses():
    """Random chains with random stuck points, held joints and rods bent by at most 1e-7..1e-2 rad (nearly straight
    runs between pins), velocities off the constraints by random drift: the impulse never raises the kinetic
    energy beyond round-off, and equals numpy's projection (pseudo-inverse) where the pose is well conditioned."""
    rng = np.random.default_rng(7)
    for n_links in (3, 5, 9):
        chain = dc.free_chain(n_links, mass=rng.uniform(0.5, 2.0, n_links + 1), length=rng.uniform(0.3, 1.0, n_links))
        events = dc.Events(chain.n, ground=0.0)
        call = jax.jit(lambda es, chain=chain, events=events: ev.constrained_dynamics(
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
