"""Flexible links as rigid finite elements (seed 004 §1.7): dc.systems.flexible_cantilever and
MechanismBuilder.flexible_link, checked against Euler–Bernoulli beam theory (a cantilever's static tip deflection
P L^3 / (3 E I) and first natural frequency 1.8751^2 sqrt(E I / (rho_A L^4)) / (2 pi)), converging at second order
as the number of springs n grows; against the division's own closed form (the midpoint rule: the tip deflection
is P L^3 / (3 E I) (1 - 1 / (4 n^2)) exactly); against the library's dynamics (zero accelerations at the static
equilibrium); the builder's link against the chain's; dc.natural_frequencies on a mechanism against a compound
pendulum's closed form; derivatives with respect to E against central differences and the scaling law
f ~ sqrt(E)."""
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc
from diffchain import systems
from diffchain._model.flexible import rfe_elements

L, E, I, RHO_A = 1.5, 7.0, 0.3, 2.0
BETA1 = 1.87510406871196  # the first root of 1 + cos(b) cosh(b) = 0 (a clamped-free beam)
F1 = BETA1**2 * np.sqrt(E * I / (RHO_A * L**4)) / (2 * np.pi)
P = 1e-4 * E * I / L**2  # a small tip load: P L^2 / (E I) = 1e-4, geometric nonlinearity ~1e-8 relative
DELTA = P * L**3 / (3 * E * I)
NS = (2, 4, 8, 16, 32)


@eqx.filter_jit
def newton_tip_deflection(chain, state, load, n_newton=3):
    """The tip's downward deflection under the tip load ``load`` (along -y) at the static equilibrium: Newton's
    method on the gradient of the potential energy plus the load's, load * y_tip, over the joint angles; and the
    joint angles there."""
    def x(theta):
        return dc.from_joint_angles(chain, theta, base=state.x[0]).x

    def potential(theta):
        return dc.energy(chain, dc.State(x(theta))) + load * x(theta)[-1, 1]

    theta = jnp.zeros(chain.n - 1, state.x.dtype)
    for _ in range(n_newton):
        theta = theta - jnp.linalg.solve(jax.hessian(potential)(theta), jax.grad(potential)(theta))
    return -x(theta)[-1, 1], theta


def f1_and_tip(E_, n):
    """(f1 in Hz, the linear static tip deflection under P) of the cantilever of n springs at E = E_, both from
    dc.natural_frequencies: the deflection by modal superposition, P sum_k (dy_tip/dtheta . v_k)^2 / omega_k^2
    (K^-1 = V Omega^-2 V^T for M-orthonormal modes V). The chain is built here, inside grad and jacfwd, not inside a
    jit (whose tracing would hide its joint kinds from the chart of dc.natural_frequencies)."""
    chain, state = systems.flexible_cantilever(n, length=L, E=E_, I=I, rho_A=RHO_A)
    omega, modes = dc.natural_frequencies(chain, state)
    tip_y = jax.jacfwd(lambda th: dc.from_joint_angles(chain, th, base=state.x[0]).x[-1, 1])(jnp.zeros(n))
    return omega[0] / (2 * np.pi), P * jnp.sum((tip_y @ modes) ** 2 / omega**2)


@pytest.fixture(scope="module")
def convergence():
    """{n: (f1, tip deflection)} of the cantilever of n springs."""
    return {n: tuple(float(v) for v in f1_and_tip(E, n)) for n in NS}


def orders(errors):
    """The observed orders log2(e_n / e_2n) of errors at n = 2, 4, 8, ...."""
    e = np.abs(np.asarray(errors))
    return np.log2(e[:-1] / e[1:])


@pytest.mark.slow
def test_tip_deflection_converges_at_second_order(convergence):
    """The static tip deflection against Euler–Bernoulli's P L^3 / (3 E I): the springs at the middles of the n
    segments make it the midpoint rule of int_0^L (P / E I) (L - x)^2 dx, so it equals P L^3 / (3 E I) (1 - 1 / (4
    n^2)) up to the geometric nonlinearity of the small load (~1e-8); second order."""
    tip = np.array([convergence[n][1] for n in NS])
    np.testing.assert_allclose(tip, DELTA * (1 - 1 / (4 * np.array(NS) ** 2)), rtol=1e-6)
    err = tip / DELTA - 1
    assert np.all(err < 0) and abs(err[-1]) < 3e-4, err
    assert np.all(orders(err) >= 1.8), orders(err)


@pytest.mark.slow
def test_first_frequency_converges_at_second_order(convergence):
    """The first natural frequency against Euler–Bernoulli's 1.8751^2 sqrt(E I / (rho_A L^4)) / (2 pi): second order
    (the bending energy's midpoint rule, the exact mass of a piecewise rigid motion)."""
    err = np.array([convergence[n][0] for n in NS]) / F1 - 1
    assert abs(err[-1]) < 1e-3, err
    assert np.all(orders(err) >= 1.8), orders(err)


@pytest.mark.slow
def test_the_equilibrium_is_one_of_the_dynamics(convergence):
    """The static equilibrium found by Newton's method on the energy (the geometrically nonlinear statics) has the
    modal deflection of the linear regime to the load's small nonlinearity, and there the forward dynamics under the
    tip load (the force kind's force, the recursion) gives zero accelerations. The modes of dc.natural_frequencies
    are M-orthonormal."""
    n = 4
    chain, state = systems.flexible_cantilever(n, length=L, E=E, I=I, rho_A=RHO_A)
    tip, theta = newton_tip_deflection(chain, state, P)
    np.testing.assert_allclose(tip, convergence[n][1], rtol=1e-7)
    F = jnp.zeros((n + 1, 2)).at[-1, 1].set(-P)
    a = dc.forward_dynamics(chain, dc.from_joint_angles(chain, theta, base=state.x[0]), dc.Control(F=F, n=n + 1))
    assert float(jnp.max(jnp.abs(a))) < 1e-9 * P / (RHO_A * L)
    _, modes = dc.natural_frequencies(chain, state)
    M = jax.jacfwd(lambda q: dc.from_joint_angles(chain, q, base=state.x[0]).x.reshape(-1))(jnp.zeros(n))
    np.testing.assert_allclose(modes.T @ M.T @ chain.M @ M @ modes, np.eye(n), atol=1e-10)


@pytest.mark.slow
def test_derivatives_with_respect_to_E():
    """d f1 / dE and d tip / dE through the chain built from a traced E, forward and reverse mode, against central
    differences; and the scaling laws of the model itself: f1 ~ sqrt(E) (K ~ E, M independent of E), tip ~ 1 / E."""
    n, h = 8, 1e-4 * E
    fwd = jax.jacfwd(lambda e: jnp.stack(f1_and_tip(e, n)))(E)
    rev = jnp.stack([jax.grad(lambda e, k=k: f1_and_tip(e, n)[k])(E) for k in range(2)])
    central = (jnp.stack(f1_and_tip(E + h, n)) - jnp.stack(f1_and_tip(E - h, n))) / (2 * h)
    f1, tip = f1_and_tip(E, n)
    np.testing.assert_allclose(fwd, central, rtol=1e-7)
    np.testing.assert_allclose(rev, central, rtol=1e-7)
    np.testing.assert_allclose(fwd, [f1 / (2 * E), -tip / E], rtol=1e-10)


def _bent(n, seed):
    rng = np.random.default_rng(seed)
    return 0.3 * rng.standard_normal(n), rng.standard_normal(n)


@pytest.fixture(scope="module")
def builder_cantilever():
    """(chain, its rest state, the same cantilever from MechanismBuilder.flexible_link clamped by an angle driver (its
    first half element held), its rest state, n)."""
    n, eta = 3, 0.4
    chain, state = systems.flexible_cantilever(n, length=L, E=E, I=I, rho_A=RHO_A, damping=eta)
    mb = dc.MechanismBuilder(g=0.0)
    mb.ground("O", (0.0, 0.0)), mb.point("tip", (L, 0.0))
    bars = mb.flexible_link("beam", "O", "tip", n, E, I, RHO_A, damping=eta)
    mb.drive("clamp", "angle", ["O", "beam.1"], 0.0)
    for s in range(1, n + 1):  # motors (no torque) at the springs: their angles are the chart of natural_frequencies
        mb.motor(f"m{s}", bars[s - 1], bars[s])
    mech, rest = mb.build()
    assert bars == [f"beam[{e}]" for e in range(n + 1)]
    return chain, state, mech, rest, n


def test_builder_cantilever_is_the_chain(builder_cantilever):
    """The builder's cantilever is the chain's: at a bent, moving state (with the dampers) the KKT solve of the
    mechanism gives the chain's recursion's accelerations."""
    chain, state, mech, _, n = builder_cantilever
    theta, rate = _bent(n, 0)
    s = dc.from_joint_angles(chain, theta, rate, base=state.x[0])
    order = np.r_[n, 0:n]  # the mechanism's coordinates: tip, beam.1 .. beam.n
    a_chain = dc.forward_dynamics(chain, s)
    a_mech = dc.forward_dynamics(mech, dc.State(s.x[order], s.v[order]))
    np.testing.assert_allclose(a_mech, a_chain[order], rtol=1e-9, atol=1e-9 * float(jnp.max(jnp.abs(a_chain))))


@pytest.mark.slow
def test_builder_cantilever_frequencies_are_the_chains(builder_cantilever):
    """Its natural frequencies through the mechanism's chart (its motor angles: Newton on the constraints) are the
    chain's (through its joint angles)."""
    chain, state, mech, rest, _ = builder_cantilever
    np.testing.assert_allclose(dc.natural_frequencies(mech, rest)[0], dc.natural_frequencies(chain, state)[0],
                               rtol=1e-10)


def test_natural_frequency_of_a_compound_pendulum_mechanism():
    """A rigid bar hanging from a ground pin (a mechanism, its motor angle the chart): omega^2 = m g a / (I_c + m a^2)
    (a the pin-to-centre distance, I_c the inertia about the centre)."""
    m, Ic, l, g = 1.3, 0.02, 0.8, 9.81
    mb = dc.MechanismBuilder(g=g)
    mb.ground("O", (0.0, 0.0)), mb.point("B", (0.0, -l))
    mb.body("bar", "O", "B", mass=m, inertia=Ic)
    mb.motor("m", "ground", "bar")
    bar, rest = mb.build()
    omega, mode = dc.natural_frequencies(bar, rest)
    a = l / 2
    np.testing.assert_allclose(omega, [np.sqrt(m * g * a / (Ic + m * a**2))], rtol=1e-12)
    np.testing.assert_allclose(mode**2 * (Ic + m * a**2), [[1.0]], rtol=1e-12)


def test_builder_link_hinged_in_a_mechanism_is_its_chain():
    """A flexible link hinged at a ground pin and swinging under gravity (both end elements half length, moving) is
    the chain of its elements written out here from rfe_elements: pinned point, torsional springs and dampers
    between consecutive elements, none at the pin. Same accelerations at a bent, moving state."""
    n, eta = 3, 0.2
    mb = dc.MechanismBuilder()
    mb.ground("O", (0.0, 0.0)), mb.point("tip", (0.0, -L))
    mb.flexible_link("arm", "O", "tip", n, E, I, RHO_A, damping=eta)
    mech, _ = mb.build()
    lengths, mass, inertia, k, c = rfe_elements(n, L, E, I, RHO_A, eta)
    joint = np.r_[0.0, np.ones(n), 0.0]
    chain = dc.Chain(np.zeros(n + 2), lengths, guided=[True] + [False] * (n + 1), link_mass=mass,
                     link_inertia=inertia, torsion_k=k * joint, k_omega=c * joint)
    theta, rate = _bent(n + 1, 1)
    s = dc.from_joint_angles(chain, theta + np.r_[-np.pi / 2, np.zeros(n)], rate)
    order = np.r_[n + 1, 1:n + 1]  # tip, arm.1 .. arm.n (point 1 of the chain is the pin O)
    a_chain = dc.forward_dynamics(chain, s)
    a_mech = dc.forward_dynamics(mech, dc.State(s.x[order], s.v[order]))
    np.testing.assert_allclose(a_mech, a_chain[order], rtol=1e-9, atol=1e-9 * float(jnp.max(jnp.abs(a_chain))))


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="n_segments"):
        systems.flexible_cantilever(0)
    with pytest.raises(ValueError, match="E must be finite and positive"):
        systems.flexible_cantilever(4, E=-1.0)
    with pytest.raises(ValueError, match="damping"):
        systems.flexible_cantilever(4, damping=-1.0)
    mb = dc.MechanismBuilder()
    mb.ground("O", (0.0, 0.0)), mb.point("T", (1.0, 0.0))
    with pytest.raises(ValueError, match="rho_A"):
        mb.flexible_link("beam", "O", "T", 4, 1.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="n_segments"):
        mb.flexible_link("beam", "O", "T", 2.5, 1.0, 1.0, 1.0)
    mb.flexible_link("beam", "O", "T", 2, 1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="natural_frequencies: .* 0 motors and 3 degrees of freedom; add motors"):
        dc.natural_frequencies(*mb.build())
