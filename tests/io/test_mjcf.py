"""The MJCF exporter (dc.to_mjcf, issue 55 item 1): MuJoCo loads the export, and its accelerations (mj_forward's
qacc at the exported keyframe) equal diffchain's: to 1e-9 relative on open chains and open mechanisms, and on closed
loops within MuJoCo's soft equality tolerance, which shrinks in proportion to 1 - impedance as the export stiffens."""
import os

import jax
import numpy as np
import pytest

import diffchain as dc

mujoco = pytest.importorskip("mujoco")
pytestmark = pytest.mark.skipif(os.environ.get("DIFFCHAIN_NO_MUJOCO") is not None, reason="MuJoCo disabled")

fd = jax.jit(lambda model, state, control: dc.forward_dynamics(model, state, control))


def mujoco_forward(xml, tau):
    """MuJoCo's data after mj_forward at the export's keyframe (the diffchain state) with ctrl = tau."""
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, 0)
    d.ctrl[:] = tau
    mujoco.mj_forward(m, d)
    return d


def mujoco_qacc(xml, tau):
    return np.array(mujoco_forward(xml, tau).qacc)


def chain_qacc(chain, state, a, kind):
    """diffchain's accelerations a (n, 2) in MuJoCo's coordinates: point 1's (x, y) (a free chain) or its acceleration
    along the rail (direction (-s_y, s_x)), then the joint angular accelerations (seed eq. 13)."""
    alpha = np.asarray(dc.joint_accelerations(state, a))[:-1]
    base = {"pendulum": [], "free": list(a[0]), "cart": [np.array([-chain.s[0, 1], chain.s[0, 0]]) @ a[0]]}[kind]
    return np.concatenate([base, alpha])


def random_chain(rng, n, kind, links, damping):
    """A random chain of n points: pinned at point 1 (a pendulum), free, or with point 1 on a tilted rail."""
    m, l = rng.uniform(0.3, 2.0, n), rng.uniform(0.3, 1.5, n - 1)
    kw = dict(k_omega=rng.uniform(0.0, 0.5, n) * np.r_[np.ones(n - 1), 0.0] if damping else np.zeros(n),
              g=rng.uniform(5, 15))
    if links:
        kw.update(link_mass=rng.uniform(0.1, 2, n - 1), link_com=rng.normal(size=(n - 1, 2)) * 0.4,
                  link_inertia=rng.uniform(0.01, 0.3, n - 1))
    if kind == "pendulum":
        kw["guided"] = np.r_[True, np.zeros(n - 1, bool)]
    if kind == "cart":
        a = rng.uniform(-0.5, 0.5)
        kw.update(slider=np.r_[True, np.zeros(n - 1, bool)], s=np.broadcast_to([-np.sin(a), np.cos(a)], (n, 2)),
                  c=np.r_[rng.normal(), np.zeros(n - 1)])
    chain = dc.Chain(m, l, **kw)
    if kind == "cart":   # point 1 on its line {x : s.x = c}, moving along it
        s, c = np.asarray(chain.s[0]), float(chain.c[0])
        t = np.array([-s[1], s[0]])
        base, v0 = c * s + rng.normal() * t, rng.normal() * t
    else:                # a pin anywhere, or a free point 1 moving
        base, v0 = rng.normal(size=2), rng.normal(size=2) * (kind == "free")
    state = dc.from_joint_angles(chain, rng.uniform(-3, 3, n - 1), rng.normal(size=n - 1) * 2, base=base,
                                 base_velocity=v0)
    return chain, state


@pytest.mark.parametrize("links", [False, True], ids=["points", "links"])
@pytest.mark.parametrize("n", range(1, 7))
def test_open_chains_against_mujoco(n, links):
    """Random chains of n = 1..6 points (pinned, free, on a rail; random masses, lengths, link mass, centre of mass
    and inertia, gravity, joint damping, angles, rates, torques): MuJoCo's qacc equal diffchain's joint
    accelerations (and point 1's) to 1e-9 relative. One compiled program per n: the kinds are masks."""
    rng = np.random.default_rng(10 * n + links)
    compared = 0
    for trial, kind in enumerate(("pendulum", "free", "cart") * 2):
        if n == 1 and kind == "pendulum":
            continue   # nothing moves
        chain, state = random_chain(rng, n, kind, links, damping=trial >= 3)
        tau = rng.normal(size=n)
        a = np.asarray(fd(chain, state, dc.Control(tau=tau)))
        want = chain_qacc(chain, state, a, kind)
        d = mujoco_forward(dc.to_mjcf(chain, state), tau)
        got = np.array(d.qacc)
        assert got.shape == want.shape
        # the keyframe is the state: point 1's coordinates, then the joint angles; each body's origin is its
        # link's first point (the world is body 0)
        base = {"pendulum": [], "free": list(state.x[0]),
                "cart": [np.array([-chain.s[0, 1], chain.s[0, 0]]) @ (state.x[0] - chain.c[0] * chain.s[0])]}
        np.testing.assert_allclose(d.qpos, np.r_[base[kind], dc.joint_angles(state)], atol=1e-12)
        np.testing.assert_allclose(d.xpos[1:, [0, 2]], state.x[:max(n - 1, 1)], atol=1e-12)
        assert np.all(d.xpos[1:, 1] == 0)
        err = np.max(np.abs(got - want)) / np.max(np.abs(want))
        assert err <= 1e-9, (n, kind, links, err)
        compared += 1
    assert compared >= 4


@pytest.mark.parametrize("kind", ["pendulum", "free"])
def test_torsional_springs_and_dampers_at_every_joint(kind):
    """Torsional springs and dampers at every joint, the last one too (on link n-1 against the world: no hinge joins
    them, so a fixed tendon of all the hinges), and torques at every joint (the last: a site torque): MuJoCo's qacc
    equal diffchain's to 1e-9 relative. The rest angles are within pi of the angles (MuJoCo's springs are linear in
    the angle, diffchain's in the wrapped angle)."""
    rng = np.random.default_rng(3 + (kind == "free"))
    n = 4
    theta = rng.uniform(-1, 1, n - 1)
    rest = np.r_[theta, -np.sum(theta)] + rng.uniform(-1, 1, n)   # (joint n's angle: minus link n-1's)
    chain, _ = random_chain(rng, n, kind, links=True, damping=True)
    chain = dc.Chain(chain.m, chain.l, guided=chain.guided, link_mass=chain.link_mass, link_com=chain.link_com,
                     link_inertia=chain.link_inertia, k_omega=rng.uniform(0.1, 1, n), torsion_k=rng.uniform(1, 5, n),
                     torsion_theta0=rest)
    state = dc.from_joint_angles(chain, theta, rng.normal(size=n - 1), base_velocity=rng.normal(size=2) * (
        kind == "free"))
    tau = rng.normal(size=n)
    a = np.asarray(fd(chain, state, dc.Control(tau=tau)))
    want = chain_qacc(chain, state, a, kind)
    xml = dc.to_mjcf(chain, state)
    assert "<fixed" in xml
    got = mujoco_qacc(xml, tau)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * np.abs(want).max())


def open_mechanism():
    """An open mechanism drawn with MechanismBuilder: a double pendulum of rigid bodies with an attached point
    carrying a mass, a linear spring-damper from it to the ground, a torsional spring with damping between the
    bodies, a rotational damper, a second branch (a leg on O) and three motors: across the elbow, from the ground onto
    the forearm, and from the leg onto the forearm (parts that no hinge joins: a site torque against a refsite), with a
    torsional spring-damper between them too (a fixed tendon)."""
    b = dc.MechanismBuilder(g=9.81)
    b.ground("O", (0.0, 0.0)), b.ground("F", (1.5, -1.0))
    b.point("A", (0.8, -0.6), mass=0.4), b.point("B", (1.9, -0.9), mass=0.3)
    b.body("arm", "O", "A", mass=1.2, com=(0.4, 0.1), inertia=0.08)
    b.body("forearm", "A", "B", mass=0.7, com=(0.5, -0.05), inertia=0.05)
    b.attach("C", "forearm", (0.6, 0.2))
    b.spring("spring", "C", "F", k=15.0, L0=0.5, c=0.7)
    b.torsional_spring("elbow", "arm", "forearm", k=3.0, theta0=0.4, c=0.2)
    b.damper("shoulder", "ground", "arm", c=0.3)
    b.point("D", (-0.5, -0.8), mass=0.2), b.body("leg", "O", "D", mass=0.5, com=(0.3, 0.1), inertia=0.03)
    b.motor("m_elbow", "arm", "forearm"), b.motor("m_forearm", "ground", "forearm")
    b.motor("m_cross", "leg", "forearm")
    b.torsional_spring("cross", "leg", "forearm", k=2.0, theta0=1.5, c=0.1)   # (drawn at 1.86 rad)
    return b.build()


def test_open_mechanism_against_mujoco():
    """The open mechanism (bodies with offset centres of mass, a point mass, an attached point, a spatial-tendon
    spring-damper, a torsional spring, a damper, a joint motor and site torques): MuJoCo's qacc equal diffchain's
    joint angular accelerations to 1e-9 relative, at a random velocity."""
    mech, state = open_mechanism()
    rng = np.random.default_rng(1)
    x = np.asarray(state.x)
    # a random velocity of the three rigid bodies: omega_1 (arm) and omega_3 (leg) about O, omega_2 (forearm) about A
    w1, w2, w3 = rng.normal(size=3)
    perp = lambda d: np.array([-d[1], d[0]])  # noqa: E731
    vA = w1 * perp(x[0])
    vB = vA + w2 * perp(x[1] - x[0])
    state = dc.State(state.x, np.stack([vA, vB, w3 * perp(x[2])]))
    tau = rng.normal(size=3)
    a = np.asarray(fd(mech, state, dc.Control(tau=tau))).reshape(3, 2)

    def rate(d, dv):
        return (d[0] * dv[1] - d[1] * dv[0]) / (d @ d)

    def accel(d, dv, da):   # d^2/dt^2 of atan2(d) = (d x da) / |d|^2 - 2 (d.dv)(d x dv) / |d|^4
        return rate(d, da) - 2 * (d @ dv) * (d[0] * dv[1] - d[1] * dv[0]) / (d @ d) ** 2

    v = np.asarray(state.v)
    al1 = accel(x[0], v[0], a[0])
    al2 = accel(x[1] - x[0], v[1] - v[0], a[1] - a[0])
    want = np.array([al1, al2 - al1, accel(x[2], v[2], a[2])])   # MuJoCo's tree: arm (forearm on it), leg
    got = mujoco_qacc(dc.to_mjcf(mech, state), tau)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * np.abs(want).max())


def angle_acc(d, dv, da):
    """The second derivative of the angle of a vector d (2,) moving with dv, da: (d x da) / |d|^2 - 2 (d.dv)
    (d x dv) / |d|^4."""
    return (d[0] * da[1] - d[1] * da[0]) / (d @ d) - 2 * (d @ dv) * (d[0] * dv[1] - d[1] * dv[0]) / (d @ d) ** 2


def four_bar_case():
    """The four-bar (dc.systems.four_bar), its crank turning at 2 rad/s; MuJoCo's tree: the crank on A0, the coupler
    on A, the rocker on B0, closed at B: qacc = (crank, coupler - crank, rocker)."""
    from diffchain.systems import four_bar

    mech, state = four_bar()
    state = moving(mech, state)
    a = np.asarray(fd(mech, state, dc.Control(tau=np.array([1.3])))).reshape(-1, 2)
    x, v = np.asarray(state.x), np.asarray(state.v)
    A0, B0 = np.array([0.0, 0.0]), np.array([2.0, 0.0])
    crank = angle_acc(x[0] - A0, v[0], a[0])
    coupler = angle_acc(x[1] - x[0], v[1] - v[0], a[1] - a[0])
    return mech, state, [1.3], np.array([crank, coupler - crank, angle_acc(x[1] - B0, v[1], a[1])])


def bridge_case():
    """A chain of 4 points pinned at both ends (a loop through the ground; guided points are fixed) with joint
    dampers, moving along its one degree of freedom; MuJoCo's tree: rod 1 on point 1, rod 3 on point 4, rod 2 on
    rod 1, closed at point 3: qacc = (phi_1, phi_2 - phi_1, phi_3) of the rods' angles."""
    x = np.array([[0.0, 0.0], [0.7, -0.5], [1.6, -0.6], [2.2, 0.1]])
    chain = dc.Chain([1.0, 0.8, 1.3, 1.0], np.linalg.norm(np.diff(x, axis=0), axis=1), guided=[1, 0, 0, 1],
                     k_omega=[0.2, 0.3, 0.4, 0.1])   # (joint 3 is the cut: a fixed tendon's damper)
    d = np.diff(x, axis=0)
    # v_2, v_3 with d_1.v_2 = 0, d_2.(v_3 - v_2) = 0, d_3.v_3 = 0 (the rods' lengths kept)
    J = np.array([[*d[0], 0, 0], [*-d[1], *d[1]], [0, 0, *-d[2]]])
    w = np.linalg.svd(J)[2][-1]
    v = np.stack([np.zeros(2), w[:2], w[2:], np.zeros(2)]) * 3.0
    state = dc.State(x, v)
    tau = np.array([0.4, -0.3, 0.2, 0.0])
    a = np.asarray(fd(chain, state, dc.Control(tau=tau)))
    phi = [angle_acc(d[k], v[k + 1] - v[k], a[k + 1] - a[k]) for k in range(3)]
    return chain, state, tau, np.array([phi[0], phi[1] - phi[0], phi[2]])


def slider_crank_case():
    """A slider-crank: the crank O-A, the rod A-S, the slider S on a fixed line through two ground points; MuJoCo's
    tree: the rod on S (a root's slide along the line and a hinge), the crank on O, closed at A:
    qacc = (S along the line, the rod's angle, the crank's)."""
    b = dc.MechanismBuilder(g=9.81)
    A = np.array([0.5, 0.5])
    S = np.array([0.5 + np.sqrt(1.5**2 - 0.25), 0.0])
    b.ground("O", (0.0, 0.0)), b.ground("L0", (-1.0, 0.0)), b.ground("L1", (3.0, 0.0))
    b.point("A", A), b.point("S", S, mass=0.8)
    b.body("crank", "O", "A", mass=1.0, inertia=0.05), b.body("rod", "A", "S", mass=0.6, inertia=0.1)
    b.slider("rail", "S", "L0", "L1"), b.motor("drive", "ground", "crank"), b.damper("pin", "crank", "rod", 0.3)
    mech, _ = b.build()
    vA = 2.0 * np.array([-A[1], A[0]])
    vS = np.array([(S - A) @ vA / (S - A)[0], 0.0])   # (S - A).(vS - vA) = 0
    state = dc.State(np.stack([A, S]), np.stack([vA, vS]))
    a = np.asarray(fd(mech, state, dc.Control(tau=np.array([0.7])))).reshape(-1, 2)
    want = np.array([a[1, 0], angle_acc(S - A, vS - vA, a[1] - a[0]), angle_acc(A, vA, a[0])])
    return mech, state, [0.7], want


@pytest.mark.parametrize("case", [four_bar_case, bridge_case, slider_crank_case],
                         ids=["four_bar", "bridge", "slider_crank"])
def test_loops_within_the_soft_tolerance(case):
    """Closed loops (the four-bar; a chain pinned at both ends), cut at a joint and closed by a connect: MuJoCo's
    soft equality gives accelerations that differ from diffchain's exact ones by a relative error proportional to
    its softness (1 - d)/d, d the impedance of solimp (MuJoCo regularises the constraint with R = (1 - d)/d
    diag(A)): at the stiffest impedance MuJoCo allows, d = 0.9999 (the export's default), the error is below 1e-3
    relative (measured about 1e-4), and it shrinks 100-fold from d = 0.99, which shows it is MuJoCo's softness, not
    the export."""
    model, state, tau, want = case()
    errs = []
    for d in (0.99, 0.9999):
        xml = dc.to_mjcf(model, state, solimp=(d, d, 0.001, 0.5, 2))
        assert "<connect" in xml
        got = mujoco_qacc(xml, tau)
        errs.append(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    assert errs[1] <= 1e-3, errs
    assert 30 <= errs[0] / errs[1] <= 300, errs
    assert dc.to_mjcf(model, state) == dc.to_mjcf(model, state, solimp=(0.9999, 0.9999, 0.001, 0.5, 2))


def moving(mech, state):
    """``state`` with the four-bar's crank turning at 2 rad/s: the velocities from the loop's velocity constraint
    J v = 0 with the crank's rate prescribed (least squares through the exact null space)."""
    q = np.asarray(state.x).reshape(-1)
    J = np.asarray(jax.jacfwd(mech.phi)(q, 0.0))
    x = np.asarray(state.x)
    vA = 2.0 * np.array([-x[0, 1], x[0, 0]])
    # unknown vB (2): the coupler and rocker rows J[:, 2:] vB = -J[:, :2] vA
    vB = np.linalg.lstsq(J[:, 2:], -J[:, :2] @ vA, rcond=None)[0]
    v = np.stack([vA, vB])
    assert np.max(np.abs(J @ v.reshape(-1))) < 1e-12
    return dc.State(state.x, v)


def test_slider_mechanism_against_mujoco():
    """A pendulum on a cart drawn with MechanismBuilder (the cart a point on a tilted line through two ground points,
    the pole a body with an offset centre of mass): a root's slide and hinge, open, so MuJoCo's qacc equal
    diffchain's to 1e-9 relative."""
    b = dc.MechanismBuilder(g=9.81)
    L0, L1 = np.array([-1.0, 0.2]), np.array([2.0, 0.6])
    S, P = L0 + 0.4 * (L1 - L0), np.array([0.6, 1.1])
    b.ground("L0", L0), b.ground("L1", L1), b.point("S", S, mass=1.5), b.point("P", P, mass=0.5)
    b.body("pole", "S", "P", mass=0.3, com=(0.4, 0.1), inertia=0.02)
    b.slider("rail", "S", "L0", "L1"), b.motor("m", "ground", "pole")
    mech, _ = b.build()
    t = (L1 - L0) / np.linalg.norm(L1 - L0)
    vS = -0.7 * t
    vP = vS + 1.3 * np.array([-(P - S)[1], (P - S)[0]])
    state = dc.State(np.stack([S, P]), np.stack([vS, vP]))
    a = np.asarray(fd(mech, state, dc.Control(tau=np.array([0.4])))).reshape(-1, 2)
    want = np.array([t @ a[0], angle_acc(P - S, vP - vS, a[1] - a[0])])
    got = mujoco_qacc(dc.to_mjcf(mech, state), [0.4])
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9 * np.abs(want).max())


def test_refused_kinds_name_the_kind(tmp_path):
    """What MuJoCo cannot express exactly is refused with a ValueError naming the kind; nothing is dropped."""
    from diffchain.systems import four_bar

    chain = dc.pendulum(2)
    state = dc.from_joint_angles(chain, np.array([0.3, 0.2]))
    with pytest.raises(ValueError, match="air drag"):
        dc.to_mjcf(dc.pendulum(2, k_v=0.1), state)
    dc.to_mjcf(dc.pendulum(2, k_v=0.0), state)   # (zero drag acts on nothing)
    with pytest.raises(ValueError, match="angle stops"):
        dc.to_mjcf(*four_bar(stop=1.2))
    with pytest.raises(ValueError, match=r"sliders at points \[2\]"):
        dc.to_mjcf(dc.Chain([1.0, 1.0, 1.0], [1.0, 1.0], slider=[False, False, True]))
    b = dc.MechanismBuilder()
    b.ground("O", (0, 0)), b.point("A", (1, 0), mass=1.0), b.point("S", (2, 0), mass=1.0)
    b.body("crank", "O", "A", mass=1.0), b.body("rod", "A", "S", mass=1.0), b.point("T", (2, 1), mass=1.0)
    b.body("post", "S", "T", mass=1.0)
    b.prismatic("guide", "rod", "post")   # (S and T on the rod's line: a line on a moving body)
    with pytest.raises(ValueError, match="slider of point 'S' on a moving line"):
        dc.to_mjcf(*b.build())
    b = dc.MechanismBuilder()
    b.ground("O", (0, 0)), b.point("A", (1, 0), mass=1.0)
    b.rod("r", "O", "A"), b.drive("d", "angle", ["O", "A"], lambda t: t)
    with pytest.raises(ValueError, match="drivers"):
        dc.to_mjcf(*b.build())
    with pytest.raises(ValueError, match="needs its state"):
        dc.to_mjcf(four_bar()[0])
    with pytest.raises(TypeError, match="state must be a diffchain State"):
        dc.to_mjcf(chain, np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"state.x must have shape \(N, 2\) = \(3, 2\)"):
        dc.to_mjcf(chain, dc.State(np.zeros((4, 2))))
    with pytest.raises(ValueError, match="integrator"):
        dc.to_mjcf(chain, integrator="verlet")
    path = tmp_path / "chain.xml"
    xml = dc.to_mjcf(chain, state, path=path, timestep=2e-3, integrator="RK4")
    assert path.read_text() == xml and 'timestep="0.002" integrator="RK4"' in xml
    assert mujoco.MjModel.from_xml_string(xml).opt.timestep == 2e-3
    assert '<mujoco model="a &amp; b">' in dc.to_mjcf(chain, state, name="a & b")
    xml = dc.to_mjcf(dc.free_chain(2))   # (no state: the keyframe is the stretched chain at rest)
    assert "nan" not in xml.lower() and 'qpos="0.0 0.0 0.0 0.0"' in xml and 'qvel="0.0 0.0 0.0 0.0"' in xml
