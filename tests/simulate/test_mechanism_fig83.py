"""Seed 001 Fig. 8.3 built with the MechanismBuilder in natural coordinates (cylinder and piston bodies, a prismatic
joint, a revolute loop joint with its reaction, motors) against the joint-space model of test_mechanism_loops;
spring and damper power balance; motor inverse dynamics on a mechanism."""
import equinox as eqx
import jax
import pytest
import jax.numpy as jnp
import numpy as np

import diffchain as dc
from diffchain._analysis import kinematics as kin
from diffchain._analysis import inverse as mechsim
from diffchain._solvers import dense, mechanism as ms
from diffchain import MechanismBuilder
from test_mechanism_loops import I, L1, L4, c2, c3, e, gamma_fn, kinetic, l1, l2, loop, m, potential

Lc, Lp = 0.6, 0.4    # cylinder base-point spacing, piston base-point spacing (any values: points of the bodies)


def points(q):
    """Coordinate points (E, T, C2, P, D) of the natural-coordinate model as functions of the tree joints q."""
    q1, q2, q3, q4 = q
    A = jnp.array([l1, 0.0])
    E = L1 * e(q1)
    tip = A + q3 * e(q2)
    return jnp.stack([E, E + L4 * e(q1 + q4), A + Lc * e(q2), tip, tip - Lp * e(q2)])


def build(q):
    P = np.asarray(points(q))
    mb = MechanismBuilder()
    mb.ground("O", (0, 0)), mb.ground("A", (l1, 0))
    for name, xy in zip(("E", "T", "C2", "P", "D"), P):
        mb.point(name, xy)
    mb.body("B1", "O", "E", mass=m["B1"], inertia=I["B1"])
    mb.body("B4", "E", "T", mass=m["B4"], inertia=I["B4"])
    mb.body("B2", "A", "C2", mass=m["B2"], inertia=I["B2"], com=(c2, 0.0))
    mb.body("B3", "P", "D", mass=m["B3"], inertia=I["B3"], com=(c3, 0.0))
    mb.prismatic("j3", "B2", "B3")
    mb.attach("F5", "B1", (l2, 0.0))
    mb.revolute("j5", "P", "F5")
    mb.motor("tau1", "ground", "B1")
    mb.motor("tau4", "B1", "B4")
    return mb.build()


@eqx.filter_jit
def mech_all(mech, state, tau):
    res = [dc.forward_dynamics(mech, state, dc.Control(tau=tau), solver=sv, return_forces=True)
           for sv in (dc.KKT(), dc.RangeSpace(), dc.NullSpace(), dc.Larin())]
    return [(r.a, r.forces, r.info) for r in res], ms.reactions(mech, state, res[0].forces)["j5"]


@jax.jit
def joint_space(y, yd, tau):
    """q, qd, qdd from the loop-closure form, point states, and lambda of loop joint 5 from the joint-space KKT."""
    q, qd, G, g = mechsim.loop_closure_terms(gamma_fn, y, yd)
    M, Q = ms.lagrange_terms(kinetic, potential, q, qd, tau)
    qdd = mechsim.loop_closure_dynamics(lambda q_: M, lambda q_, qd_: Q, gamma_fn, y, yd)[1]
    x, v = jax.jvp(points, (q,), (qd,))
    a = jax.jvp(points, (q,), (qdd,))[1] + jax.jvp(lambda q_: jax.jvp(points, (q_,), (qd,))[1], (q,), (qd,))[1]
    J, k = dc.constraint_terms(loop, q, qd, 0.0)
    _, lam = dense.saddle_point_solve(M, Q, J, k, jnp.ones((2,), bool))
    return q, x, v, a, lam


@pytest.mark.slow
def test_fig83_natural_coordinates_match_joint_space_and_loop_reaction():
    rng = np.random.default_rng(7)
    y, yd, t1, t4 = rng.uniform(0.4, 2.0, 2), rng.uniform(-1.5, 1.5, 2), 1.3, -0.6
    tau = jnp.array([t1, 0.0, 0.0, t4])
    q, x, v, a, lam = joint_space(jnp.asarray(y), jnp.asarray(yd), tau)
    mech, _ = build(q)
    state = dc.State(x, v, 0.0)
    res, F5 = mech_all(mech, state, jnp.array([t1, t4]))
    for acc, _, info in res:
        assert int(info.mobility) == 2 and int(info.status) == 0
        np.testing.assert_allclose(acc, a, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(F5[mech.point_names.index("P")], lam, rtol=1e-8, atol=1e-8)
    # motor inverse dynamics (seed 001 eq. 8.63 on the mechanism): the torques that produce these accelerations
    act = eqx.filter_jit(mechsim.mechanism_inverse_dynamics)(mech, state, a)
    assert int(act.kind) == mechsim.PROPER
    np.testing.assert_allclose(act.u, [t1, t4], rtol=1e-8)


def test_spring_damper_power_balance():
    """With springs and a damper, dE/dt = q_d^T M q_dd + dV/dq q_d equals the damper power -c ell_dot^2."""
    mb = MechanismBuilder()
    mb.ground("O", (0, 0)), mb.ground("A", (2, 0)), mb.ground("S", (1, 2))
    mb.point("B", (0.6, 0.8)), mb.point("C", (2.4, 1.1))
    mb.body("crank", "O", "B", mass=1.0, inertia=0.1)
    mb.body("coupler", "B", "C", mass=1.0, inertia=0.2)
    mb.body("rocker", "A", "C", mass=1.0, inertia=0.1)
    mb.attach("M", "coupler", (0.9, 0.2))
    mb.spring("k1", "S", "M", k=50.0, L0=0.8, c=3.0)
    mb.spring("k2", "O", "C", k=20.0, L0=2.0)
    mech, s = mb.build()
    s, _ = eqx.filter_jit(kin.velocities)(mech, dc.State(s.x, jnp.array([[-0.8, 0.6], [0.3, 0.5]]), 0.0))

    @eqx.filter_jit
    def power(mech, s):
        a = dc.forward_dynamics(mech, s)
        q, qd = s.x.reshape(-1), s.v.reshape(-1)
        dEdt = jax.jvp(lambda q_, v_: mech.energy(dc.State(q_.reshape(-1, 2), v_.reshape(-1, 2), 0.0)),
                       (q, qd), (qd, a.reshape(-1)))[1]
        ell_dot = jax.jvp(lambda q_: jnp.linalg.norm(mech.point("M", q_) - mech.point("S", q_)), (q,), (qd,))[1]
        return dEdt, -3.0 * ell_dot**2

    dEdt, damper = power(mech, s)
    np.testing.assert_allclose(dEdt, damper, rtol=1e-9)
    assert float(damper) < 0


@pytest.mark.slow
def test_fig83_driven_by_cylinder_length_and_elbow_angle():
    """Kinematic analysis with a "distance" driver (the cylinder: |A P| = d(t)) and a "relangle" driver (the elbow:
    q4(t)) against the triangle's closed form y1 = arccos((l1^2 + l2^2 - d^2) / (2 l1 l2))."""
    d = lambda t: 0.75 + 0.2 * jnp.sin(1.5 * t)  # noqa: E731
    q4 = lambda t: -0.4 + 0.8 * t  # noqa: E731
    y1 = lambda t: jnp.arccos((l1**2 + l2**2 - d(t) ** 2) / (2 * l1 * l2))  # noqa: E731
    q0 = gamma_fn(jnp.array([y1(0.0), q4(0.0)]))
    P = np.asarray(points(q0))
    mb = MechanismBuilder()
    mb.ground("O", (0, 0)), mb.ground("A", (l1, 0))
    for name, xy in zip(("E", "T", "C2", "P", "D"), P + 0.02):        # a perturbed drawing: assembly corrects it
        mb.point(name, xy)
    for name, p0, p1, L in (("B1", "O", "E", L1), ("B4", "E", "T", L4), ("B2", "A", "C2", Lc), ("B3", "P", "D", Lp)):
        mb.body(name, p0, p1, mass=1.0, inertia=0.1, length=L)
    mb.prismatic("j3", "B2", "B3")
    mb.attach("F5", "B1", (l2, 0.0))
    mb.revolute("j5", "P", "F5")
    mb.drive("cylinder", "distance", ("A", "P"), d)
    mb.drive("elbow", "relangle", ("O", "E", "E", "T"), q4)
    mech, guess = mb.build()
    ts = jnp.linspace(0.0, 2.0, 5)
    states, acc, info = eqx.filter_jit(kin.kinematic_analysis)(mech, guess, ts)   # Newton from the drawing first
    assert np.all(np.asarray(info.status) == 0) and np.all(np.asarray(info.mobility) == 0)
    E = jax.vmap(lambda t: L1 * e(y1(t)))(ts)
    T = jax.vmap(lambda t: L1 * e(y1(t)) + L4 * e(y1(t) + q4(t)))(ts)
    np.testing.assert_allclose(states.x[:, 0], E, atol=1e-10)
    np.testing.assert_allclose(states.x[:, 1], T, atol=1e-10)
    np.testing.assert_allclose(states.v[:, 0], jax.vmap(jax.jacfwd(lambda t: L1 * e(y1(t))))(ts), atol=1e-9)
    np.testing.assert_allclose(acc[:, 0], jax.vmap(jax.jacfwd(jax.jacfwd(lambda t: L1 * e(y1(t)))))(ts), atol=1e-8)
