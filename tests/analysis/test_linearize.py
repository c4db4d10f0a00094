"""Per-step linearisations (dc.linearize, dc.event_linearize, dc.step_hessians): A = dx+/dx and B = dx+/du against
the analytic linearisation of an integrator, central differences of the step computed through coordinates built
here (not the library's chart), the closed-form saltation matrix of a plastic impact, and the per-element results
of the batched program."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc
from diffchain import systems

H = 1e-5  # central-difference step: truncation ~H^2 |f'''|, round-off ~1e-16 / H, both far below 1e-8


def central(f, x0, h=H):
    """The Jacobian of f at x0 by central differences, one column per coordinate."""
    cols = [(f(x0.at[i].add(h)) - f(x0.at[i].add(-h))) / (2 * h) for i in range(x0.shape[0])]
    return jnp.stack(cols, axis=-1)


def test_pendulum_semi_implicit_euler_is_its_analytic_linearisation():
    """A single pendulum (mass m at distance l from the pin, angle theta from +x, gravity along -y) under
    SemiImplicitEuler without drift correction, in angle coordinates (theta, theta_dot): A and B equal the
    linearisation derived here by hand (to 1e-12) and central differences of dc.step (to 1e-8).

    On the circle x = l u, v = l theta_dot u_perp (u = (cos theta, sin theta)), the constrained acceleration is
    a = -l theta_dot^2 u + l theta_dd u_perp with theta_dd = -(g/l) cos theta + (tau_1 - tau_2) / (m l^2) (tau_2, the
    torque of joint n = 2, acts on the last link with the opposite sign: the power is sum tau_i omega_i^z with
    omega_2^z = -omega_1). The integrator acts on the Cartesian state: v+ = v + dt a, x+ = x + dt v+. With
    w = theta_dot + dt theta_dd, a = 1 - dt^2 theta_dot^2, b = dt w:
        x+ / l = a u + b u_perp,   v+ / l = -dt theta_dot^2 u + w u_perp,
    so the new angle and rate (omega = (x+ x v+) / |x+|^2, as the library measures it, with the current length) are
        theta+ = theta + atan2(b, a),   theta_dot+ = (a w + dt theta_dot^2 b) / (a^2 + b^2) = w / (a^2 + b^2).
    Their partial derivatives are written out by hand below (d a / d theta_dot = -2 dt^2 theta_dot,
    d w / d theta = dt (g/l) sin theta, d w / d theta_dot = 1, d w / d tau_1 = -d w / d tau_2 = dt / (m l^2))."""
    m, l, g, dt = 0.8, 1.3, 9.81, 0.02
    th, thd, tau = 0.7, -1.1, jnp.array([0.3, -0.2])
    arm = dc.pendulum(1, mass=m, length=l)
    state = dc.from_joint_angles(arm, jnp.array([th]), jnp.array([thd]))
    A, B = dc.linearize(arm, state, dc.Control(tau=tau), dt, coords="minimal",
                        integrator=dc.SemiImplicitEuler(stab_factor=None))

    thdd = -(g / l) * np.cos(th) + (tau[0] - tau[1]) / (m * l**2)
    w = thd + dt * thdd
    a, b = 1 - dt**2 * thd**2, dt * w
    s2 = a**2 + b**2

    def d(dth, dw, da):  # (d theta+, d theta_dot+) for the partials of theta, w and a
        db = dt * dw
        return np.array([dth + (a * db - b * da) / s2, dw / s2 - w * (2 * a * da + 2 * b * db) / s2**2])

    dw_dth, da_dthd = dt * (g / l) * np.sin(th), -2 * dt**2 * thd
    A_ref = np.stack([d(1.0, dw_dth, 0.0), d(0.0, 1.0, da_dthd)], axis=1)
    k = dt / (m * l**2)
    B_ref = np.stack([d(0.0, k, 0.0), d(0.0, -k, 0.0)], axis=1)
    np.testing.assert_allclose(A, A_ref, rtol=0, atol=1e-12)
    np.testing.assert_allclose(B, B_ref, rtol=0, atol=1e-12)
    assert abs(A_ref[1, 0]) > 0.05 and abs(A_ref[0, 1] - dt) < 1e-3  # the gravity term and dtheta+/dtheta_dot ~ dt
    step = jax.jit(lambda z, tau: dc.step(arm, dc.from_joint_angles(arm, z[:1], z[1:]), dc.Control(tau=tau), dt,
                                          integrator=dc.SemiImplicitEuler(stab_factor=None), check=False))

    def f(z, t=tau):
        new = step(z, t)
        return jnp.concatenate([dc.joint_angles(new), dc.joint_velocities(new)[:1]])

    z0 = jnp.array([th, thd])
    np.testing.assert_allclose(A, central(f, z0), rtol=0, atol=1e-8)  # and central differences of the step
    np.testing.assert_allclose(B, central(lambda t: f(z0, t), tau), rtol=0, atol=1e-8)


def _double_pendulum():
    arm = dc.pendulum(2, mass=[1.0, 0.7], length=[1.0, 0.8], k_omega=0.05)
    theta, theta_dot = jnp.array([0.4, -0.9]), jnp.array([0.6, 1.5])
    return arm, theta, theta_dot, dc.Control(tau=jnp.array([0.3, -0.5, 0.1]))


def test_double_pendulum_points_equals_central_differences():
    """In point coordinates (x, v flattened), with the default integrator Projected(RK4): A and B equal central
    differences of dc.step to 1e-8; A is singular (its range is tangent to the rods)."""
    arm, theta, theta_dot, u = _double_pendulum()
    state = dc.from_joint_angles(arm, theta, theta_dot)
    dt = 0.01
    A, B = dc.linearize(arm, state, u, dt)
    step = jax.jit(lambda s, u: dc.step(arm, s, u, dt, check=False))
    X0 = jnp.concatenate([state.x.ravel(), state.v.ravel()])

    def f(X, tau=u.tau):
        new = step(dc.State(X[:6].reshape(3, 2), X[6:].reshape(3, 2)), dc.Control(tau=tau))
        return jnp.concatenate([new.x.ravel(), new.v.ravel()])

    assert A.shape == (12, 12) and B.shape == (12, 3)
    np.testing.assert_allclose(A, central(f, X0), rtol=0, atol=1e-8)
    np.testing.assert_allclose(B, central(lambda t: f(X0, t), u.tau), rtol=0, atol=1e-8)
    assert np.linalg.matrix_rank(np.asarray(A), tol=1e-6) < 12


@pytest.mark.slow
def test_double_pendulum_minimal_equals_central_differences():
    """In joint angles and rates: A and B equal central differences of dc.step between states built by
    dc.from_joint_angles and read by dc.joint_angles / dc.joint_velocities (not the linearisation's chart); and
    dc.minimal_coordinates / dc.from_minimal_coordinates are that chart and its inverse."""
    arm, theta, theta_dot, u = _double_pendulum()
    dt = 0.01
    state = dc.from_joint_angles(arm, theta, theta_dot)
    A, B = dc.linearize(arm, state, u, dt, coords="minimal")
    step = jax.jit(lambda s, u: dc.step(arm, s, u, dt, check=False))

    def f(z, tau=u.tau):
        new = step(dc.from_joint_angles(arm, z[:2], z[2:]), dc.Control(tau=tau))
        return jnp.concatenate([dc.joint_angles(new), dc.joint_velocities(new)[:2]])

    z0 = jnp.concatenate([theta, theta_dot])
    assert A.shape == (4, 4) and B.shape == (4, 3)
    np.testing.assert_allclose(A, central(f, z0), rtol=0, atol=1e-8)
    np.testing.assert_allclose(B, central(lambda t: f(z0, t), u.tau), rtol=0, atol=1e-8)
    np.testing.assert_allclose(dc.minimal_coordinates(arm, state), z0, atol=1e-14)
    back = dc.from_minimal_coordinates(arm, z0, state)
    np.testing.assert_allclose(back.x, state.x, atol=1e-14)
    np.testing.assert_allclose(back.v, state.v, atol=1e-14)


@pytest.mark.slow
def test_cart_pole_minimal_coordinates_are_rail_position_and_angle():
    """A cart on the x axis with a pole: minimal coordinates (cart x, pole angle, their rates). A, and B with respect
    to the point forces (inputs="F": the force on the cart is column 0), equal central differences of dc.step between
    states built here from (x_c, theta) by hand."""
    cart = dc.cart_chain(1, mass=[1.0, 0.3], length=0.7)
    dt = 0.02
    z0 = jnp.array([0.2, 1.2, -0.4, 0.8])
    F0 = jnp.array([[1.5, 0.0], [0.0, 0.0]])

    def build(z):
        u = jnp.stack([jnp.cos(z[1]), jnp.sin(z[1])])
        up = jnp.stack([-u[1], u[0]])
        base, vb = jnp.stack([z[0], 0.0]), jnp.stack([z[2], 0.0])
        return dc.State(jnp.stack([base, base + 0.7 * u]), jnp.stack([vb, vb + 0.7 * z[3] * up]))

    step = jax.jit(lambda s, F: dc.step(cart, s, dc.Control(tau=jnp.zeros(2), F=F), dt, check=False))

    def f(z, push=F0[0, 0]):
        new = step(build(z), F0.at[0, 0].set(push))
        return jnp.concatenate([new.x[0, :1], dc.joint_angles(new), new.v[0, :1], dc.joint_velocities(new)[:1]])

    state = build(z0)
    np.testing.assert_allclose(dc.minimal_coordinates(cart, state), z0, atol=1e-14)
    A, B = dc.linearize(cart, state, dc.Control(tau=jnp.zeros(2), F=F0), dt, coords="minimal", inputs="F")
    assert A.shape == (4, 4) and B.shape == (4, 4)  # B: d/dF of the two points' forces, flattened
    np.testing.assert_allclose(A, central(f, z0), rtol=0, atol=1e-8)
    np.testing.assert_allclose(B[:, 0], central(lambda p: f(z0, p[0]), F0[0, :1])[:, 0], rtol=0, atol=1e-8)
    # the push accelerates the cart as if it carried the pole's mass times r_x^2 (the rod transmits force along r):
    # d xdot+ / dF ~ dt / (m_c + m_p cos^2 theta) to first order in dt
    assert abs(float(B[2, 0]) - dt / (1.0 + 0.3 * np.cos(1.2) ** 2)) < 0.01 * dt


@pytest.mark.slow
def test_four_bar_minimal_equals_central_differences():
    """The crank-rocker four-bar (dc.systems.four_bar) in its motor angle (the crank's) and rate: A and B equal
    central differences of dc.step between states built from the crank angle by the closed-form circle intersection
    (B on the circles about A and B0, on the drawn branch; velocities by differentiating it along the crank rate), and
    read back as atan2 of the crank and its angular velocity."""
    mech, drawn = systems.four_bar()
    A0, B0 = jnp.array([0.0, 0.0]), jnp.array([2.0, 0.0])
    crank, coupler, rocker = 1.0, float(jnp.linalg.norm(drawn.x[1] - drawn.x[0])), float(jnp.linalg.norm(drawn.x[1]
                                                                                                           - B0))

    def points(th):
        a = A0 + crank * jnp.stack([jnp.cos(th), jnp.sin(th)])
        d = B0 - a
        dist = jnp.linalg.norm(d)
        along = (dist**2 + coupler**2 - rocker**2) / (2 * dist)
        across = jnp.sqrt(coupler**2 - along**2)
        e = d / dist
        b = a + along * e + across * jnp.stack([-e[1], e[0]])  # the drawn branch: B left of A -> B0
        return jnp.stack([a, b])

    def build(z):
        x, v = jax.jvp(points, (z[0],), (z[1],))
        return dc.State(x, v)

    th0 = float(jnp.arctan2(drawn.x[0, 1], drawn.x[0, 0]))
    np.testing.assert_allclose(points(th0), drawn.x, atol=1e-6)  # the construction finds the drawn pose
    dt, u = 0.01, dc.Control(tau=jnp.array([0.7]))
    z0 = jnp.array([th0, 0.9])
    state = build(z0)
    step = jax.jit(lambda s, tau: dc.step(mech, s, dc.Control(tau=tau), dt, check=False))

    def f(z, tau=u.tau):
        new = step(build(z), tau)
        a, va = new.x[0], new.v[0]
        return jnp.stack([jnp.arctan2(a[1], a[0]), (a[0] * va[1] - a[1] * va[0]) / (a @ a)])

    np.testing.assert_allclose(dc.minimal_coordinates(mech, state), z0, atol=1e-12)
    A, B = dc.linearize(mech, state, u, dt, coords="minimal")
    assert A.shape == (2, 2) and B.shape == (2, 1)
    np.testing.assert_allclose(A, central(f, z0), rtol=0, atol=1e-8)
    np.testing.assert_allclose(B, central(lambda t: f(z0, t), u.tau), rtol=0, atol=1e-8)


@pytest.mark.slow
def test_floor_impact_is_the_saltation_linearisation():
    """A point mass falling onto the floor y = 0, one quantum of event_step that contains the impact.

    Before the impact the state X = (x, y, vx, vy) flows freely, f- = (vx, vy, 0, -g), for the impact time tau with
    y + vy tau - g tau^2 / 2 = 0 (the root in (0, dt)); the impact is plastic: the point sticks (seed §7): the reset
    R(X) = (x, y, 0, 0), and after it the point stays where it landed (f+ = 0, the flow is the identity). The
    saltation matrix of the guard g(X) = y (normal n = e_y) is
        S = DR + (f+ - DR f-) n^T / (n^T f-) = diag(1, 1, 0, 0) - (vx, vy-, 0, 0) e_y^T / vy-,
    vy- = vy - g tau the velocity at impact, and the hybrid linearisation over the quantum is A = I . S . Phi(tau),
    Phi(tau) = [[I, tau I], [0, I]] the flow's Jacobian: its only nonzero row is that of x,
        d x+ / d(x, y, vx, vy) = (1, -vx / vy-, tau, -vx tau / vy-).
    (The same as differentiating x+ = x + vx tau(y, vy) with d tau / dy = -1 / vy-, d tau / d vy = -tau / vy-.) The
    linearisation without the event time's motion (``saltation=False``) is DR . Phi(tau) at fixed tau: its x row
    (1, 0, tau, 0), its y row (0, 1, 0, tau) (a point that reaches the floor later stops above it, the drift correction
    off).
    Also against central differences of event_step."""
    ball = dc.Chain(jnp.array([1.0]), jnp.zeros(0))
    floor = dc.Events(ball, ground=0.0)
    x0, y0, vx, vy = 0.3, 0.05, 0.7, -1.0
    es = dc.EventState(dc.State(jnp.array([[x0, y0]]), jnp.array([[vx, vy]])))
    dt, g = 0.05, 9.81
    new, report = dc.event_step(ball, floor, es, None, dt)
    assert bool(report.impacts[0]) and bool(new.stuck[0]) and not bool(report.exhausted)

    A, B = dc.event_linearize(ball, floor, es, None, dt)
    tau = (vy + np.sqrt(vy**2 + 2 * g * y0)) / g
    assert 0 < tau < dt
    vy_minus = vy - g * tau
    A_ref = np.zeros((4, 4))
    A_ref[0] = [1.0, -vx / vy_minus, tau, -vx * tau / vy_minus]
    np.testing.assert_allclose(A, A_ref, rtol=0, atol=1e-12)
    assert abs(A_ref[0, 1]) > 0.3  # the saltation term is not small here: a test that could fail
    # the event time held, chosen at run time (one program for both), without the drift correction (which would pull
    # a point stuck above the floor towards it)
    lin = jax.jit(lambda flag: dc.event_linearize(ball, floor, es, None, dt, saltation=flag,
                                                  integrator=dc.VelocityVerlet(stab_factor=None))[0])
    DR, Phi = np.diag([1.0, 1.0, 0.0, 0.0]), np.block([[np.eye(2), tau * np.eye(2)], [np.zeros((2, 2)), np.eye(2)]])
    np.testing.assert_allclose(lin(jnp.array(False)), DR @ Phi, rtol=0, atol=1e-12)
    np.testing.assert_allclose(lin(jnp.array(True)), A_ref, rtol=0, atol=1e-12)
    with pytest.raises(TypeError, match=r"saltation must be True, False or a boolean scalar array, got .*float"):
        dc.event_linearize(ball, floor, es, None, dt, saltation=jnp.array(1.0))

    step = jax.jit(lambda X: dc.event_step(ball, floor, dc.EventState(dc.State(X[:2][None], X[2:][None])), None,
                                           dt)[0].state)
    fd = central(lambda X: jnp.concatenate([step(X).x.ravel(), step(X).v.ravel()]), jnp.array([x0, y0, vx, vy]),
                 h=1e-6)
    np.testing.assert_allclose(A, fd, rtol=0, atol=1e-8)
    np.testing.assert_allclose(B, 0.0)  # a single point has no joint a torque could turn


@pytest.mark.slow
def test_limit_hit_equals_central_differences_of_event_step():
    """A double pendulum whose elbow hits its limit theta_2 <= 0.5 inside the quantum (the joint is held there
    after the impulse): A and B of event_linearize equal central differences of event_step to 1e-8, and A is not
    the linearisation of the free step (the hit changes it at first order)."""
    arm = dc.pendulum(2, mass=[1.0, 0.7], length=[1.0, 0.8])
    limits = dc.Events(arm, theta_min=jnp.array([-jnp.inf, -0.5]), theta_max=jnp.array([jnp.inf, 0.5]))
    state = dc.from_joint_angles(arm, jnp.array([0.3, 0.45]), jnp.array([0.2, 3.0]))
    u, dt = dc.Control(tau=jnp.array([0.1, 0.2, 0.0])), 0.02
    new, report = dc.event_step(arm, limits, dc.EventState(state), u, dt)
    assert bool(report.limit_hits[1]) and bool(new.held[1]) and not bool(report.exhausted)

    A, B = dc.event_linearize(arm, limits, dc.EventState(state), u, dt)
    step = jax.jit(lambda s, tau: dc.event_step(arm, limits, dc.EventState(s), dc.Control(tau=tau), dt)[0].state)

    def f(X, tau=u.tau):
        new = step(dc.State(X[:6].reshape(3, 2), X[6:].reshape(3, 2)), tau)
        return jnp.concatenate([new.x.ravel(), new.v.ravel()])

    X0 = jnp.concatenate([state.x.ravel(), state.v.ravel()])
    np.testing.assert_allclose(A, central(f, X0, 1e-6), rtol=0, atol=1e-8)
    np.testing.assert_allclose(B, central(lambda t: f(X0, t), u.tau, 1e-6), rtol=0, atol=1e-8)
    free, _ = dc.linearize(arm, state, u, dt, integrator=dc.VelocityVerlet())
    assert float(jnp.max(jnp.abs(A - free))) > 0.1


def test_trajectory_times_copies_is_one_program():
    """The batched linearisation of docs/guide/linearization.md, at 3 copies x 5 steps: one trace, one compiled
    program, and each (A, B) equal to the linearisation of that state and control alone."""
    arm, _, _, _ = _double_pendulum()
    dt = 0.01
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    thetas = jax.random.uniform(keys[0], (3, 5, 2), minval=-1.0, maxval=1.0)
    states = jax.vmap(jax.vmap(lambda th: dc.from_joint_angles(arm, th, -th)))(thetas)
    controls = dc.Control(tau=jax.random.normal(keys[1], (3, 5, 3)))
    traces = []

    def one(s, u):
        traces.append(1)
        return dc.linearize(arm, s, u, dt, coords="minimal", integrator=dc.SemiImplicitEuler())

    batched = jax.jit(jax.vmap(jax.vmap(one)))
    A, B = batched(states, controls)
    A2, B2 = batched(states, controls)
    assert len(traces) == 1 and A.shape == (3, 5, 4, 4) and B.shape == (3, 5, 4, 3)
    for c, t in [(0, 0), (2, 4), (1, 3)]:
        s = jax.tree_util.tree_map(lambda a: a[c, t], states)
        a, b = dc.linearize(arm, s, dc.Control(tau=controls.tau[c, t]), dt, coords="minimal",
                            integrator=dc.SemiImplicitEuler())
        np.testing.assert_allclose(A[c, t], a, rtol=0, atol=1e-13)
        np.testing.assert_allclose(B[c, t], b, rtol=0, atol=1e-13)


@pytest.mark.slow
def test_step_hessians_equal_central_differences_of_the_linearisation():
    """dc.step_hessians of a double pendulum in joint coordinates (SemiImplicitEuler, to keep it cheap): the
    contraction with lam of the second derivatives equals central differences of lam^T A and lam^T B (A, B from
    dc.linearize, checked above against central differences of the step); f_xx and f_uu are symmetric."""
    arm, theta, theta_dot, u = _double_pendulum()
    dt, integ = 0.01, dc.SemiImplicitEuler()
    state = dc.from_joint_angles(arm, theta, theta_dot)
    lam = jnp.array([0.3, -1.2, 0.8, 0.5])
    fxx, fux, fuu = dc.step_hessians(arm, state, u, dt, lam, coords="minimal", integrator=integ)
    lin = jax.jit(lambda z, tau: dc.linearize(arm, dc.from_joint_angles(arm, z[:2], z[2:]), dc.Control(tau=tau), dt,
                                              coords="minimal", integrator=integ))
    z0 = jnp.concatenate([theta, theta_dot])
    gx = lambda z, tau=u.tau: lam @ lin(z, tau)[0]  # noqa: E731  (d/dx of lam . x+)
    gu = lambda z, tau=u.tau: lam @ lin(z, tau)[1]  # noqa: E731  (d/du of lam . x+)
    np.testing.assert_allclose(fxx, central(gx, z0, 1e-4), rtol=0, atol=1e-7)
    np.testing.assert_allclose(fux, central(lambda t: gx(z0, t), u.tau, 1e-4).T, rtol=0, atol=1e-7)
    np.testing.assert_allclose(fuu, central(lambda t: gu(z0, t), u.tau, 1e-4), rtol=0, atol=1e-7)
    np.testing.assert_allclose(fxx, fxx.T, atol=1e-10)
    assert float(jnp.max(jnp.abs(fxx))) > 1e-3  # the step is not linear in the angles
    assert float(jnp.max(jnp.abs(fux))) > 1e-4  # and a torque's effect depends on the configuration


def test_bad_arguments_are_named():
    """Wrong coords, a chart that does not apply, a contraction vector of the wrong size: errors that name them."""
    arm, theta, theta_dot, u = _double_pendulum()
    state = dc.from_joint_angles(arm, theta, theta_dot)
    with pytest.raises(ValueError, match="coords must be one of"):
        dc.linearize(arm, state, u, 0.01, coords="angles")
    with pytest.raises(ValueError, match="inputs must be one of \\('tau', 'F'\\).*got 'a_w'"):
        dc.linearize(arm, state, u, 0.01, inputs="a_w")
    rail_tip = dc.Chain(jnp.ones(3), jnp.ones(2), slider=[False, False, True])
    with pytest.raises(ValueError, match="coords='minimal' needs a chain whose points 2..n are free.*sliders \\[3\\]"):
        dc.minimal_coordinates(rail_tip, dc.State(jnp.array([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]])))
    mech, drawn = systems.four_bar(motor=False)
    with pytest.raises(ValueError, match="as many motors as degrees of freedom: got 0 motors and 1"):
        dc.linearize(mech, drawn, None, 0.01, coords="minimal")
    with pytest.raises(ValueError, match="lam must have one entry per coordinate of x\\+, shape \\(4,\\)"):
        dc.step_hessians(arm, state, u, 0.01, jnp.ones(3), coords="minimal")
    with pytest.raises(dc.InputError, match="linearize: dt must be finite and nonzero .*got 0.0"):
        dc.linearize(arm, state, u, 0.0)
    with pytest.raises(TypeError, match="state must be a diffchain.State"):
        dc.linearize(arm, (state.x, state.v), u, 0.01)
    with pytest.raises(TypeError, match="masks guided, slider.*traced"):
        jax.jit(lambda c: dc.minimal_coordinates(c, state))(arm)
