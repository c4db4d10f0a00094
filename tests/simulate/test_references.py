"""Physics checked against references computed another way: closed forms, invariants, MuJoCo."""
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc

G = 9.81


def zero_controls(chain, T):
    return jax.tree_util.tree_map(lambda u: jnp.broadcast_to(u, (T,) + u.shape), dc.Control(n=chain.n))


def energy(chain, s):
    return 0.5 * jnp.sum(chain.m[:, None] * s.v**2, (-1, -2)) + chain.g * jnp.sum(chain.m * s.x[..., 1], -1)


def _crossing_times(t, y):
    """Times where y crosses 0 upwards, by linear interpolation."""
    i = np.flatnonzero((y[:-1] < 0) & (y[1:] >= 0))
    return t[i] - y[i] * (t[i + 1] - t[i]) / (y[i + 1] - y[i])


def _agm(a, b):
    for _ in range(30):
        a, b = (a + b) / 2, np.sqrt(a * b)
    return a


@pytest.mark.parametrize("amplitude", [1e-3, 2.0])
def test_single_pendulum_period(amplitude):
    """Period against the closed form 4 sqrt(l/g) K(sin(theta0/2)), K by the arithmetic-geometric mean
    (for small amplitude this is the small-angle period 2 pi sqrt(l/g))."""
    l = 0.8
    chain = dc.pendulum(1, mass=0.5, length=l)
    state = dc.from_joint_angles(chain, jnp.array([-np.pi / 2 + amplitude]))
    dt, T = 1e-3, 6000
    _, traj = jax.jit(lambda s: dc.rollout(chain, s, zero_controls(chain, T), dt, integrator=dc.RK4()))(state)
    t = dt * np.arange(1, T + 1)
    crossings = _crossing_times(t, np.asarray(traj.x[:, 1, 0]))
    period = np.diff(crossings).mean()
    k = np.sin(amplitude / 2)
    exact = 2 * np.pi * np.sqrt(l / G) / _agm(1.0, np.sqrt(1 - k**2))
    assert abs(period / exact - 1) < 1e-6
    if amplitude < 0.01:
        assert abs(period / (2 * np.pi * np.sqrt(l / G)) - 1) < 1e-6


def double_pendulum_closed_form(m2, m3, l1, l2, phi, phi_dot, tau):
    """Hand-derived Lagrange equations of a pinned double pendulum with point masses m2, m3 at points 2, 3, in
    absolute link angles phi (from +x). Generalized forces from the joint torques by virtual power:
    sum tau_i omega_i^z with omega^z = (phi1', phi2' - phi1', -phi2')  =>  Q = (tau1 - tau2, tau2 - tau3)."""
    p1, p2 = phi
    w1, w2 = phi_dot
    c, s = np.cos(p1 - p2), np.sin(p1 - p2)
    M = np.array([[(m2 + m3) * l1**2, m3 * l1 * l2 * c], [m3 * l1 * l2 * c, m3 * l2**2]])
    rhs = np.array([tau[0] - tau[1] - m3 * l1 * l2 * s * w2**2 - (m2 + m3) * G * l1 * np.cos(p1),
                    tau[1] - tau[2] + m3 * l1 * l2 * s * w1**2 - m3 * G * l2 * np.cos(p2)])
    return np.linalg.solve(M, rhs)


@pytest.mark.parametrize("solver", [dc.Recursive(), dc.KKT()], ids=["recursive", "kkt"])
def test_double_pendulum_against_closed_form(solver):
    rng = np.random.default_rng(0)
    fd = jax.jit(lambda c, s, u: dc.forward_dynamics(c, s, u, solver=solver))
    for _ in range(20):
        m2, m3, l1, l2 = rng.uniform(0.3, 2.0, 4)
        chain = dc.Chain([1.0, m2, m3], [l1, l2], guided=[True, False, False])
        theta, theta_dot, tau = rng.uniform(-3, 3, 2), rng.normal(size=2) * 3, rng.normal(size=3)
        state = dc.from_joint_angles(chain, theta, theta_dot)
        alpha = dc.joint_accelerations(state, fd(chain, state, dc.Control(tau=tau)))
        phi_dot = np.cumsum(theta_dot)
        phi_ddot = double_pendulum_closed_form(m2, m3, l1, l2, np.cumsum(theta), phi_dot, tau)
        # alpha^z = (phi1'', phi2'' - phi1'', -phi2'') (seed eq. 13 with omega_0^o = omega_n^o = 0)
        want = np.array([phi_ddot[0], phi_ddot[1] - phi_ddot[0], -phi_ddot[1]])
        np.testing.assert_allclose(alpha, want, rtol=1e-10, atol=1e-10 * np.abs(want).max())


def test_energy_conserved_by_rk4():
    """A conservative 3-link pendulum: relative energy drift <= 1e-6 over 10 s at dt = 1e-3 (RK4)."""
    chain = dc.pendulum(3, mass=jnp.array([1.0, 0.7, 0.5]), length=jnp.array([1.0, 0.8, 0.6]))
    state = dc.from_joint_angles(chain, jnp.array([0.3, 0.5, -0.4]))
    T = 10_000
    _, traj = jax.jit(lambda s: dc.rollout(chain, s, zero_controls(chain, T), 1e-3, integrator=dc.RK4()))(state)
    E = np.asarray(energy(chain, traj))
    E0 = float(energy(chain, state))
    v_scale = float(jnp.max(jnp.abs(traj.v)))
    assert v_scale > 3.0  # the motion is not trivial
    assert np.max(np.abs(E - E0)) / abs(E0) <= 1e-6


def test_free_chain_conserves_momenta():
    """No gravity, internal joint torques only (tau_1 = tau_n = 0): linear and angular momentum are conserved."""
    rng = np.random.default_rng(1)
    n = 7
    chain = dc.free_chain(n - 1, mass=rng.uniform(0.5, 2, n), length=rng.uniform(0.5, 1.5, n - 1), g=0.0)
    state = dc.from_joint_angles(chain, rng.uniform(-2, 2, n - 1), rng.normal(size=n - 1), base_velocity=[0.3, -0.2])
    T = 2000
    tau = jnp.asarray(rng.normal(size=(T, n))).at[:, 0].set(0).at[:, -1].set(0)
    controls = dc.Control(tau=tau, F=jnp.zeros((T, n, 2)), a_w=jnp.zeros((T, n, 2)))

    def momenta(s):
        p = jnp.sum(chain.m[:, None] * s.v, -2)
        L = jnp.sum(chain.m * (s.x[..., 0] * s.v[..., 1] - s.x[..., 1] * s.v[..., 0]), -1)
        return p, L

    for integrator, tol in [(dc.RK4(), 1e-10), (dc.SeedQuantum(), None)]:
        _, traj = jax.jit(lambda s: dc.rollout(chain, s, controls, 1e-3, integrator=integrator))(state)
        p0, L0 = momenta(state)
        p, L = momenta(traj)
        scale = float(jnp.sum(chain.m * jnp.linalg.norm(traj.v, axis=-1), -1).max())
        # every force inside the chain comes in equal and opposite pairs: the linear momentum is exact for any scheme
        assert float(jnp.max(jnp.abs(p - p0))) <= 1e-11 * scale
        if tol is not None:
            assert float(jnp.max(jnp.abs(L - L0))) <= tol * scale * float(jnp.max(chain.l)) * n


@pytest.mark.slow
def test_rod_lengths_stay_bounded_over_1e5_seed_quanta():
    """The seed scheme with its PD drift correction (seed §12.2 eq. 33, delta_eps = 5 dt) keeps the rod-length error
    below 1e-4 l over 10^5 quanta with no secular growth; without the correction the same run drifts by >1000x more
    (measured: 2e-5 vs 0.42 of the rod length)."""
    chain = dc.pendulum(2, mass=1.0, length=1.0, k_omega=0.05)
    state = dc.from_joint_angles(chain, jnp.array([0.2, 0.6]))
    T = 100_000
    results = {}
    for factor in (5.0, None):
        integ = dc.SeedQuantum(stab_factor=factor)
        final, traj = jax.jit(lambda s: dc.rollout(chain, s, zero_controls(chain, T), 1e-3, integrator=integ,
                                                   check=factor is not None))(state)  # (uncorrected: drifts on purpose)
        pos, _ = jax.vmap(lambda s: dc.constraint_violation(chain, s))(traj)
        results[factor] = np.asarray(pos).reshape(10, -1).max(1)  # worst error per tenth of the run
    assert results[5.0].max() <= 1e-4
    assert results[5.0][-1] <= results[5.0][0]
    assert results[None].max() >= 1000 * results[5.0].max()


mujoco = pytest.importorskip("mujoco") if os.environ.get("DIFFCHAIN_NO_MUJOCO") is None else None


@pytest.mark.skipif(mujoco is None, reason="MuJoCo not installed")
def test_pendulum_against_mujoco():
    """n-link point-mass pendulum: joint accelerations equal MuJoCo's (diffchain._bench.peers builds the MJCF)."""
    from diffchain._bench import peers

    rng = np.random.default_rng(2)
    fd = jax.jit(lambda c, s, u: dc.forward_dynamics(c, s, u))
    for n_links in (1, 2, 5):
        m = rng.uniform(0.5, 2.0, n_links + 1)
        l = rng.uniform(0.5, 1.5, n_links)
        chain = dc.Chain(m, l, guided=[True] + [False] * n_links)
        for _ in range(5):
            theta, theta_dot, tau = rng.uniform(-3, 3, n_links), rng.normal(size=n_links), rng.normal(size=n_links)
            state = dc.from_joint_angles(chain, theta, theta_dot)
            a = fd(chain, state, dc.Control(tau=np.concatenate([tau, [0.0]])))
            alpha = np.asarray(dc.joint_accelerations(state, a))[:-1]
            want = peers.mujoco_qacc(m, l, theta, theta_dot, tau)
            # MuJoCo needs a tiny positive body inertia (1e-12) for a point mass: agreement is to ~1e-9
            np.testing.assert_allclose(alpha, want, rtol=1e-7, atol=1e-7)
