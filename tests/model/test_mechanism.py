"""Mechanisms in natural coordinates (issue 4): every number is checked against something computed another way --
closed forms (Freudenstein, slider-crank, pendulum), the other solvers, the seed-000 recursion, invariants, finite
differences."""
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc
from diffchain._analysis import kinematics as kin
from diffchain._solvers import rank, dense, mechanism as ms
from diffchain import MechanismBuilder

SOLVERS = [dc.KKT(), dc.RangeSpace(), dc.NullSpace(), dc.Larin()]
def outputs(sol):
    """(a, lambda, info) of a Solution."""
    return sol.a, sol.forces, sol.info


def mdyn(mech, state, tau=None, F=None, **kwargs):
    """dc.forward_dynamics' Solution of ``mech`` under motor torques ``tau`` and point forces ``F`` (None: none)."""
    control = None if tau is None and F is None else dc.Control(
        tau=jnp.zeros(mech.motor_idx.shape[0]) if tau is None else tau, F=F)
    return dc.forward_dynamics(mech, state, control, return_forces=True, **kwargs)


dyn = eqx.filter_jit(lambda *a, **k: outputs(mdyn(*a, **k)))
analysis = eqx.filter_jit(kin.kinematic_analysis)
assemble = eqx.filter_jit(kin.assemble)
velocities = eqx.filter_jit(kin.velocities)
reactions = eqx.filter_jit(ms.reactions)


@eqx.filter_jit
def dyn_all(mech, state, tau=None, stab=None):
    """All four solvers in one compiled program (one compilation per mechanism instead of four)."""
    return [outputs(mdyn(mech, state, tau, solver=sv, stab=stab)) for sv in SOLVERS]

# four-bar: ground O, A; crank a = |OB|, coupler b = |BC|, rocker c = |AC|, frame d = |OA| (Grashof crank-rocker)
a_, b_, c_, d_ = 1.0, 3.0, 2.5, 3.0


def freudenstein(th2, branch=1.0):
    """Rocker angle theta4 from K1 cos t4 - K2 cos t2 + K3 = cos(t2 - t4), K1 = d/a, K2 = d/c,
    K3 = (a^2 - b^2 + c^2 + d^2) / (2 a c); written as P cos t4 + S sin t4 = R."""
    K1, K2, K3 = d_ / a_, d_ / c_, (a_**2 - b_**2 + c_**2 + d_**2) / (2 * a_ * c_)
    P, S, R = K1 - jnp.cos(th2), -jnp.sin(th2), K2 * jnp.cos(th2) - K3
    return jnp.arctan2(S, P) + branch * jnp.arccos(R / jnp.sqrt(P**2 + S**2))


def four_bar(th2=1.0, driven=None, masses=(1.0, 2.0, 1.5), motor=False, g=9.81, coupler_inertia=0.4,
             coupler_com=(1.2, 0.3)):
    mb = MechanismBuilder(g=g)
    mb.ground("O", (0, 0)), mb.ground("A", (d_, 0))
    t4 = float(freudenstein(th2))
    mb.point("B", (a_ * np.cos(th2), a_ * np.sin(th2)))
    mb.point("C", (d_ + c_ * np.cos(t4) + 0.05, c_ * np.sin(t4) - 0.05))   # drawn roughly: assembly fixes it
    mb.body("crank", "O", "B", mass=masses[0], inertia=0.05, length=a_)
    mb.body("coupler", "B", "C", mass=masses[1], inertia=coupler_inertia, com=coupler_com, length=b_)
    mb.body("rocker", "A", "C", mass=masses[2], inertia=0.2, length=c_)
    if driven is not None:
        mb.drive("crank_drive", "angle", ("O", "B"), driven)
    if motor:
        mb.motor("crank_motor", "ground", "crank")
    mech, guess = mb.build()
    if driven is not None:     # kinematic_analysis assembles by Newton from the drawing itself
        return mech, guess
    state, info = assemble(mech, guess)
    assert int(info.status) == kin.ASSEMBLED
    return mech, state


def rocker_angle(x):
    C = x[1]
    return jnp.arctan2(C[1], C[0] - d_)


def test_four_bar_kinematics_vs_freudenstein():
    th = lambda t: 0.3 + 1.7 * t + 0.4 * jnp.sin(2.0 * t)  # noqa: E731
    mech, s0 = four_bar(0.3, driven=th)
    ts = jnp.linspace(0.0, 3.0, 31)
    states, acc, info = analysis(mech, s0, ts)
    assert np.all(np.asarray(info.status) == 0) and float(jnp.max(info.residual)) < 1e-10
    t4 = lambda t: freudenstein(th(t))  # noqa: E731
    w4, al4 = jax.jit(lambda ts: (jax.vmap(jax.grad(t4))(ts), jax.vmap(jax.grad(jax.grad(t4)))(ts)))(ts)
    x = states.x
    t4_sim = jax.vmap(rocker_angle)(x)
    CA = x[:, 1] - jnp.array([d_, 0.0])
    cross = lambda u, v: u[..., 0] * v[..., 1] - u[..., 1] * v[..., 0]  # noqa: E731
    np.testing.assert_allclose(np.unwrap(t4_sim), np.unwrap(jax.vmap(t4)(ts)), atol=1e-10)
    np.testing.assert_allclose(cross(CA, states.v[:, 1]) / c_**2, w4, atol=1e-9)
    np.testing.assert_allclose(cross(CA, acc[:, 1]) / c_**2, al4, atol=1e-8)


def test_solvers_agree_on_four_bar(stab=0.05):
    """Off the constraint manifold, with Baumgarte terms (the exact case stab=None is compared in the other tests)."""
    mech, s = four_bar(1.1)
    s = dc.State(s.x + 1e-3, jnp.array([[0.3, -0.7], [1.1, 0.2]]), 0.0)   # off the manifold on purpose
    results = dyn_all(mech, s, stab=stab)
    ref, lam_ref, info = results[0]
    assert int(info.rank) == 3 and int(info.mobility) == 1 and int(info.status) == 0
    results.append(dyn(mech, s, solver=dc.KKT(), stab=stab))     # the chain's KKT object selects the mechanism KKT
    for a, lam, info in results[1:]:
        np.testing.assert_allclose(a, ref, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(lam, lam_ref, rtol=1e-9, atol=1e-9)


def test_four_bar_energy_conserved_rk4():
    mech, s = four_bar(0.8)
    s, _ = velocities(mech, dc.State(s.x, jnp.array([[-2.0, 1.5], [0.0, 0.0]]), 0.0))
    rollout = eqx.filter_jit(lambda m, s: dc.rollout(m, s, None, 1e-3, n_steps=10_000, integrator=dc.RK4()))
    final, traj = rollout(mech, s)
    E = jax.vmap(lambda x, v: mech.energy(dc.State(x, v, 0.0)))(traj.x, traj.v)
    E0 = float(mech.energy(s))
    assert float(jnp.max(jnp.abs(E - E0))) / abs(E0) <= 1e-6
    assert float(jnp.max(jnp.abs(jax.vmap(lambda x: mech.phi(x.reshape(-1), 0.0))(traj.x)))) < 1e-6


@pytest.mark.slow
def test_projected_rollout_keeps_the_loop_closed():
    """Projected(): RK4 without drift correction, every step's end projected onto Phi = 0 and Phi_q q_dot = 0 in the
    mass metric (dense solves with the solver's rank decisions). References: the loop closure and its rate (round-off
    instead of RK4's 1e-9-level drift with its PD correction), the energy (a conservative four-bar: within RK4's error),
    and the plain RK4 run (the same motion to its truncation error), on the slider-crank (a driver: Phi_t != 0)
    the rate of the drive too."""
    mech, s = four_bar(0.8)
    s, _ = velocities(mech, dc.State(s.x, jnp.array([[-2.0, 1.5], [0.0, 0.0]]), 0.0))

    @eqx.filter_jit
    def runs(mech, s):
        return [dc.rollout(mech, s, None, 2e-3, n_steps=2000, integrator=i)[1] for i in (dc.Projected(), dc.RK4())]

    proj, plain = runs(mech, s)
    closure = jax.vmap(lambda x: mech.phi(x.reshape(-1), 0.0))
    rate = jax.vmap(lambda x, v: jax.jacfwd(mech.phi)(x.reshape(-1), 0.0) @ v.reshape(-1))
    assert float(jnp.max(jnp.abs(closure(proj.x)))) < 1e-12 < float(jnp.max(jnp.abs(closure(plain.x))))
    assert float(jnp.max(jnp.abs(rate(proj.x, proj.v)))) < 1e-11
    E = jax.vmap(lambda x, v: mech.energy(dc.State(x, v, 0.0)))(proj.x, proj.v)
    assert float(jnp.max(jnp.abs(E - mech.energy(s)))) / abs(float(mech.energy(s))) <= 1e-6
    assert float(jnp.max(jnp.abs(proj.x - plain.x))) < 1e-6
    crank, guess = slider_crank()
    state, info = assemble(crank, guess)
    state, _ = velocities(crank, state)
    _, traj = eqx.filter_jit(lambda m, s: dc.rollout(m, s, None, 2e-3, n_steps=500))(crank, state)
    J = jax.vmap(lambda x, t: jax.jacfwd(crank.phi, argnums=(0, 1))(x.reshape(-1), t))(traj.x, traj.t)
    assert float(jnp.max(jnp.abs(jax.vmap(crank.phi)(traj.x.reshape(500, -1), traj.t)))) < 1e-12
    assert float(jnp.max(jnp.abs(jnp.einsum("kij,kj->ki", J[0], traj.v.reshape(500, -1)) + J[1]))) < 1e-11


def slider_crank(omega=2.0, th0=0.4, r=1.0, l=3.0, m=2.0):
    mb = MechanismBuilder()
    mb.ground("O", (0, 0)), mb.ground("rail0", (0, 0)), mb.ground("rail1", (1, 0))
    mb.point("B", (r * np.cos(th0), r * np.sin(th0)))
    mb.point("C", (r * np.cos(th0) + np.sqrt(l**2 - (r * np.sin(th0)) ** 2) + 0.1, 0.05), mass=m)
    mb.body("crank", "O", "B", mass=1.0, inertia=0.1, length=r)
    mb.rod("rod", "B", "C", length=l)
    mb.slider("rail", "C", "rail0", "rail1")
    mb.drive("crank_drive", "angle", ("O", "B"), lambda t: th0 + omega * t)
    return mb.build()


@pytest.mark.slow
def test_slider_crank_kinematics_and_crank_pin_reaction():
    """x_C = r c + S, S = sqrt(l^2 - r^2 s^2); x_C' = -r s w - r^2 s c w / S;
    x_C'' = -r c w^2 - r^2 w^2 (c^2 - s^2) / S - r^4 s^2 c^2 w^2 / S^3 (hand-derived, constant w).
    The rod is a two-force member: the slider's x-equation m x_C'' = T (x_B - x_C)/l gives its tension T, and the crank
    pin carries T (C - B)/l on B; gravity acts on the slider across the rail and does not change T."""
    r, l, m, w, th0 = 1.0, 3.0, 2.0, 2.0, 0.4
    mech, guess = slider_crank(w, th0, r, l, m)
    ts = jnp.linspace(0.0, 2.0, 9)
    states, acc, info = analysis(mech, guess, ts)      # Newton from the rough drawing at t = 0
    assert np.all(np.asarray(info.status) == 0)
    th = th0 + w * ts
    s, c = jnp.sin(th), jnp.cos(th)
    S = jnp.sqrt(l**2 - r**2 * s**2)
    np.testing.assert_allclose(states.x[:, 1, 0], r * c + S, atol=1e-10)
    np.testing.assert_allclose(states.v[:, 1, 0], -r * s * w - r**2 * s * c * w / S, atol=1e-9)
    xdd = -r * c * w**2 - r**2 * w**2 * (c**2 - s**2) / S - r**4 * s**2 * c**2 * w**2 / S**3
    np.testing.assert_allclose(acc[:, 1, 0], xdd, atol=1e-8)
    iB = mech.point_names.index("B")
    for k in (0, 3, 7):
        st = jax.tree_util.tree_map(lambda u: u[k], states)
        B, C = st.x[0], st.x[1]
        T = m * xdd[k] * l / (B[0] - C[0])
        for a, lam, info in dyn_all(mech, st):
            assert int(info.mobility) == 0 and int(info.status) == 0
            np.testing.assert_allclose(a[1, 0], xdd[k], atol=1e-8)
            F = reactions(mech, st, lam)["rod"][iB]
            np.testing.assert_allclose(F, T * (C - B) / l, rtol=1e-8, atol=1e-8)


def test_larin_pendulum_cartesian():
    """Seed 002's test case: a point mass on a rod in Cartesian coordinates; theta_dd = -(g/l) sin theta, and the basis
    of null(Gamma) is the unit tangent [-y2; y1] (up to sign)."""
    l, g = 1.3, 9.81
    rng = np.random.default_rng(0)
    basis = eqx.filter_jit(lambda mech, q: dense.larin_basis(jax.jacfwd(mech.phi)(q, 0.0), mech.on))
    for th, thd in zip(rng.uniform(-3, 3, 5), rng.uniform(-2, 2, 5)):
        mb = MechanismBuilder(g=g)
        mb.ground("O", (0, 0))
        p = np.array([l * np.sin(th), -l * np.cos(th)])
        mb.point("P", p, mass=0.7)
        mb.rod("rod", "O", "P")
        mech, s = mb.build()
        s = dc.State(s.x, thd * jnp.array([[l * np.cos(th), l * np.sin(th)]]), 0.0)
        a, _, info = dyn(mech, s, solver=dc.Larin())
        thdd = (p[0] * a[0, 1] - p[1] * a[0, 0]) / l**2
        np.testing.assert_allclose(thdd, -g / l * np.sin(th), rtol=1e-12, atol=1e-12)
        B, r = basis(mech, s.x.reshape(-1))
        assert int(r) == 1
        np.testing.assert_allclose(jnp.abs(B[:, 1]), np.abs([-p[1] / l, p[0] / l]), atol=1e-12)


def pendulum_pair(seed, full=False):
    """A random 4-link pendulum and the same pendulum drawn with the builder, a motor at every joint (and with
    ``full``: rigid links, a rotational damper at every joint, drag on every point, and the terminal joint's motor,
    which acts on the last link alone and reacts on the ground): (chain, state, tau, mechanism, its state)."""
    rng = np.random.default_rng(seed)
    n = 4                                                          # links; n + 1 points, point 0 pinned
    mass, length = rng.uniform(0.5, 2.0, n), rng.uniform(0.5, 1.5, n)
    extra = {}
    if full:
        extra = dict(link_mass=rng.uniform(0.2, 1.0, n), link_inertia=rng.uniform(0.01, 0.1, n),
                     link_com=rng.uniform(-0.3, 0.6, (n, 2)), k_omega=rng.uniform(0.1, 1.0, n + 1),
                     k_v=rng.uniform(0.1, 1.0, n + 1))
    chain = dc.pendulum(n, mass=mass, length=length, **extra)
    state = dc.from_joint_angles(chain, rng.uniform(-2, 2, n), rng.uniform(-2, 2, n))
    tau = jnp.asarray(rng.uniform(-1, 1, n + 1) if full else np.r_[rng.uniform(-1, 1, n), 0.0])
    mb = MechanismBuilder(g=float(chain.g))
    mb.ground("P0", np.asarray(state.x[0]))
    for k in range(1, n + 1):
        mb.point(f"P{k}", np.asarray(state.x[k]), mass=mass[k - 1])
        if full:
            mb.body(f"link{k}", f"P{k - 1}", f"P{k}", mass=extra["link_mass"][k - 1], length=length[k - 1],
                    inertia=extra["link_inertia"][k - 1], com=extra["link_com"][k - 1])
            mb.drag(f"P{k}", extra["k_v"][k])
        else:
            mb.rod(f"link{k}", f"P{k - 1}", f"P{k}")
    for j in range(n + 1 if full else n):                          # joint j: link j + 1 against link j
        a, b = (f"link{j}" if j else "ground", f"link{j + 1}") if j < n else (f"link{n}", "ground")
        mb.motor(f"m{j}", a, b)
        if full:
            mb.damper(f"d{j}", a, b, extra["k_omega"][j])
    mech, _ = mb.build()
    return chain, state, tau, mech, dc.State(state.x[1:], state.v[1:], 0.0)


recursion = jax.jit(lambda c, s, u: dc.forward_dynamics(c, s, u, solver=dc.Recursive()))


def test_open_chain_as_mechanism_matches_recursion():
    chain, state, tau, mech, s = pendulum_pair(1)
    n = mech.motor_idx.shape[0]
    a_rec = recursion(chain, state, dc.Control(tau=tau))
    for a, _, _ in dyn_all(mech, s, tau[:n]):
        np.testing.assert_allclose(a, a_rec[1:], rtol=1e-10, atol=1e-10)
    # the one entry point, on either model (the mechanism's default solver, dense KKT)
    a_mech = jax.jit(dc.forward_dynamics)(mech, s, dc.Control(tau=tau[:n]))
    np.testing.assert_allclose(a_mech, a_rec[1:], rtol=1e-10, atol=1e-10)
    assert isinstance(chain, dc.Model) and isinstance(mech, dc.Model)
    assert chain.serial and not mech.serial


def test_chain_forces_on_a_mechanism_match_the_recursion():
    """A pendulum with rigid links, a torque, joint damping and air drag at every joint and point, drawn as a mechanism
    (a motor and a rotational damper per joint, the terminal joint's against the ground; drag on every point): dense
    KKT on the mechanism and the seed-000 recursion on the chain give the same accelerations."""
    chain, state, tau, mech, s = pendulum_pair(7, full=True)
    a_rec = recursion(chain, state, dc.Control(tau=tau))
    a_mech = jax.jit(dc.forward_dynamics)(mech, s, dc.Control(tau=tau))
    np.testing.assert_allclose(a_mech, a_rec[1:], rtol=1e-10, atol=1e-10)
    # and each kind matters: without the dampers and the drag the accelerations differ
    bare = eqx.tree_at(lambda m: (m.damper_c, m.k_v), mech, (0 * mech.damper_c, 0 * mech.k_v))
    assert np.max(np.abs(jax.jit(dc.forward_dynamics)(bare, s, dc.Control(tau=tau)) - a_mech)) > 1e-2


def test_rotational_damper_and_drag_dissipate_their_power():
    """dE/dt = q_d . (M q_dd) - f_g . q_d equals -c (omega_coupler - omega_crank)^2 - k |v_C|^3, the power of a
    rotational damper between crank and coupler and of air drag at C, with the angular velocities cross(u, u_d)/|u|^2
    of the bodies' base vectors (the constraint forces do no work)."""
    c, k = 0.3, 0.2
    mb = MechanismBuilder(g=9.81)
    mb.ground("O", (0, 0)), mb.ground("A", (d_, 0))
    t2, t4 = 0.8, float(freudenstein(0.8))
    mb.point("B", (a_ * np.cos(t2), a_ * np.sin(t2))), mb.point("C", (d_ + c_ * np.cos(t4), c_ * np.sin(t4)))
    mb.body("crank", "O", "B", mass=1.0, inertia=0.05, length=a_)
    mb.body("coupler", "B", "C", mass=2.0, inertia=0.4, com=(1.2, 0.3), length=b_)
    mb.body("rocker", "A", "C", mass=1.5, inertia=0.2, length=c_)
    mb.damper("friction", "crank", "coupler", c)
    mb.drag("C", k)
    mech, guess = mb.build()
    s, info = assemble(mech, guess)
    s, _ = velocities(mech, dc.State(s.x, jnp.array([[-0.8, 0.5], [0.0, 0.0]])))
    qdd = dc.forward_dynamics(mech, s).reshape(-1)
    qd = s.v.reshape(-1)
    dE = qd @ (mech.M @ qdd) - mech.f_g @ qd
    B, C = np.asarray(s.x)
    vB, vC = np.asarray(s.v)
    rate = lambda u, du: (u[0] * du[1] - u[1] * du[0]) / (u @ u)  # noqa: E731
    w_rel = rate(C - B, vC - vB) - rate(B, vB)
    np.testing.assert_allclose(dE, -c * w_rel**2 - k * np.linalg.norm(vC) ** 3, rtol=1e-10)
    assert abs(w_rel) > 0.1 and np.linalg.norm(vC) > 0.1


def test_project_moves_a_mechanism_onto_its_loop_closure():
    """dc.project of a mechanism: a state off the four-bar's loop closure and its rate is moved onto both (the
    residuals Phi(q) and Phi_q q_dot, to round-off after three Newton steps), and a state on them stays."""
    mech, s0 = four_bar(0.8)
    rng = np.random.default_rng(3)
    off = dc.State(s0.x + 1e-3 * rng.standard_normal(s0.x.shape), rng.standard_normal(s0.x.shape), 0.0)
    q = lambda s: s.x.reshape(-1)  # noqa: E731
    assert float(jnp.max(jnp.abs(mech.phi(q(off), 0.0)))) > 1e-4
    on = jax.jit(dc.project, static_argnums=2)(mech, off, 3)
    J = jax.jacfwd(mech.phi)(q(on), 0.0)
    assert float(jnp.max(jnp.abs(mech.phi(q(on), 0.0)))) < 1e-12
    assert float(jnp.max(jnp.abs(J @ on.v.reshape(-1)))) < 1e-12
    again = dc.project(mech, on, 1)
    np.testing.assert_allclose(again.x, on.x, atol=1e-13)
    np.testing.assert_allclose(again.v, on.v, atol=1e-12)


def parallelogram(extra, th=0.7):
    mb = MechanismBuilder()
    for name, xy in (("O", (0, 0)), ("A", (2, 0)), ("H", (1, 0))):
        mb.ground(name, xy)
    u = np.array([np.cos(th), np.sin(th)])
    mb.point("B", u), mb.point("C", np.array([2, 0]) + u)
    mb.body("crank", "O", "B", mass=1.0, inertia=0.1)
    mb.body("coupler", "B", "C", mass=2.0, inertia=0.5)
    mb.body("rocker", "A", "C", mass=1.0, inertia=0.1)
    if extra:   # a third crank, parallel to the others: a redundant constraint (Gruebler count says mobility 0)
        mb.attach("F", "coupler", (1.0, 0.0))
        mb.rod("middle", "H", "F")
    return mb.build()


def test_over_constrained_loop_same_accelerations_min_norm_lambda():
    (m1, s1), (m2, s2) = parallelogram(False), parallelogram(True)
    v = jnp.array([[-0.64, 0.76], [-0.64, 0.76]]) * 1.5
    s1, s2 = dc.State(s1.x, v, 0.0), dc.State(s2.x, v, 0.0)
    ref, _, _ = dyn(m1, s1, solver=dc.KKT())
    for a, lam, info in dyn_all(m2, s2):
        np.testing.assert_allclose(a, ref, rtol=1e-10, atol=1e-10)
        assert int(info.rank) == 3 and int(info.mobility) == 1 and int(info.status) == 0
        assert int(jnp.sum(info.redundant)) == 1
        J = np.asarray(jax.jacfwd(m2.phi)(s2.x.reshape(-1), 0.0))
        lam_min = np.linalg.pinv(J.T) @ (J.T @ np.asarray(lam))
        np.testing.assert_allclose(lam, lam_min, rtol=1e-8, atol=1e-8)
    # switching the redundant row off by its mask (fixed shapes, no recompilation) leaves a properly constrained loop
    off = eqx.tree_at(lambda m: m.on, m2, m2.on.at[m2.row_names.index("middle")].set(False))
    for a, lam, info in dyn_all(off, s2):
        np.testing.assert_allclose(a, ref, rtol=1e-10, atol=1e-10)
        assert int(jnp.sum(info.redundant)) == 0 and float(lam[m2.row_names.index("middle")]) == 0.0


def test_singular_configuration_is_reported():
    """At theta = 0 the parallelogram is folded flat: all links collinear, the rank drops (bifurcation point)."""
    mech, _ = parallelogram(False)
    s = dc.State(jnp.array([[1.0, 0.0], [3.0, 0.0]]), jnp.zeros((2, 2)), 0.0)
    for a, lam, info in dyn_all(mech, s):
        assert int(info.status) == rank.SINGULAR and int(info.rank) == 2
        assert np.all(np.isfinite(a))
    with pytest.raises(Exception, match="rank dropped"):
        eqx.filter_jit(mdyn)(mech, s, check=True)


def test_unreachable_assembly_and_inconsistent_drivers_are_reported():
    mb = MechanismBuilder()
    mb.ground("O", (0, 0)), mb.ground("A", (5, 0))
    mb.point("B", (1, 0)), mb.point("C", (3, 1))
    for name, p, q in (("crank", "O", "B"), ("coupler", "B", "C"), ("rocker", "A", "C")):
        mb.body(name, p, q, mass=1.0, inertia=0.1, length=1.0)    # 1 + 1 + 1 < 5: the loop cannot close
    mech, guess = mb.build()
    s, info = assemble(mech, guess)
    assert int(info.status) == kin.UNREACHABLE and np.isfinite(float(info.residual)) and float(info.residual) > 0.1
    with pytest.raises(Exception, match="unreachable"):
        eqx.filter_jit(kin.assemble)(mech, guess, check=True)
    # the crank driven twice with different laws
    mb2 = MechanismBuilder()
    mb2.ground("O", (0, 0))
    mb2.point("B", (np.cos(0.5), np.sin(0.5)), mass=1.0)
    mb2.rod("crank", "O", "B")
    mb2.drive("d1", "angle", ("O", "B"), lambda t: 0.5 + t)
    mb2.drive("d2", "angle", ("O", "B"), lambda t: 0.5 + 2 * t + t**2)
    mech2, s2 = mb2.build()
    _, vinfo = velocities(mech2, s2)
    assert int(vinfo.status) == kin.INCONSISTENT_DRIVERS
    _, _, dinfo = dyn(mech2, s2)
    assert int(dinfo.status) == rank.INCONSISTENT


def test_builder_rejects_bad_input():
    mb = MechanismBuilder()
    mb.ground("O", (0, 0))
    with pytest.raises(ValueError, match="used twice"):
        mb.ground("O", (1, 0))
    with pytest.raises(ValueError, match="unknown point"):
        mb.rod("r", "O", "nowhere")
    mb.point("P", (0, 0))
    with pytest.raises(ValueError, match="coincident"):
        mb.rod("r", "O", "P")
    mb.point("Q", (1, 0))
    mb.rod("r", "O", "Q")
    with pytest.raises(ValueError, match="mass matrix is singular"):
        mb.build()
    with pytest.raises(ValueError, match="needs 4 points"):
        mb.drive("d", "relangle", ("O", "Q"), 0.0)
    with pytest.raises(TypeError, match="solves serial chains only"):
        mdyn(*parallelogram(False), solver=dc.Recursive())


def test_gradient_through_rollout_matches_finite_differences():
    mech, s = four_bar(0.8, motor=True)

    def final_angle(tau):
        final, _ = dc.rollout(mech, s, lambda _: dc.Control(tau=tau[None]), 2e-3, n_steps=150,
                              integrator=dc.SemiImplicitEuler())
        return rocker_angle(final.x)

    vg = jax.jit(jax.value_and_grad(final_angle))
    f = lambda tau: vg(tau)[0]  # noqa: E731
    g = vg(jnp.array(0.7))[1]
    h = 1e-5
    fd = (f(jnp.array(0.7 + h)) - f(jnp.array(0.7 - h))) / (2 * h)
    np.testing.assert_allclose(g, fd, rtol=1e-6)


def test_mass_parameters_are_differentiable():
    """d(accelerations) / d(a body's mass, inertia, centre of mass; a point mass; g) by AD through the model's arrays
    equal central differences of four-bars rebuilt by the builder with the parameter moved."""
    p0 = np.array([2.0, 0.4, 1.2, 0.3, 9.81, 0.0])     # coupler mass, inertia, com (a, b); g; point mass at C

    def build(p):
        mb_mech, _ = four_bar(0.8, masses=(1.0, p[0], 1.5), motor=True, g=p[4], coupler_inertia=p[1],
                              coupler_com=(p[2], p[3]))
        return eqx.tree_at(lambda m: m.m, mb_mech, mb_mech.m.at[mb_mech.point_names.index("C")].set(p[5]))

    mech, s = four_bar(0.8, motor=True)
    u = dc.Control(tau=jnp.array([0.7]))

    def acc(p):
        m = eqx.tree_at(lambda m: (m.bodies.mass, m.bodies.inertia, m.bodies.com, m.g, m.m), mech,
                        (mech.bodies.mass.at[1].set(p[0]), mech.bodies.inertia.at[1].set(p[1]),
                         mech.bodies.com.at[1].set(p[2:4]), p[4], mech.m.at[mech.point_names.index("C")].set(p[5])))
        return dc.forward_dynamics(m, s, u)

    jac = jax.jit(jax.jacfwd(acc))(jnp.asarray(p0))
    h = 1e-6
    for k in range(p0.size):
        e = h * np.eye(p0.size)[k]
        fd = (dyn(build(p0 + e), s, u.tau)[0] - dyn(build(p0 - e), s, u.tau)[0]) / (2 * h)
        np.testing.assert_allclose(jac[..., k], fd, rtol=1e-6, atol=1e-7)
        assert np.max(np.abs(fd)) > 1e-3     # every parameter moves the accelerations


def test_compound_pendulum_pin_reaction():
    """A body pinned by a coincidence joint (mb.pin): theta_dd = -m g a_c sin(theta) / (J + m a_c^2), and Newton's law
    for the whole body: pin force + m g = m a_com (the reaction in newtons)."""
    mass, Jc, L, ac, g = 2.0, 0.3, 1.5, 0.6, 9.81
    th, thd = 0.8, -1.1
    u = np.array([np.sin(th), -np.cos(th)])
    mb = MechanismBuilder(g=g)
    mb.point("O", (0.0, 0.0)), mb.point("P", L * u)
    mb.body("bar", "O", "P", mass=mass, com=(ac, 0.0), inertia=Jc)
    mb.pin("pivot", "O")
    mech, s = mb.build()
    s = dc.State(s.x, jnp.stack([jnp.zeros(2), thd * L * jnp.array([np.cos(th), np.sin(th)])]), 0.0)
    for a, lam, info in dyn_all(mech, s):
        thdd = (L * u[0] * a[1, 1] - L * u[1] * a[1, 0]) / L**2
        np.testing.assert_allclose(thdd, -mass * g * ac * np.sin(th) / (Jc + mass * ac**2), rtol=1e-12)
        a_com = (1 - ac / L) * a[0] + (ac / L) * a[1]
        F = reactions(mech, s, lam)["pivot"][mech.point_names.index("O")]
        np.testing.assert_allclose(F + mass * np.array([0.0, -g]), mass * a_com, rtol=1e-10, atol=1e-10)


def test_dead_center_of_slider_driven_crank_is_reported():
    """A slider-crank driven at the slider reaches its dead center at theta = 0 (crank and rod aligned): the Jacobian
    loses rank (3 < 4) and a nonzero slider speed there is kinematically impossible -- both are reported."""
    r, l = 1.0, 3.0
    mb = MechanismBuilder()
    mb.ground("O", (0, 0)), mb.ground("rail0", (0, 0)), mb.ground("rail1", (1, 0))
    mb.point("B", (r * np.cos(0.4), r * np.sin(0.4)), mass=1.0)
    mb.point("C", (r * np.cos(0.4) + np.sqrt(l**2 - (r * np.sin(0.4)) ** 2), 0.0), mass=2.0)
    mb.rod("crank", "O", "B"), mb.rod("rod", "B", "C")
    mb.slider("rail", "C", "rail0", "rail1")
    mb.drive("piston", "x", ("C",), lambda t: r + l + 0.5 * t)
    mech, _ = mb.build()
    dead = dc.State(jnp.array([[r, 0.0], [r + l, 0.0]]), jnp.zeros((2, 2)), 0.0)
    _, vinfo = velocities(mech, dead)
    assert int(vinfo.rank) == 3 and int(vinfo.status) == kin.INCONSISTENT_DRIVERS
    a, _, info = dyn(mech, dead)
    assert int(info.status) == rank.SINGULAR and np.all(np.isfinite(a))


def test_solver_derivatives_agree():
    """Reverse-mode derivatives of q_dd w.r.t. positions and velocities through each solver (the complete-pivoting
    elimination, Larin's reflections, Cholesky, LU) agree: the pivot choice is piecewise constant, the arithmetic
    differentiable."""
    mech, s = four_bar(1.1)
    v = jnp.array([[0.3, -0.7], [1.1, 0.2]])

    @eqx.filter_jit
    def jacs(mech, x, v):
        f = lambda sv: lambda x, v: mdyn(mech, dc.State(x, v, 0.0), solver=sv, stab=0.05).a  # noqa
        return [jax.jacrev(f(sv), argnums=(0, 1))(x, v) for sv in SOLVERS]

    ref, *others = jacs(mech, s.x + 1e-3, v)
    assert all(np.all(np.isfinite(r)) for r in ref)
    for o in others:
        for a, b in zip(o, ref):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10 * float(jnp.max(jnp.abs(b))))


def test_baumgarte_stabilisation_reduces_drift():
    """Seed 001 §8.3 (seed 004: the naive scheme drifts): with alpha = beta = 1/T_stab, T_stab = 5 dt, the largest
    constraint violation of a 4 s symplectic-Euler run of the four-bar is several times smaller than without."""
    mech, s = four_bar(0.8)
    s, _ = velocities(mech, dc.State(s.x, jnp.array([[-2.0, 1.5], [0.0, 0.0]]), 0.0))

    @eqx.filter_jit
    def drift(mech, s):
        out = []
        for factor in (None, 5.0):
            _, traj = dc.rollout(mech, s, None, 2e-3, n_steps=2000,
                                 integrator=dc.SemiImplicitEuler(stab_factor=factor),
                                 check=factor is not None)  # (without stabilisation it drifts on purpose)
            out.append(jnp.max(jnp.abs(jax.vmap(lambda x: mech.phi(x.reshape(-1), 0.0))(traj.x))))
        return out

    plain, stabilised = drift(mech, s)
    assert float(plain) > 5 * float(stabilised) and float(stabilised) < 3e-3


@pytest.mark.slow
def test_rollout_and_step_take_stacked_torques_a_policy_or_none():
    """dc.rollout of a mechanism: the motor torques as a stacked Control, as a policy and (zero) as None, and dc.step
    in a loop, give the same run as the integrator written out with forward_dynamics."""
    mech, s = four_bar(0.8, motor=True)
    dt, n = 2e-3, 20
    stacked = dc.rollout(mech, s, dc.Control(tau=jnp.full((n, 1), 0.5)), dt, n_steps=n, integrator=dc.RK4())[0]
    policy = dc.rollout(mech, s, lambda _: dc.Control(tau=jnp.array([0.5])), dt, n_steps=n, integrator=dc.RK4())[0]
    zero = dc.rollout(mech, s, None, dt, n_steps=n, integrator=dc.RK4())[0]
    rk4 = dc.RK4()

    @jax.jit
    def written_out(tau):
        accel = lambda s_: mdyn(mech, s_, tau[None], stab=rk4.stab(dt)).a  # noqa: E731
        return jax.lax.fori_loop(0, n, lambda _, s_: rk4(accel, s_, dt), s)

    one_step = jax.jit(lambda s_: dc.step(mech, s_, dc.Control(tau=jnp.array([0.5])), dt, integrator=rk4))
    stepped = s
    for _ in range(n):
        stepped = one_step(stepped)
    for tau, final in ((0.5, stacked), (0.5, policy), (0.0, zero), (0.5, stepped)):
        ref = written_out(jnp.asarray(tau))
        np.testing.assert_allclose(final.x, ref.x, rtol=0, atol=1e-13)
        np.testing.assert_allclose(final.v, ref.v, rtol=0, atol=1e-12)
