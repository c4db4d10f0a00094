"""Torsional springs (diffchain._kinds.torsion.TorsionalSprings), the worked example of a force kind in one file:
checked against a closed form, energy conservation, every solver, events, vmap, derivatives, and the refusal of the
point-major backend."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc
from diffchain._kinds.torsion import TorsionalSprings

K = jnp.array([3.0, 2.0, 0.0])
THETA0 = jnp.array([-1.2, 0.4, 0.0])


def double(k=K, theta0=THETA0, g=dc._model.chain.G):
    return dc.pendulum(2, mass=jnp.array([1.0, 0.7]), length=jnp.array([1.0, 0.8]), g=g, torsion_k=k,
                       torsion_theta0=theta0)


def start(chain):
    return dc.from_joint_angles(chain, jnp.array([-0.9, 0.7]), jnp.array([0.5, -1.1]))


def test_chain_carries_one_torsional_kind_at_its_joints():
    chain = double()
    (f,) = chain.forces
    assert isinstance(f, TorsionalSprings)
    np.testing.assert_array_equal(f.idx, chain.motor_idx)
    assert dc.pendulum(2).forces == ()
    np.testing.assert_array_equal(dc.pendulum(2, torsion_k=2.0).forces[0].k, [2.0, 2.0, 0.0])  # as k_omega
    with pytest.raises(ValueError, match="torsion_k"):
        dc.pendulum(2, torsion_k=-1.0)


def test_single_pendulum_acceleration_closed_form():
    m, l, k, theta0, theta = 1.3, 0.7, 2.5, 0.3, 0.9
    chain = dc.pendulum(1, mass=m, length=l, g=0.0, torsion_k=k, torsion_theta0=theta0)
    state = dc.from_joint_angles(chain, jnp.array([theta]))
    a = dc.forward_dynamics(chain, state)
    alpha = -k * (theta - theta0) / (m * l**2)
    np.testing.assert_allclose(a[1], l * alpha * np.array([-np.sin(theta), np.cos(theta)]), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(a[0], 0.0, atol=1e-14)
    # across the branch cut: theta - theta0 = 2 pi - 0.2 acts as -0.2
    chain = dc.pendulum(1, mass=m, length=l, g=0.0, torsion_k=k, torsion_theta0=-np.pi + 0.1)
    state = dc.from_joint_angles(chain, jnp.array([np.pi - 0.1]))
    a = dc.forward_dynamics(chain, state)
    np.testing.assert_allclose(a[1], l * (-k * -0.2 / (m * l**2)) * np.array([-np.sin(np.pi - 0.1),
                                                                            np.cos(np.pi - 0.1)]), rtol=1e-10)


def test_energy_is_conserved_as_without_springs():
    def drift(chain):
        _, traj = dc.rollout(chain, start(chain), None, 1e-3, n_steps=1000, integrator=dc.RK4())
        E = dc.energy(chain, traj)
        return float(jnp.max(jnp.abs(E - E[0])))

    with_springs, without = drift(double()), drift(double(k=jnp.zeros(3)))
    assert with_springs < 1e-8 and with_springs < 100 * max(without, 1e-12)
    chain = double()  # the spring potential is in the energy
    E0 = dc.energy(chain, start(chain)) - dc.energy(double(k=jnp.zeros(3)), start(chain))
    theta = np.array([-0.9, 0.7])
    np.testing.assert_allclose(E0, 0.5 * np.sum(np.asarray(K[:2]) * (theta - np.asarray(THETA0[:2])) ** 2), rtol=1e-12)


def mechanism(k=K, theta0=THETA0, g=dc._model.chain.G):
    chain = double(k, theta0, g)
    x = np.asarray(start(chain).x)
    mb = dc.MechanismBuilder(g=g)
    mb.ground("O", x[0])
    mb.point("A", x[1], mass=1.0), mb.point("B", x[2], mass=0.7)
    mb.rod("r1", "O", "A"), mb.rod("r2", "A", "B")
    mb.torsional_spring("s1", "ground", "r1", k[0], theta0[0])
    mb.torsional_spring("s2", "r1", "r2", k[1], theta0[1])
    return mb.build()[0]


@pytest.mark.parametrize("solver", [dc.KKT(), dc.RangeSpace(), dc.NullSpace(), dc.Larin()],
                         ids=lambda s: type(s).__name__)
def test_every_solver_agrees(solver):
    chain = double()
    state = start(chain)
    a = dc.forward_dynamics(chain, state)
    np.testing.assert_allclose(dc.forward_dynamics(chain, state, solver=dc.KKT()), a, atol=1e-10)
    mech = mechanism()
    ms = dc.State(state.x[1:], state.v[1:])
    np.testing.assert_allclose(dc.forward_dynamics(mech, ms, solver=solver), a[1:], atol=1e-10)
    np.testing.assert_allclose(dc.energy(mech, ms), dc.energy(chain, state), rtol=1e-12)


def test_builder_default_rest_angle_is_as_drawn():
    mb = dc.MechanismBuilder(g=0.0)
    mb.ground("O", (0.0, 0.0))
    mb.point("A", (0.0, 1.0), mass=1.0)
    mb.rod("r", "O", "A")
    mb.torsional_spring("s", "ground", "r", 2.0)
    mech, state = mb.build()
    np.testing.assert_allclose(mech.forces[0].theta0, [np.pi / 2])
    np.testing.assert_allclose(dc.forward_dynamics(mech, state), 0.0, atol=1e-12)
    with pytest.raises(ValueError, match="torsional spring 's2'"):
        mb.torsional_spring("s2", "ground", "r", -1.0)


@pytest.mark.slow
def test_event_rollout_and_vmap():
    chain = dc.free_chain(3, mass=1.0, length=0.4, torsion_k=jnp.array([0.0, 4.0, 4.0, 0.0]),
                          torsion_theta0=jnp.array([0.0, 0.5, -0.3, 0.0]))
    events = dc.Events(chain.n, ground=0.0)
    state = dc.from_joint_angles(chain, jnp.array([0.6, 0.8, -0.5]), base=(0.0, 0.3), base_velocity=(1.0, -2.0))

    def rollout(k):
        ch = dc.free_chain(3, mass=1.0, length=0.4, torsion_k=k, torsion_theta0=chain.forces[0].theta0)
        return dc.event_rollout(ch, events, dc.EventState(state), None, 1e-3, n_steps=300)

    end, (states, _) = jax.jit(rollout)(chain.forces[0].k)
    assert np.isfinite(dc.energy(chain, end.state)) and np.all(np.isfinite(end.state.x))
    assert np.min(states.state.x[..., 1]) > -1e-9 and np.min(states.state.x[:, 0, 1]) < 1e-9  # it hit the ground
    free = jax.jit(rollout)(jnp.zeros(4))[0].state.x
    assert np.max(np.abs(end.state.x - free)) > 1e-2  # the springs act through the events' solves
    run = jax.jit(lambda k: rollout(k)[0].state.x)
    ks = chain.forces[0].k * jnp.linspace(0.5, 2.0, 8)[:, None]
    batched = jax.vmap(run)(ks)
    for i in range(8):
        np.testing.assert_allclose(batched[i], run(ks[i]), atol=1e-12)


@pytest.mark.slow
def test_gradients_match_central_differences():
    def final(p):
        chain = double(jnp.concatenate([p[:2], jnp.zeros(1)]), jnp.concatenate([p[2:], jnp.zeros(1)]))
        end, _ = dc.rollout(chain, start(chain), None, 1e-3, n_steps=100, integrator=dc.RK4())
        return jnp.sum(end.x[2] * jnp.array([1.0, 0.3])) + jnp.sum(end.v[1])

    f = jax.jit(final)
    p = jnp.array([3.0, 2.0, -1.2, 0.4])
    grad = jax.jit(jax.grad(final))(p)
    h = 1e-6
    fd = np.array([(f(p.at[i].add(h)) - f(p.at[i].add(-h))) / (2 * h) for i in range(4)])
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-9)
    e = jnp.array([0.3, -0.2, 0.5, 0.1])
    tangent = jax.jit(lambda p, e: jax.jvp(final, (p,), (e,))[1])(p, e)
    np.testing.assert_allclose(tangent, grad @ e, rtol=1e-10)


def test_point_major_refuses_the_springs():
    chain = double()
    with pytest.raises(ValueError, match="TorsionalSprings"):
        dc.rollout(chain, start(chain), None, 1e-3, n_steps=10, integrator=dc.RK4(), backend=dc.PointMajor())
    assert "TorsionalSprings" in dc.PointMajor().supports(chain, None, 1e-3, 10, dc.Recursive(), dc.RK4())
