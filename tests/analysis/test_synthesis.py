"""The closed-form four-bar of examples/synthesis.py against independent references: its coupler point against
``dc.assemble`` of the same four-bar built with the builder (a crank-angle driver, both assembly branches), and the
motor torque of its dynamic sizing (``dc.mechanism_inverse_dynamics`` at the closed form's motion) against the power
balance tau omega = dE/dt with the energy E of the bars written out by hand. (The example itself runs in
tests/package/test_examples.py.)"""
import importlib.util
import os
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "synthesis.py"
DESIGN = np.array([0.1, -0.2, 2.0, 0.3, 0.9, 1.8, 1.5, 1.0, -0.7])   # a crank-rocker (r1 = 1.92)
THETAS = np.linspace(0.0, 2 * np.pi, 8, endpoint=False) + 0.3


@pytest.fixture(scope="module")
def S():
    pytest.importorskip("optax")
    pytest.importorskip("matplotlib")
    env = dict(os.environ)
    spec = importlib.util.spec_from_file_location("synthesis_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    finally:                                  # the example sets XLA flags for its own process: not for the suite's
        os.environ.clear()
        os.environ.update(env)
    return module


def test_coupler_point_matches_assembly(S):
    """At 8 crank angles on both branches, the closed-form A, B and C equal the points of the builder's four-bar
    (C attached to the coupler) that ``dc.assemble`` finds from the closed form moved by 0.05, its crank held at
    the angle by a driver: to 1e-10, with the status "assembled"."""
    jax.config.update("jax_enable_x64", True)
    d = jnp.asarray(DESIGN)
    mb = dc.MechanismBuilder()
    mb.ground("A0", DESIGN[0:2]), mb.ground("B0", DESIGN[2:4])
    A, B, _, _ = S.four_bar_points(d, THETAS[0], 1.0)
    mb.point("A", np.asarray(A)), mb.point("B", np.asarray(B))
    mb.body("crank", "A0", "A", mass=1.0, inertia=0.1, length=DESIGN[4])
    mb.body("coupler", "A", "B", mass=1.0, inertia=0.1, length=DESIGN[5])
    mb.body("rocker", "B0", "B", mass=1.0, inertia=0.1, length=DESIGN[6])
    mb.attach("C", "coupler", DESIGN[7:9])
    mb.drive("crank_angle", "angle", ("A0", "A"), dc.Polynomial((0.0, 1.0)))   # the crank's angle = t
    mech, _ = mb.build()
    names = mech.point_names
    rng = np.random.default_rng(0)
    thetas = np.concatenate([THETAS, THETAS])
    sigmas = np.repeat([1.0, -1.0], len(THETAS))
    closed = jax.vmap(lambda t, s: jnp.stack(S.four_bar_points(d, t, s)[:3]))(thetas, sigmas)  # (16, 3, 2)
    guesses = np.asarray(closed[:, :2]) + 0.05 * rng.standard_normal((len(thetas), 2, 2))
    states, info = jax.vmap(lambda x, t: dc.assemble(mech, dc.State(x, jnp.zeros_like(x), t)))(
        jnp.asarray(guesses), jnp.asarray(thetas))
    assert np.all(np.asarray(info.status) == 0)
    points = np.asarray(jax.vmap(lambda x: mech.points(x.reshape(-1)))(states.x))
    found = points[:, [names.index(n) for n in ("A", "B", "C")]]
    assert np.max(np.abs(found - np.asarray(closed))) < 1e-10
    assert np.all(np.asarray(jax.vmap(lambda t, s: S.four_bar_points(d, t, s)[3])(thetas, sigmas)) > 0)


@pytest.mark.slow   # 8 s on 2 cores, mostly compiling
def test_motor_torque_is_the_power_balance(S):
    """The crank at constant speed omega: the motor's power tau omega is the rate of change of the mechanism's energy,
    so tau = dE/dtheta with E(theta) = sum over the bars of m |v_G|^2 / 2 + I_G psi_dot^2 / 2 + m g y_G, written
    here from the bars' geometry (not from diffchain's mass matrix); equal to 1e-9 relative at 8 angles."""
    jax.config.update("jax_enable_x64", True)
    d, omega, g = jnp.asarray(DESIGN), S.OMEGA, 9.81
    mech = S.mechanism_of(S.template(), d)
    tau = np.asarray(jax.vmap(lambda t: S.motor_torque(mech, d, t, 1.0, omega))(jnp.asarray(THETAS)))

    def bars(theta):
        """Each uniform bar of the linkage (crank, rocker, the coupler's three) as (mass, its ends)."""
        A, B, C, _ = S.four_bar_points(d, theta, 1.0)
        ends = [(d[0:2], A), (d[2:4], B), (A, B), (B, C), (C, A)]
        return [(S.RHO * jnp.linalg.norm(q - p), p, q) for p, q in ends]

    def energy(theta):
        E = 0.0
        for k in range(5):
            mid = lambda t: (bars(t)[k][1] + bars(t)[k][2]) / 2  # noqa: E731
            psi = lambda t: jnp.arctan2(*(bars(t)[k][2] - bars(t)[k][1])[::-1])  # noqa: E731
            m, p, q = bars(theta)[k]
            v = omega * jax.jacfwd(mid)(theta)
            w = omega * jax.grad(psi)(theta)
            E += 0.5 * m * v @ v + 0.5 * (m * jnp.sum((q - p) ** 2) / 12) * w**2 + m * g * mid(theta)[1]
        return E

    power = np.asarray(jax.vmap(jax.grad(energy))(jnp.asarray(THETAS)))
    assert np.max(np.abs(tau - power)) < 1e-9 * np.max(np.abs(power))
