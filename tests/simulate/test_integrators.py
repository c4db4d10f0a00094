"""Constraint projection and the long-run integrators (diffchain._simulate.projection), against independent references.

* The projection is the mass-metric projection: compared with a dense numpy computation M^-1 J^T (J M^-1 J^T)^-1 whose
  mass matrix is built here from the links' kinetic energy (centre-of-mass translation plus rotation J_c omega^2 / 2,
  not the library's natural-coordinate blocks) and whose Jacobian rows are written out here.
* Long runs: the targets of the issue "Trustworthy by default" (float64, dt = 1e-3: rod error <= 1e-8, energy error
  <= 1e-4 g sum(m) sum(l)); each check is also run on a scheme that must fail it, so that it can fail.
* RATTLE (Andersen 1983): time-reversible and second order (theory), energy error bounded without secular growth on
  an integrable system (backward error analysis: Hairer, Lubich & Wanner, GNI IX.8).
* Gradients against central finite differences; vmap against a loop; the O(n) recursion against the dense KKT path.
"""
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc
from diffchain._simulate.projection import (RATTLE, ChainIntegrator, Projected, position_residual, project, project_positions,
                                  project_velocities)
from strategies import consistent_start, make_problem

BENT = (0.3, 0.9, -0.7, 0.5, 0.4)
DEFAULT = Projected(dc.RK4(stab_factor=None), iterations=1)  # the default integrator of step and rollout


def bent(n_links, **kwargs):
    chain = dc.pendulum(n_links, **kwargs)
    return chain, dc.from_joint_angles(chain, jnp.asarray(np.resize(np.asarray(BENT), n_links)))


# ------------------------------------------------------------------------------------------ dense numpy references
def dense_mass_matrix(chain):
    """(2n, 2n) from the kinetic energy: point masses m_i |v_i|^2 / 2; a rigid link of mass mu with its centre of mass
    at p = (1 - alpha) x_k + alpha x_{k+1} + beta R d (alpha = a/l, beta = b/l) adds mu |p_dot|^2 / 2 + J_c omega^2 / 2
    with omega^2 = |d_dot|^2 / l^2 for a rod of constant length."""
    n = chain.n
    M = np.kron(np.diag(np.asarray(chain.m)), np.eye(2))
    if chain.has_links:
        R = np.array([[0.0, -1.0], [1.0, 0.0]])
        for k in range(n - 1):
            mu, J, l = float(chain.link_mass[k]), float(chain.link_inertia[k]), float(chain.l[k])
            alpha, beta = np.asarray(chain.link_com[k]) / l
            N = np.zeros((2, 2 * n))  # p_dot = N V
            N[:, 2 * k:2 * k + 2] = (1 - alpha) * np.eye(2) - beta * R
            N[:, 2 * k + 2:2 * k + 4] = alpha * np.eye(2) + beta * R
            D = np.zeros((2, 2 * n))  # d_dot = D V
            D[:, 2 * k:2 * k + 2], D[:, 2 * k + 2:2 * k + 4] = -np.eye(2), np.eye(2)
            M += mu * N.T @ N + J / l**2 * D.T @ D
    return M


def dense_rows(chain, x):
    """Jacobian rows and position residuals: rods |x_{k+1} - x_k| - l_k (switched on), sliders s_i^T x_i - c_i (not
    guided), then the guided points (two rows each, residual 0: held)."""
    x, n = np.asarray(x), chain.n
    guided, slider, s = np.asarray(chain.guided), np.asarray(chain.slider_mask), np.asarray(chain.s)
    rows, phi = [], []
    for k in range(n - 1):
        if guided[k] and guided[k + 1]:
            continue
        d = x[k + 1] - x[k]
        row = np.zeros((n, 2))
        row[k], row[k + 1] = -d / np.linalg.norm(d), d / np.linalg.norm(d)
        rows.append(row.ravel())
        phi.append(np.linalg.norm(d) - float(chain.l[k]))
    for i in range(n):
        if slider[i]:
            row = np.zeros((n, 2))
            row[i] = s[i]
            rows.append(row.ravel())
            phi.append(s[i] @ x[i] - float(chain.c[i]))
    for i in range(n):
        if guided[i]:
            for j in range(2):
                row = np.zeros((n, 2))
                row[i, j] = 1.0
                rows.append(row.ravel())
                phi.append(0.0)
    return np.array(rows), np.array(phi)


def dense_correction(chain, x, c):
    """dq = M^-1 J^T (J M^-1 J^T)^-1 c: the smallest change in the mass metric with J dq = c."""
    J, _ = dense_rows(chain, x)
    Minv_Jt = np.linalg.solve(dense_mass_matrix(chain), J.T)
    return (Minv_Jt @ np.linalg.solve(J @ Minv_Jt, c)).reshape(-1, 2)


def problems():
    """Random chains (point masses; rigid links with massless points), every joint kind, consistent starts."""
    out = []
    for n, seed, links in [(3, 1, False), (5, 2, False), (8, 3, False), (4, 4, True), (6, 5, True), (9, 6, True)]:
        for s in range(seed, seed + 40):  # the first seed whose chain has a guided point and a slider
            chain, state, control, desc = make_problem(n, s, "random", links=links)
            if np.any(np.asarray(chain.guided)) and np.any(np.asarray(chain.slider_mask)):
                break
        chain, state = consistent_start(chain, state)
        out.append(pytest.param(chain, state, control, id=f"{desc}{' links' if links else ''}"))
    return out


# ------------------------------------------------------------------------------------------------ the projection
@pytest.mark.parametrize("solver", [dc.Recursive(), dc.KKT()], ids=["recursive", "dense"])
@pytest.mark.parametrize("chain,state,control", problems())
def test_projection_is_the_mass_metric_projection(chain, state, control, solver):
    """Velocities: v+ = v - M^-1 J^T (J M^-1 J^T)^-1 J v with guided points held (rows J dv = -J v, 0 at guided
    points); positions: one Newton step dx = -M^-1 J^T (J M^-1 J^T)^-1 Phi(x), from a pose moved off the constraints."""
    rng = np.random.default_rng(0)
    n = chain.n
    v = np.asarray(state.v) + rng.normal(size=(n, 2))  # off the tangent space
    J, _ = dense_rows(chain, state.x)
    Jv = J @ v.ravel()
    Jv[-2 * int(np.sum(np.asarray(chain.guided))):] = 0.0  # the guided points' rows (last): keep v_i
    expected = v - dense_correction(chain, state.x, Jv)
    got = jax.jit(project_velocities, static_argnums=3)(chain, state.x, jnp.asarray(v), solver)
    scale = np.max(np.abs(v))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-10 * scale)

    x = np.asarray(state.x) + 1e-3 * rng.normal(size=(n, 2)) * np.asarray(chain.l).min()
    _, phi = dense_rows(chain, x)
    expected = x - dense_correction(chain, x, phi)
    got = jax.jit(project_positions, static_argnums=(2, 3))(chain, jnp.asarray(x), 1, solver)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-10 * np.max(np.abs(x)))


@pytest.mark.parametrize("chain,state,control", problems())
def test_projection_reaches_the_constraints_and_is_idempotent(chain, state, control):
    """From a pose 1e-3 (of the shortest rod) off the constraints: five Newton steps leave round-off on every rod and
    slider (quadratic convergence; a rod nearly normal to its slider's line, as in n=3 seed=10, needs four), guided
    points stay where they were, the velocities end in the tangent space. Projecting again moves the state by no more
    than the correction of that round-off: |dq| <= ||M^-1 J^T (J M^-1 J^T)^-1||_2 sqrt(rows) (round-off bound)."""
    rng = np.random.default_rng(1)
    n = chain.n
    x = state.x + 1e-3 * float(jnp.min(chain.l)) * rng.normal(size=(n, 2))
    v = state.v + rng.normal(size=(n, 2))
    proj = jax.jit(project, static_argnums=2)
    p = proj(chain, dc.State(x, v), 5)
    eps = np.finfo(np.float64).eps
    size, speed = float(jnp.max(jnp.abs(p.x))), float(jnp.max(jnp.abs(p.v)))
    pos_tol = 16 * eps * size
    rate_tol = 16 * eps * speed * (1 + size / float(jnp.min(chain.l)))
    pos, rate = dc.constraint_violation(chain, p)
    assert float(pos) <= pos_tol and float(rate) <= rate_tol, (float(pos), float(rate))
    guided = np.asarray(chain.guided)
    np.testing.assert_array_equal(np.asarray(p.x)[guided], np.asarray(x)[guided])
    np.testing.assert_array_equal(np.asarray(p.v)[guided], np.asarray(v)[guided])
    J, _ = dense_rows(chain, p.x)
    Minv_Jt = np.linalg.solve(dense_mass_matrix(chain), J.T)
    gain = np.linalg.norm(Minv_Jt @ np.linalg.inv(J @ Minv_Jt), 2) * np.sqrt(J.shape[0])
    q = proj(chain, p, 5)
    np.testing.assert_allclose(q.x, p.x, rtol=0, atol=gain * pos_tol)
    np.testing.assert_allclose(q.v, p.v, rtol=0, atol=gain * rate_tol)


@pytest.mark.slow
@pytest.mark.parametrize("chain,state,control", problems()[4:5])
def test_recursive_and_dense_steps_agree(chain, state, control):
    """A step of each new integrator with the O(n) recursion and with the dense KKT solve, under random inputs
    (torques, forces, a moving guide, damping, drag)."""
    step = jax.jit(lambda c, s, u, dt, solver, integ: integ.step(c, s, u, dt, solver), static_argnums=(4, 5))
    for integ in (DEFAULT, RATTLE()):
        a = step(chain, state, control, 1e-3, dc.Recursive(), integ)
        b = step(chain, state, control, 1e-3, dc.KKT(), integ)
        np.testing.assert_allclose(a.x, b.x, rtol=0, atol=1e-12 * float(jnp.max(jnp.abs(a.x))))
        np.testing.assert_allclose(a.v, b.v, rtol=0, atol=1e-9 * (1 + float(jnp.max(jnp.abs(a.v)))))


# ---------------------------------------------------------------------------------------------------- long runs
def run_metrics(chain, s0, integrator, dt, n_steps, chunk=1000):
    """Max |E - E0| / (g sum m sum l) and max rod error per chunk of steps (inf once a state is not finite)."""
    scale = chain.g * jnp.sum(chain.m) * jnp.sum(chain.l)
    E0 = dc.energy(chain, s0)
    u = dc.Control(n=chain.n, dtype=s0.x.dtype)

    @jax.jit
    def go(s0):
        def inner(c, _):
            s, dE, rod = c
            s = integrator.step(chain, s, u, dt, dc.Recursive())
            ok = jnp.all(jnp.isfinite(s.x)) & jnp.all(jnp.isfinite(s.v))
            e = jnp.where(ok, jnp.abs(dc.energy(chain, s) - E0) / scale, jnp.inf)
            r = jnp.where(ok, dc.constraint_violation(chain, s)[0], jnp.inf)
            return (s, jnp.maximum(dE, e), jnp.maximum(rod, r)), None

        def outer(s, _):
            (s, dE, rod), _ = jax.lax.scan(inner, (s, 0.0, 0.0), None, length=chunk)
            return s, (dE, rod)

        return jax.lax.scan(outer, s0, None, length=n_steps // chunk)[1]

    dE, rod = go(s0)
    return np.asarray(dE), np.asarray(rod)


@pytest.mark.slow
def test_default_candidate_meets_the_targets_on_the_chaotic_pendulum():
    """The README's 5-link pendulum released bent, 10^5 steps of dt = 1e-3, float64: rod error <= 1e-8 and energy
    error <= 1e-4 m g L throughout (the issue's targets). Without the projection the first 10^4 steps fail them already:
    SeedQuantum (today's default) gains energy and diverges, RK4 (stab_factor 50) drifts off the rods."""
    chain, s0 = bent(5)
    dE, rod = run_metrics(chain, s0, DEFAULT, 1e-3, 100_000)
    assert dE.max() <= 1e-4 and rod.max() <= 1e-8, (dE.max(), rod.max())
    dE_sq, _ = run_metrics(chain, s0, dc.SeedQuantum(), 1e-3, 10_000)
    assert not dE_sq.max() <= 1e-4
    _, rod_rk4 = run_metrics(chain, s0, dc.RK4(), 1e-3, 10_000)
    assert not rod_rk4.max() <= 1e-8


def test_rattle_energy_bounded_without_secular_growth():
    """RATTLE is symplectic: on an integrable system (a single pendulum, 0.3 rad, 40 s ~ 20 periods) its energy error
    stays bounded and quasi-periodic, so its largest value over the last quarter of the run equals that over the first
    (to 5 %: each quarter spans ~5 periods), at the O(h^2) level. A non-symplectic scheme with the same projection
    (SeedQuantum + projection) fails: its energy grows steadily."""
    chain, s0 = bent(1)

    def quarters(integ):
        dE, rod = run_metrics(chain, s0, integ, 1e-3, 40_000)
        q = len(dE) // 4
        return dE[:q].max(), dE[-q:].max(), rod.max()

    first, last, rod = quarters(RATTLE())
    assert last <= 1.05 * first and first <= 1.05 * last, (first, last)
    assert rod <= 1e-12
    first, last, _ = quarters(Projected(dc.SeedQuantum(stab_factor=None)))
    assert not last <= 1.05 * first


def test_rattle_is_time_reversible_and_second_order():
    """RATTLE is symmetric: 300 steps forward, velocities reversed, 300 steps more return to the start, to the round-off
    of 600 steps (600 eps max|x|) once its position solve has converged (6 iterations; contraction ~ h |omega| per
    iteration). RK4 + projection (fourth order, not symmetric) fails that. Second order: halving dt divides the error
    at t = 0.5 s by 4 (3.6 to 4.4), against RK4 + projection at dt = 1e-4. Symplectic Euler + projection (first order,
    not symmetric) fails both."""
    chain, s0 = bent(3)
    u = dc.Control(n=chain.n)
    # (n traced: one program per integrator)
    run = jax.jit(lambda s, dt, integ, n: jax.lax.fori_loop(0, n, lambda i, s: integ.step(chain, s, u, dt, dc.Recursive()), s),
                  static_argnums=2)
    rattle = RATTLE(iterations=6)

    def there_and_back(integ):
        s = run(s0, 2e-3, integ, 300)
        back = run(dc.State(s.x, -s.v, s.t), 2e-3, integ, 300)
        return float(jnp.max(jnp.abs(back.x - s0.x))), float(jnp.max(jnp.abs(back.v + s0.v)))

    tol = 600 * np.finfo(float).eps * float(jnp.max(jnp.abs(s0.x)))
    dx, dv = there_and_back(rattle)
    assert dx <= tol and dv <= 10 * tol, (dx, dv, tol)  # (speeds reach ~10 |x| per second here)
    assert not there_and_back(DEFAULT)[0] <= tol
    sie = Projected(dc.SemiImplicitEuler(stab_factor=None), iterations=2)
    assert not there_and_back(sie)[0] <= tol

    ref = run(s0, 1e-4, DEFAULT, 5000)

    def order(integ):
        errors = [float(jnp.max(jnp.abs(run(s0, dt, integ, round(0.5 / dt)).x - ref.x))) for dt in (2e-3, 1e-3)]
        return errors[0] / errors[1]

    assert 3.6 <= order(rattle) <= 4.4
    assert not 3.6 <= order(sie) <= 4.4


def test_rollout_backward_in_time_returns_to_the_start():
    """dc.rollout with dt < 0 integrates backward in time: N steps with dt, then N with -dt, return to the start.
    RATTLE (symmetric, its position solve converged: 10 iterations) to the round-off of 2N steps (2N eps max|x|; 10
    times that for the velocities, ~10 |x| per second here), where velocity Verlet (not symmetric on a chain: its
    constraint forces depend on the velocities) fails it. RK4 (no drift correction) to its local error: at most 2N
    times the largest local error along the run, estimated by step doubling (|one step - two half steps| 16/15, its
    error being O(h^5)), and not to round-off. The default integrator's run backward from (x, v) is its run forward
    from (x, -v) with the velocities negated (the pendulum's accelerations are even in v: time reversal), to
    round-off, and ends at t = -N dt."""
    chain = dc.pendulum(2)
    s0 = dc.from_joint_angles(chain, jnp.array([0.3, -0.2]), jnp.array([0.5, 1.0]))
    N, dt = 50, 1e-2
    u = dc.Control(n=chain.n)

    def there_and_back(integ):
        ahead, traj = dc.rollout(chain, s0, None, dt, n_steps=N, integrator=integ)
        # (check=False: the start of the way back is where the plain schemes' drift took it, off the rods by more
        # than check_state allows)
        back, _ = dc.rollout(chain, ahead, None, -dt, n_steps=N, integrator=integ, check=False)
        assert abs(float(back.t)) <= 2 * N * np.finfo(float).eps * N * dt
        return traj, float(jnp.max(jnp.abs(back.x - s0.x))), float(jnp.max(jnp.abs(back.v - s0.v)))

    tol = 2 * N * np.finfo(float).eps * float(jnp.max(jnp.abs(s0.x)))
    _, dx, dv = there_and_back(RATTLE(iterations=10))
    assert dx <= tol and dv <= 10 * tol, (dx, dv, tol)
    assert not there_and_back(dc.VelocityVerlet(stab_factor=None))[1] <= tol

    rk4 = dc.RK4(stab_factor=None)
    traj, dx, _ = there_and_back(rk4)
    starts = jax.tree.map(lambda a, b: jnp.concatenate([a[None], b[:-1]]), s0, traj)
    step = lambda s, h: dc.step(chain, s, u, h, integrator=rk4, check=False)  # noqa: E731
    local = 16 / 15 * float(jnp.max(jnp.abs(jax.vmap(lambda s: step(s, dt).x - step(step(s, dt / 2), dt / 2).x)(
        starts))))
    assert tol < dx <= 2 * N * local, (dx, local, tol)

    back, _ = dc.rollout(chain, s0, None, -dt, n_steps=N)
    mirror, _ = dc.rollout(chain, dc.State(s0.x, -s0.v, s0.t), None, dt, n_steps=N)
    np.testing.assert_allclose(float(back.t), -N * dt, rtol=1e-12)
    np.testing.assert_allclose(back.x, mirror.x, rtol=0, atol=tol)
    np.testing.assert_allclose(back.v, -mirror.v, rtol=0, atol=10 * tol)
    assert float(jnp.max(jnp.abs(back.x - s0.x))) > 0.1  # (it went somewhere)


@pytest.mark.slow
# --------------------------------------------------------------------------------------- joint kinds, links, grads
def test_moving_guide_slider_and_rigid_links():
    """A chain with rigid links whose first point is driven with constant a^w and whose last point slides on a line:
    the guide follows x0 + v0 t + a^w t^2 / 2 (both schemes integrate a constant acceleration exactly: to the round-off
    of T additions, T eps max|x|), the rods and the slider line hold to round-off; with the guide at rest and no input
    the energy stays within the issue's 1e-4 m g L (links' mass included)."""
    n = 5
    chain = dc.Chain(jnp.ones(n), jnp.full(n - 1, 0.8), guided=[True] + [False] * (n - 1),
                     slider=[False] * (n - 1) + [True], s=jnp.tile(jnp.array([0.0, 1.0]), (n, 1)),
                     c=jnp.full(n, -2.0), link_mass=jnp.full(n - 1, 0.5), link_inertia=jnp.full(n - 1, 0.03))
    theta = jnp.array([-1.2, 0.4, 0.3, 0.2])
    s0 = dc.from_joint_angles(chain, theta)
    chain = dc.Chain(chain.m, chain.l, guided=chain.guided, slider=chain.slider, s=chain.s,
                     c=jnp.full(n, float(s0.x[-1, 1])), link_mass=chain.link_mass, link_inertia=chain.link_inertia)
    a_w = jnp.zeros((n, 2)).at[0].set(jnp.array([0.7, -0.3]))
    T = 1000
    run = jax.jit(lambda a, integ: dc.rollout(chain, s0, dc.Control(a_w=jnp.broadcast_to(a, (T, n, 2))), 1e-3,
                                              integrator=integ, check=False)[1], static_argnums=1)
    scale = chain.g * (jnp.sum(chain.m) + jnp.sum(chain.link_mass)) * jnp.sum(chain.l)
    for integ in (DEFAULT, RATTLE(iterations=6)):  # (RATTLE's position solve converged: 6 iterations)
        traj = run(a_w, integ)
        t = traj.t[:, None]
        exact = s0.x[0] + 0.5 * a_w[0] * t**2
        eps = np.finfo(float).eps
        np.testing.assert_allclose(traj.x[:, 0], exact, rtol=0, atol=T * eps * float(jnp.max(jnp.abs(traj.x))))
        pos, rate = jax.vmap(lambda s: dc.constraint_violation(chain, s))(traj)
        assert float(pos.max()) <= 16 * eps * float(jnp.max(jnp.abs(traj.x)))
        assert float(rate.max()) <= 16 * eps * float(jnp.max(jnp.abs(traj.v))) * (1 + float(jnp.max(jnp.abs(traj.x))) / 0.8)
        traj = run(jnp.zeros_like(a_w), integ)
        dE = jnp.max(jnp.abs(dc.energy(chain, traj) - dc.energy(chain, s0))) / scale
        assert float(dE) <= 1e-4, (type(integ).__name__, float(dE))


@pytest.mark.slow
@pytest.mark.parametrize("integ,mode", [(DEFAULT, "reverse"), (RATTLE(), "forward")], ids=["RK4+proj", "RATTLE"])
def test_gradients_match_central_differences(integ, mode):
    """d/d(theta, torques, rod lengths) of a 20-step rollout of a 3-link chain on a cart (a slider) under torques, in
    reverse (RK4 + projection) or forward mode (RATTLE), against central differences (h = 1e-6: truncation and
    round-off ~1e-9 relative)."""
    rng = np.random.default_rng(3)
    T = 20
    args = (jnp.array([-1.3, 0.5, -0.4]), jnp.asarray(rng.normal(size=(T, 4))), jnp.array([1.0, 0.8, 0.6]))

    def loss(theta, tau, l):
        chain = dc.cart_chain(3, length=l)
        s0 = dc.from_joint_angles(chain, theta)
        final, _ = dc.rollout(chain, s0, dc.Control(tau=tau), 2e-3, integrator=integ, check=False)
        return jnp.sum(jnp.sin(final.x)) + 0.3 * jnp.sum(final.v**2)

    flat0, unravel = jax.flatten_util.ravel_pytree(args)
    f = jax.jit(lambda p: loss(*unravel(p)))
    if mode == "reverse":
        grad = np.asarray(jax.jit(jax.grad(f))(flat0))
    picks = np.concatenate([np.arange(3), 3 + rng.choice(4 * T, 4, replace=False), flat0.size - np.arange(1, 4)])
    directions = np.eye(flat0.size)[picks]
    if mode == "forward":
        jvp = jax.jit(jax.vmap(lambda d: jax.jvp(f, (flat0,), (d,))[1]))
        grad_d = np.asarray(jvp(jnp.asarray(directions)))
    else:
        grad_d = directions @ grad
    h = 1e-6
    fd = np.array([(float(f(flat0 + h * d)) - float(f(flat0 - h * d))) / (2 * h) for d in directions])
    np.testing.assert_allclose(grad_d, fd, rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_vmap_matches_one_by_one():
    """vmap over starts and chain parameters gives each chain's own rollout (to round-off)."""
    thetas = jnp.array([[0.3, 0.9, -0.7], [1.0, -0.5, 0.2], [-0.4, 0.1, 1.1]])
    lengths = jnp.array([[1.0, 1.0, 1.0], [0.5, 0.9, 1.2], [1.1, 0.7, 0.4]])

    def run(theta, l, integ):
        chain = dc.pendulum(3, length=l)
        return dc.rollout(chain, dc.from_joint_angles(chain, theta), None, 1e-3, n_steps=200, integrator=integ, check=False)[0]

    one_by_one = jax.jit(run, static_argnums=2)
    for integ in (DEFAULT, RATTLE()):
        batch = jax.jit(jax.vmap(lambda th, l: run(th, l, integ)))(thetas, lengths)
        for b in range(3):
            one = one_by_one(thetas[b], lengths[b], integ)
            np.testing.assert_allclose(batch.x[b], one.x, rtol=0, atol=1e-12)
            np.testing.assert_allclose(batch.v[b], one.v, rtol=0, atol=1e-10)


def test_chain_integrators_refuse_the_acceleration_form():
    """Without the chain there is nothing to project onto: the acceleration form raises a TypeError that says so."""
    chain, s0 = bent(2)
    for integ in (DEFAULT, RATTLE()):
        assert isinstance(integ, ChainIntegrator) and isinstance(integ, dc.Integrator)
        with pytest.raises(TypeError, match="needs the model"):
            integ(lambda s: jnp.zeros_like(s.x), s0, 1e-3)
    with pytest.raises(TypeError, match="plain Integrator"):
        Projected(RATTLE())
    assert position_residual(chain, s0.x)[0].shape == (2,)


def test_step_and_rollout_default_to_rk4_with_projection():
    import inspect

    for f in (dc.step, dc.rollout):
        assert inspect.signature(f).parameters["integrator"].default == DEFAULT
    with pytest.raises(ValueError, match="PointMajor.*integrator=RK4"):
        chain, s0 = bent(3)
        jax.vmap(lambda s: dc.rollout(chain, s, None, 1e-3, n_steps=3, backend=dc.PointMajor()))(
            jax.tree.map(lambda a: a[None], s0))
