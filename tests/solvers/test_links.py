"""Rigid links with distributed mass (issue 5 item 1): recursion vs KKT vs closed forms vs MuJoCo."""
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given

import diffchain as dc
from strategies import random_problem
from test_solvers_agree import _rel, assert_solvers_agree, rec


@pytest.mark.slow
@given(random_problem(sizes=(1, 2, 3, 5, 8, 21, 64), links=True))
def test_inertial_recursion_equals_kkt(problem):
    assert_solvers_agree(problem)


@given(random_problem(sizes=(2, 5, 13)))
def test_massless_links_reduce_to_the_seed_closed_form(problem):
    """The general inertial step with M_link = 0 equals the seed's eqs. (6)-(9) path."""
    chain, state, control, desc = problem
    with_links = dc.Chain(chain.m, chain.l, guided=chain.guided, slider=chain.slider, s=chain.s, c=chain.c,
                          k_omega=chain.k_omega, k_v=chain.k_v, link_mass=0.0, link_inertia=0.0)
    assert with_links.has_links and not chain.has_links
    a1, phi1 = rec(chain, state, control, None)
    a2, phi2 = rec(with_links, state, control, None)
    assert _rel(a2, a1) <= 1e-10, desc
    free_rod = ~(np.asarray(chain.guided[:-1]) & np.asarray(chain.guided[1:]))
    if free_rod.any():
        assert _rel(np.asarray(phi2)[free_rod], np.asarray(phi1)[free_rod]) <= 1e-9, desc


@pytest.mark.parametrize("solver", [dc.Recursive(), dc.KKT()], ids=["recursive", "kkt"])
def test_compound_pendulum(solver):
    """A uniform rod of mass mu, length l pinned at one end (no point masses at its tip): I_pivot = mu l^2 / 3 and
    phi'' = -(3 g / 2 l) cos(phi) + tau / I_pivot; the rod's tension balances the centripetal and gravity loads."""
    mu, l = 1.7, 0.9
    chain = dc.Chain([1.0, 0.0], [l], guided=[True, False], link_mass=[mu], link_inertia=[mu * l**2 / 12])
    for phi, w, tau in [(0.3, 0.0, 0.0), (-2.0, 1.5, 0.4), (2.5, -3.0, -1.0)]:
        state = dc.from_joint_angles(chain, jnp.array([phi]), jnp.array([w]))
        alpha = dc.joint_accelerations(state, solver(chain, state, dc.Control(tau=jnp.array([tau, 0.0]))).a)[0]
        want = -1.5 * 9.81 / l * np.cos(phi) + tau / (mu * l**2 / 3)
        np.testing.assert_allclose(alpha, want, rtol=1e-12)


@pytest.mark.slow
def test_energy_conserved_with_inertial_links():
    """Conservative 3-link arm with distributed link masses, offset centres of mass and point masses, in a violent
    motion (|v| up to 16 m/s): the RK4 energy drift over 10 s falls at least 16x when dt halves (fourth order, so the
    energy and the equations of motion are consistent) and is <= 1e-6 at dt = 5e-4 (measured 4.5e-6 and 8.7e-8)."""
    chain = dc.pendulum(3, mass=jnp.array([0.3, 0.0, 0.5]), length=jnp.array([1.0, 0.8, 0.6]),
                        link_mass=jnp.array([1.0, 0.7, 0.4]), link_com=jnp.array([[0.5, 0.1], [0.3, -0.05], [0.3, 0.0]]),
                        link_inertia=jnp.array([0.08, 0.04, 0.012]))
    state = dc.from_joint_angles(chain, jnp.array([0.3, 0.5, -0.4]))
    E0 = float(dc.energy(chain, state))
    drift = {}
    for dt in (1e-3, 5e-4):
        T = int(round(10 / dt))
        _, traj = jax.jit(lambda s: dc.rollout(chain, s, None, dt, n_steps=T, integrator=dc.RK4()))(state)
        drift[dt] = float(np.max(np.abs(np.asarray(dc.energy(chain, traj)) - E0)) / abs(E0))
    assert drift[5e-4] <= 1e-6
    assert drift[1e-3] >= 16 * drift[5e-4]


def test_bad_links_are_rejected():
    with pytest.raises(ValueError, match="link_mass must be non-negative"):
        dc.Chain([1.0, 1.0], [1.0], link_mass=[-1.0])
    with pytest.raises(ValueError, match=r"points \[0\] carry no mass"):
        dc.Chain([0.0, 0.0], [1.0], link_mass=[1.0], link_com=[[1.0, 0.0]])
    with pytest.raises(ValueError, match="m must be positive"):
        dc.Chain([0.0, 1.0], [1.0])


@pytest.mark.skipif(os.environ.get("DIFFCHAIN_NO_MUJOCO") is not None, reason="MuJoCo cross-check disabled")
def test_inertial_links_against_mujoco():
    """A pendulum of rigid links with offset centres of mass and point masses: joint accelerations equal MuJoCo's
    (each MuJoCo body carries its link and its tip point combined by the parallel-axis theorem)."""
    pytest.importorskip("mujoco")
    from diffchain._bench import peers

    rng = np.random.default_rng(7)
    fd = jax.jit(lambda c, s, u: dc.forward_dynamics(c, s, u))
    for n_links in (1, 2, 4):
        m, l = rng.uniform(0, 1.5, n_links + 1), rng.uniform(0.5, 1.5, n_links)
        links = dict(link_mass=rng.uniform(0.2, 2, n_links), link_com=rng.normal(size=(n_links, 2)) * 0.5,
                     link_inertia=rng.uniform(0.01, 0.3, n_links))
        chain = dc.Chain(m, l, guided=[True] + [False] * n_links, **links)
        for _ in range(5):
            theta, theta_dot, tau = rng.uniform(-3, 3, n_links), rng.normal(size=n_links), rng.normal(size=n_links)
            state = dc.from_joint_angles(chain, theta, theta_dot)
            alpha = np.asarray(dc.joint_accelerations(state, fd(chain, state, dc.Control(tau=np.append(tau, 0.0)))))
            want = peers.mujoco_qacc(m, l, theta, theta_dot, tau, **links)
            np.testing.assert_allclose(alpha[:-1], want, rtol=1e-9, atol=1e-9)
