"""Active joints (seed 000 Part II, §9–§12.2): the O(n) recursion against the KKT form, and both against physics.

Every check compares with something computed another way: the other solver, the second time derivative of the joint
angle along x + v t + a t^2/2 (jax), the plain Part I solver with the constraint torques applied as ordinary torques,
and the closed form of a rigid body pendulum.
"""
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import diffchain as dc
from diffchain._model import forces as _forces, geometry
from diffchain._constraints import held as held_rows
from diffchain._constraints.system import constraint_rows
from diffchain._solvers import recursive_held, recursive_solver as act
from diffchain._xla import small_chain
from strategies import random_problem

SIZES = (1, 3, 5, 7, 13)  # a small menu of n bounds the number of jit compilations (~1.5 s each)
NO_STAB = float("inf")  # stab = inf is "no PD correction" (1/stab = 0) without retracing for stab = None

rec = jax.jit(lambda c, s, u, on, al, tb, stab: act.active_dynamics_recursive(c, s, u, on, al, tb, stab))
def held_outputs(sol):
    """(a, phi, tau_w) of a solver's Solution."""
    return sol.a, sol.forces, sol.tau_w


kkt = jax.jit(lambda c, s, u, on, al, tb, stab: held_outputs(dc.KKT().held(c, s, u, on, al, tb, stab)))
rec_batch = jax.jit(lambda *args: jax.vmap(lambda _: act.active_dynamics_recursive(*args)[0])(jnp.zeros(2))[0])
plain = jax.jit(lambda c, s, u: held_outputs(dc.Recursive()(c, s, u))[:2])


@jax.jit
def grad_rec(chain, state, control, on, alpha):
    """Gradient of a scalar of the recursion's outputs with respect to the positions and alpha^w."""

    def loss(x, alpha):
        a, phi, tau = act.active_dynamics_recursive(chain, dc.State(x, state.v), control, on, alpha)
        return jnp.sum(a**2) + jnp.sum(phi**2) + jnp.sum(tau**2)

    return jax.grad(loss, argnums=(0, 1))(state.x, alpha)


def _rel(x, y):
    x, y = np.asarray(x), np.asarray(y)
    if y.size == 0:
        return 0.0
    return float(np.max(np.abs(x - y)) / max(np.max(np.abs(y)), 1e-300))


def choose_active(chain, state, control, rng, p=0.5, rtol=1e-4, candidates=None):
    """A random set of active joints whose rows of eq. (13) are independent of each other and of the rod and point
    constraints (greedy; relative singular-value threshold ``rtol``), so that the KKT matrix is regular and not too
    badly conditioned. Redundant sets are the stiffness anomaly of seed §12.2, tested separately below."""
    n = chain.n
    active = np.zeros(n, bool)
    if n == 1:
        return active
    J, _, on = constraint_rows(chain, state, control.a_w)
    rows = np.asarray(J)[np.asarray(on)]
    G = np.asarray(held_rows.joint_rows(state.x)).reshape(n, 2 * n)
    pick = rng.uniform(size=n) < p if candidates is None else np.asarray(candidates)
    for i in rng.permutation(np.flatnonzero(pick)):
        new = np.vstack([rows, G[i] / np.linalg.norm(G[i])])
        s = np.linalg.svd(new, compute_uv=False)
        if new.shape[0] <= new.shape[1] and s[-1] > rtol * s[0]:
            rows, active[i] = new, True
    return active


def kkt_condition(chain, state, control, active):
    """2-norm condition number of the KKT matrix of :func:`diffchain.KKT.held` (numpy)."""
    n = chain.n
    J, _, on = constraint_rows(chain, state, control.a_w)
    G = np.asarray(held_rows.joint_rows(state.x)).reshape(n, 2 * n)
    J = np.vstack([np.asarray(J), G * active[:, None]])
    on = np.concatenate([np.asarray(on), active])
    M = np.asarray(chain.M)
    return np.linalg.cond(np.block([[M, J.T], [J, np.diag(np.where(on, 0.0, 1.0))]]))


def perturb(chain, state, rng):
    """An off-manifold state: rods not at their length, stretching velocities."""
    x = state.x + 0.02 * np.min(chain.l) * rng.normal(size=state.x.shape) if chain.n > 1 else state.x
    return dc.State(x, state.v + 0.3 * rng.normal(size=state.v.shape), state.t)


@jax.jit
def theta_derivatives(x, v, a):
    """theta, theta' and theta'' of every joint (phi_0 = phi_n = 0) along x + v t + a t^2 / 2 at t = 0 (by jax)."""
    theta = lambda t: geometry._pad_diff(dc.link_angles(x + v * t + 0.5 * a * t**2))  # noqa: E731
    d1 = lambda t: jax.jvp(theta, (t,), (1.0,))[1]  # noqa: E731
    t0 = jnp.zeros((), x.dtype)
    return theta(t0), d1(t0), jax.jvp(d1, (t0,), (1.0,))[1]


@pytest.mark.slow
@given(random_problem(sizes=SIZES), st.integers(0, 2**31), st.sampled_from([NO_STAB, 0.05]), st.booleans())
def test_recursion_equals_kkt(problem, seed, stab, off_manifold):
    """Part II recursion == KKT (accelerations, constraint torques, rod tensions) on random chains with random
    guided / slider / active sets, random alpha^w and held angles, on and off the constraint manifold."""
    chain, state, control, desc = problem
    rng = np.random.default_rng(seed)
    if off_manifold:
        state = perturb(chain, state, rng)
    active = choose_active(chain, state, control, rng)
    alpha_w, theta_bar = rng.normal(size=chain.n), rng.uniform(-np.pi, np.pi, chain.n)
    desc += f" active={active.astype(int).tolist()} seed={seed} stab={stab} off={off_manifold}"
    a1, phi1, t1 = rec(chain, state, control, active, alpha_w, theta_bar, stab)
    a2, phi2, t2 = kkt(chain, state, control, active, alpha_w, theta_bar, stab)
    assert np.all(np.isfinite(a1)) and np.all(np.isfinite(t1)), desc
    # 1e-10 up to cond(KKT) = 1e6; beyond, round-off grows like eps * cond in *both* solvers (a 50-digit reference
    # shows the KKT solve is as often the less accurate one): stretched poses between pins, huge torques
    tol = max(1e-10, 1e-16 * kkt_condition(chain, state, control, active))
    assert _rel(a1, a2) <= tol, desc
    assert _rel(np.asarray(t1)[active], np.asarray(t2)[active]) <= tol, desc
    assert np.all(np.asarray(t1)[~active] == 0), desc
    free_rod = ~(np.asarray(chain.guided[:-1]) & np.asarray(chain.guided[1:]))
    assert _rel(np.asarray(phi1)[free_rod], np.asarray(phi2)[free_rod]) <= 10 * tol, desc


small = jax.jit(lambda c, s, u, on, al, tb, stab: held_outputs(dc.ShortChain().held(c, s, u, on, al, tb, stab)))
small_part_one = jax.jit(lambda c, s, u, stab: held_outputs(dc.ShortChain()(c, s, u, stab))[:2] + (jnp.zeros(c.n),))


@pytest.mark.slow
@given(random_problem(sizes=tuple(sorted({2, 3, 4, 6, small_chain.SMALL_MAX}))), st.integers(0, 2**31),
       st.sampled_from([NO_STAB, 0.05]), st.booleans())
def test_small_form_equals_kkt(problem, seed, stab, off_manifold):
    """The lambda-first form of short chains (:class:`diffchain.ShortChain`, up to ``SMALL_MAX`` points) == KKT,
    with random active sets and with none (the rods' rows alone: the Part I solution), at every size it serves."""
    chain, state, control, desc = problem
    rng = np.random.default_rng(seed)
    if off_manifold:
        state = perturb(chain, state, rng)
    active = choose_active(chain, state, control, rng, p=rng.uniform())
    alpha_w, theta_bar = rng.normal(size=chain.n), rng.uniform(-np.pi, np.pi, chain.n)
    desc += f" active={active.astype(int).tolist()} seed={seed} stab={stab} off={off_manifold}"
    free_rod = ~(np.asarray(chain.guided[:-1]) & np.asarray(chain.guided[1:]))
    none = np.zeros(chain.n, bool)
    for on, (a1, phi1, t1) in ((active, small(chain, state, control, active, alpha_w, theta_bar, stab)),
                               (none, small_part_one(chain, state, control, stab))):
        a2, phi2, t2 = kkt(chain, state, control, on, alpha_w, theta_bar, stab)
        tol = max(1e-10, 1e-16 * kkt_condition(chain, state, control, on))
        assert _rel(a1, a2) <= tol, desc
        assert _rel(np.asarray(t1)[on], np.asarray(t2)[on]) <= tol, desc
        assert np.all(np.asarray(t1)[~on] == 0), desc
        assert _rel(np.asarray(phi1)[free_rod], np.asarray(phi2)[free_rod]) <= 10 * tol, desc


@pytest.mark.parametrize("n,k", [(3, 3), (4, 4), (4, 3), (8, 8), (8, 4)])
def test_small_form_stiffness(n, k):
    """Seed §12.2 stiffness (as :func:`test_stiffness_is_finite_and_right`) in the lambda-first form of short
    chains: a redundant held row drops out, the accelerations are those of the independent rows."""
    chain, state, control, active, alpha_w = stiff_problem(n, k, seed=n * 10 + k)
    for solve in (rec, small):
        a, phi, tau = solve(chain, state, control, active, alpha_w, np.zeros(n), NO_STAB)
        assert np.all(np.isfinite(a)) and np.all(np.isfinite(phi)) and np.all(np.isfinite(tau))
        assert np.abs(np.asarray(a)[:k]).max() <= 1e-10 * max(np.abs(np.asarray(a)).max(), 1.0)
        reduced = choose_active(chain, state, control, np.random.default_rng(0), rtol=1e-8, candidates=active)
        a_ref, _, _ = kkt(chain, state, control, reduced, alpha_w, np.zeros(n), NO_STAB)
        assert np.abs(np.asarray(a) - np.asarray(a_ref)).max() <= 1e-9 * max(np.abs(np.asarray(a_ref)).max(), 1.0)


def _gradient_of(solver):
    """The gradient of a linear functional of a solver's outputs (a, phi, tau_w) with respect to the positions,
    velocities, alpha^w, the masses and the control torques."""

    @jax.jit
    def gradient(chain, state, control, active, alpha_w, theta_bar, stab, w):
        def loss(x, v, alpha, m, tau):
            ch = eqx.tree_at(lambda c: c.m, chain, m)
            a, phi, t = solver(ch, dc.State(x, v, state.t), dc.Control(tau, control.F, control.a_w), active, alpha,
                               theta_bar, stab)
            return jnp.sum(w[0] * a) + jnp.sum(w[1][:-1] * phi) + jnp.sum(w[2] * t)

        return jax.grad(loss, argnums=range(5))(state.x, state.v, alpha_w, chain.m, control.tau)

    return gradient


grad_rec_all = _gradient_of(act.active_dynamics_recursive)
grad_kkt_all = _gradient_of(lambda *a: held_outputs(dc.KKT().held(*a)))


def check_gradients(problem, seed, stab, off_manifold, gradient):
    """``gradient`` (of :func:`_gradient_of` a solver) == reverse mode through the dense KKT solve, with respect to
    positions, velocities, alpha^w, masses and control torques, on a random chain and active set."""
    chain, state, control, desc = problem
    rng = np.random.default_rng(seed)
    if off_manifold:
        state = perturb(chain, state, rng)
    n = chain.n
    active = choose_active(chain, state, control, rng)
    alpha_w, theta_bar = rng.normal(size=n), rng.uniform(-np.pi, np.pi, n)
    free_rod = np.append(~(np.asarray(chain.guided[:-1]) & np.asarray(chain.guided[1:])), False)  # as phi is tested
    w = (rng.normal(size=(n, 2)), rng.normal(size=n) * free_rod, rng.normal(size=n) * active)
    desc += f" active={active.astype(int).tolist()} seed={seed} stab={stab} off={off_manifold}"
    g1 = gradient(chain, state, control, active, alpha_w, theta_bar, stab, w)
    g2 = grad_kkt_all(chain, state, control, active, alpha_w, theta_bar, stab, w)
    tol = max(1e-9, 1e-15 * kkt_condition(chain, state, control, active))
    for name, u, v in zip(("x", "v", "alpha_w", "m", "tau"), g1, g2):
        assert np.all(np.isfinite(u)), (name, desc)
        # relative, but a gradient that vanishes (e.g. of a lone slider point) is compared absolutely: both solvers
        # give it as round-off of O(1) quantities, ~1e-15 (a relative comparison of two round-offs is meaningless)
        err = np.max(np.abs(np.asarray(u) - np.asarray(v)), initial=0.0)
        assert err <= tol * max(np.max(np.abs(np.asarray(v)), initial=0.0), 1e-5), (name, _rel(u, v), desc)


@pytest.mark.slow
@given(random_problem(sizes=SIZES), st.integers(0, 2**31), st.sampled_from([NO_STAB, 0.05]), st.booleans())
def test_recursion_gradients_equal_kkt_gradients(problem, seed, stab, off_manifold):
    """The Part II recursion's implicit derivatives (:func:`diffchain._solvers.recursive_solver.active_solve`: one more
    recursion with the cotangent, the sweeps never differentiated) == reverse mode through the dense KKT solve."""
    check_gradients(problem, seed, stab, off_manifold, grad_rec_all)


grad_short_all = _gradient_of(lambda *a: held_outputs(dc.ShortChain().held(*a)))


@pytest.mark.slow
@given(random_problem(sizes=(2, 3, 5, small_chain.SMALL_MAX)), st.integers(0, 2**31), st.sampled_from([NO_STAB, 0.05]),
       st.booleans())
def test_short_chain_gradients_equal_kkt_gradients(problem, seed, stab, off_manifold):
    """:class:`diffchain.ShortChain`'s implicit derivatives (one more written-out solve with the cotangent) == reverse
    mode through the dense KKT solve."""
    check_gradients(problem, seed, stab, off_manifold, grad_short_all)


@pytest.mark.parametrize("stab", [NO_STAB, 0.05])
def test_recursion_in_blocks_equals_kkt(stab):
    """The Part II sweeps as scans over blocks of points (``Recursive(block=...)``, by default from 64 points on; here
    ``block=4`` at 13 points: 1 point, then 3 blocks of 4) == KKT, and == the one scan (``block=None``) bit for bit."""
    rng = np.random.default_rng(11)
    chain = dc.pendulum(12)
    state = perturb(chain, dc.from_joint_angles(chain, rng.uniform(-1, 1, 12), rng.uniform(-1, 1, 12)), rng)
    control = dc.Control(tau=jnp.asarray(rng.normal(size=13)))
    active = choose_active(chain, state, control, rng)
    alpha_w, theta_bar = rng.normal(size=13), rng.uniform(-np.pi, np.pi, 13)
    a1, phi1, t1 = held_outputs(dc.Recursive(block=4).held(chain, state, control, active, alpha_w, theta_bar, stab))
    a2, phi2, t2 = kkt(chain, state, control, active, alpha_w, theta_bar, stab)
    one_scan = held_outputs(dc.Recursive(block=None).held(chain, state, control, active, alpha_w, theta_bar, stab))
    for x, y in zip((a1, phi1, t1), one_scan):
        np.testing.assert_array_equal(x, y)
    assert active.sum() >= 3
    assert _rel(a1, a2) <= 1e-10 and _rel(np.asarray(t1)[active], np.asarray(t2)[active]) <= 1e-10
    assert _rel(phi1, phi2) <= 1e-9


@pytest.mark.slow
@given(random_problem(sizes=SIZES), st.integers(0, 2**31), st.booleans(), st.booleans())
def test_active_joints_follow_the_prescribed_angle_motion(problem, seed, off_manifold, held):
    """Along x + v t + a t^2/2 the joint angle of every active joint has theta'' = alpha^w (exactly, also off the
    manifold: the dL/dt terms of active_terms are right), or, holding theta_bar with the PD correction of seed §12.2
    eq. (33), theta'' = -wrap(theta - theta_bar)/T^2 - 2 theta'/T. On the manifold also eq. (13) itself holds."""
    chain, state, control, desc = problem
    rng = np.random.default_rng(seed)
    if off_manifold:
        state = perturb(chain, state, rng)
    active = choose_active(chain, state, control, rng, p=0.7)
    T = 0.05
    alpha_w = np.zeros(chain.n) if held else rng.normal(size=chain.n)
    theta_bar = rng.uniform(-np.pi, np.pi, chain.n)
    stab = T if held else NO_STAB
    a, _, _ = rec(chain, state, control, active, alpha_w, theta_bar, stab)
    theta, dtheta, ddtheta = map(np.asarray, theta_derivatives(state.x, state.v, a))
    err = np.angle(np.exp(1j * (theta - theta_bar)))
    want = -err / T**2 - 2 * dtheta / T if held else alpha_w
    scale = max(np.abs(want).max(), np.abs(ddtheta).max(), 1.0)
    assert np.all(np.abs(ddtheta - want)[active] <= 1e-9 * scale), desc
    if not off_manifold and not held:
        alpha_z = np.asarray(dc.joint_accelerations(state, a))
        assert np.all(np.abs(alpha_z - alpha_w)[active] <= 1e-9 * scale), desc


@given(random_problem(sizes=SIZES, pose="random"), st.integers(0, 2**31))
def test_free_motion_prescribed_needs_no_torque(problem, seed):
    """Prescribing to the active joints the alpha^z the chain has anyway (plain Part I solver) gives tau^w = 0 and
    the same accelerations (seed §8.2: the torques solve alpha^w = alpha^z(0) + (d alpha / d tau) tau). Random poses
    only: near a stretched run between two pins the torque is the round-off of alpha^z divided by a tiny compliance
    (1e-8 relative seen), which says nothing about the solver."""
    chain, state, control, desc = problem
    rng = np.random.default_rng(seed)
    active = choose_active(chain, state, control, rng, p=0.7)
    a0, _ = plain(chain, state, control)
    alpha_free = dc.joint_accelerations(state, a0)
    a, _, tau = rec(chain, state, control, active, alpha_free, np.zeros(chain.n), NO_STAB)
    torque_scale = max(np.abs(np.asarray(control.tau)).max(), np.max(chain.m) * np.max(chain.l, initial=1.0), 1.0)
    assert np.all(np.abs(np.asarray(tau)) <= 1e-9 * torque_scale), desc
    assert _rel(a, a0) <= 1e-9, desc


@given(random_problem(sizes=SIZES), st.integers(0, 2**31))
def test_constraint_torques_are_ordinary_torques(problem, seed):
    """The constraint torques tau^w, applied as ordinary joint torques (seed §4.2) to the chain without active joints,
    reproduce the accelerations: this fixes the sign of the KKT multiplier and of the recursion's tau^w."""
    chain, state, control, desc = problem
    rng = np.random.default_rng(seed)
    active = choose_active(chain, state, control, rng)
    a, _, tau = rec(chain, state, control, active, rng.normal(size=chain.n), np.zeros(chain.n), NO_STAB)
    a_plain, _ = plain(chain, state, dc.Control(control.tau + tau, control.F, control.a_w))
    assert _rel(a_plain, a) <= 1e-9, desc


def rigid_pendulum(n, seed):
    rng = np.random.default_rng(seed)
    m = np.exp(rng.uniform(-1, 1, n))
    chain = dc.Chain(m, np.exp(rng.uniform(-0.5, 0.5, n - 1)), guided=[True] + [False] * (n - 1))
    omega = rng.normal()
    state = dc.from_joint_angles(chain, rng.uniform(-np.pi, np.pi, n - 1), np.r_[omega, np.zeros(n - 2)],
                                 base=rng.normal(size=2))
    control = dc.Control(tau=rng.normal(size=n), F=rng.normal(size=(n, 2)), a_w=np.zeros((n, 2)))
    return chain, state, control, omega


@pytest.mark.parametrize("n", [3, 5, 13])
@pytest.mark.parametrize("motor", [False, True])
def test_locked_chain_is_a_rigid_pendulum(n, motor):
    """Base pinned, joints 2..n-1 active with alpha^w = 0: the chain is one rigid body turning about point 1, with
    I alpha = sum_i (x_i - x_1) x (m_i g + F_i) + tau_1 - tau_n, I = sum_i m_i |x_i - x_1|^2 (interior joint torques
    are internal couples; tau_n turns the last link against the world), a_i = alpha (x_i - x_1)^* - omega^2 (x_i - x_1).
    With ``motor`` joint 1 is active too (a pinned base motor, alpha_1^w given): then alpha = alpha_1^w and
    tau_1^w = I alpha_1^w - (the moment above)."""
    chain, state, control, omega = rigid_pendulum(n, 11 * n + motor)
    active = np.r_[motor, np.ones(n - 2, bool), False]
    alpha_w = np.r_[0.7, np.zeros(n - 1)]
    x, m = np.asarray(state.x), np.asarray(chain.m)
    rel = x - x[0]
    F = np.asarray(control.F) + np.stack([np.zeros(n), -9.81 * m], -1)
    tau = np.asarray(control.tau)
    moment = np.sum(rel[:, 0] * F[:, 1] - rel[:, 1] * F[:, 0]) + tau[0] - tau[-1]
    inertia = np.sum(m * np.sum(rel**2, 1))
    alpha = 0.7 if motor else moment / inertia
    a_want = alpha * np.stack([-rel[:, 1], rel[:, 0]], -1) - omega**2 * rel
    for solve in (rec, kkt):
        a, _, tau_w = solve(chain, state, control, active, alpha_w, np.zeros(n), NO_STAB)
        assert _rel(a, a_want) <= 1e-10
        if motor:
            assert abs(float(tau_w[0]) - (inertia * 0.7 - moment)) <= 1e-10 * max(abs(moment), inertia)


def stiff_problem(n, k, seed, tail_active=True):
    """Points 1 and k guided with a^w = 0 and at rest, joints 2..k-1 active with alpha^w = 0 (seed §12.2 "stiffness":
    points 1..k form a rigid body held at two points, one active row too many); a free moving tail k+1..n."""
    rng = np.random.default_rng(seed)
    guided = np.zeros(n, bool)
    guided[[0, k - 1]] = True
    chain = dc.Chain(np.exp(rng.uniform(-1, 1, n)), np.exp(rng.uniform(-0.5, 0.5, n - 1)), guided=guided)
    state = dc.from_joint_angles(chain, rng.uniform(-2.5, 2.5, n - 1), np.r_[np.zeros(k - 1), rng.normal(size=n - k)])
    # the tail's first point is fixed to point k: make the rod exact in the velocity too (from_joint_angles does)
    active = np.zeros(n, bool)
    active[1:k - 1] = True
    if tail_active and n - k >= 2:
        active[k] = True
    control = dc.Control(tau=rng.normal(size=n), F=rng.normal(size=(n, 2)), a_w=np.zeros((n, 2)))
    return chain, state, control, active, np.r_[np.zeros(k), rng.normal(size=n - k)]


@pytest.mark.parametrize("n,k", [(5, 5), (5, 4), (5, 3), (7, 7), (7, 4), (13, 7), (13, 13)])
def test_stiffness_is_finite_and_right(n, k):
    """Seed §12.2: guided points at both ends of a run of active joints. The KKT matrix is singular there, the
    recursion must detect the round-off-level pivots (k11, r^T A r) and return finite numbers. The data are consistent
    (the rigid part is at rest with a^w = 0), so the accelerations are unique: they must vanish on the rigid part and
    equal the KKT solution with the redundant rows removed (greedy independent subset). Gradients are finite. The
    same under ``vmap`` (a program of its own, whose round-off differs: the rows' parallel test must not depend on
    it)."""
    chain, state, control, active, alpha_w = stiff_problem(n, k, seed=n * 10 + k)
    a, phi, tau = rec(chain, state, control, active, alpha_w, np.zeros(n), NO_STAB)
    a_batch = rec_batch(chain, state, control, active, alpha_w, np.zeros(n), NO_STAB)
    assert np.abs(np.asarray(a_batch) - np.asarray(a)).max() <= 1e-10 * max(np.abs(np.asarray(a)).max(), 1.0)
    assert np.all(np.isfinite(a)) and np.all(np.isfinite(phi)) and np.all(np.isfinite(tau))
    assert np.abs(np.asarray(a)[:k]).max() <= 1e-10 * max(np.abs(np.asarray(a)).max(), 1.0)
    reduced = choose_active(chain, state, control, np.random.default_rng(0), rtol=1e-8, candidates=active)
    assert reduced.sum() < active.sum()  # there really was a redundant row
    a_ref, _, _ = kkt(chain, state, control, reduced, alpha_w, np.zeros(n), NO_STAB)
    assert np.abs(np.asarray(a) - np.asarray(a_ref)).max() <= 1e-9 * max(np.abs(np.asarray(a_ref)).max(), 1.0)
    if n == 5:  # one compilation of the gradient serves all n = 5 cases
        assert all(np.all(np.isfinite(g)) for g in grad_rec(chain, state, control, active, jnp.asarray(alpha_w)))


def test_seed_stiffness_examples_are_finite():
    """The two examples of seed §12.2: (i) points n-1 and n guided, joints i..n-1 active (A_{i-1} = 0), point i-2
    guided; (ii) point n guided, joints i..n-1 active (a rigid pendulum), point i-2 guided ("half stiffness"); and a
    fully stretched run between two pins. Finite accelerations, torques and gradients."""
    n = 5
    cases = [([0, 3, 4], [2, 3]), ([0, 4], [2, 3]), ([0, 4], [1, 2, 3])]
    for pose in ("random", "straight"):
        for guided_idx, active_idx in cases:
            guided = np.zeros(n, bool)
            guided[guided_idx] = True
            chain = dc.Chain(np.linspace(0.5, 2.0, n), np.ones(n - 1), guided=guided)
            theta = np.zeros(n - 1) if pose == "straight" else np.random.default_rng(1).uniform(-2, 2, n - 1)
            state = dc.from_joint_angles(chain, theta)
            on = np.zeros(n, bool)
            on[active_idx] = True
            control = dc.Control(tau=np.ones(n), F=np.ones((n, 2)), a_w=np.zeros((n, 2)))
            out = rec(chain, state, control, on, np.zeros(n), np.zeros(n), NO_STAB)
            assert all(np.all(np.isfinite(o)) for o in out), (guided_idx, active_idx, pose)
            grads = grad_rec(chain, state, control, on, jnp.zeros(n))
            assert all(np.all(np.isfinite(g)) for g in grads), (guided_idx, active_idx, pose)


def test_rigid_links_kkt_and_solver_objects():
    """With rigid links (distributed mass) the KKT form works and its torques are ordinary torques for the Part I KKT
    solver; the Part II recursion refuses them clearly. The solver objects call the functions; bad masks raise."""
    rng = np.random.default_rng(2)
    n = 5
    chain = dc.pendulum(n - 1, mass=[1.0, 0.5, 0.7, 0.3], link_mass=[0.4, 0.3, 0.2, 0.5], link_inertia=0.05)
    state = dc.from_joint_angles(chain, rng.normal(size=n - 1), rng.normal(size=n - 1))
    control = dc.Control(tau=rng.normal(size=n))
    active = np.array([True, False, True, False, True])
    alpha_w = np.array([0.3, 0.0, -0.2, 0.0, 0.4])
    a, _, tau = held_outputs(jax.jit(dc.KKT().held)(chain, state, control, active, alpha_w))
    a_plain = jax.jit(dc.KKT())(chain, state, dc.Control(control.tau + tau)).a
    assert _rel(a_plain, a) <= 1e-10
    alpha = np.asarray(dc.joint_accelerations(state, a))
    assert np.allclose(alpha[active], alpha_w[active], atol=1e-10)
    with pytest.raises(NotImplementedError, match="rigid links"):
        dc.Recursive().held(chain, state, control, active, alpha_w)
    point_chain = dc.pendulum(n - 1)
    out1 = rec(point_chain, state, control, active, alpha_w, np.zeros(n), NO_STAB)
    out2 = held_outputs(jax.jit(dc.Recursive().held)(point_chain, state, control, active, alpha_w))
    assert all(np.allclose(u, v, rtol=1e-13, atol=1e-13) for u, v in zip(out1, out2))
    with pytest.raises(ValueError, match="one flag per joint"):
        dc.KKT().held(point_chain, state, control, active[:3], np.zeros(n))


@given(random_problem(sizes=(3, 5), pose="random"), st.integers(0, 2**31))
def test_compliance_is_symmetric(problem, seed):
    """[[A_i, b^w_i], [p_i^T, q^w_i]] is the compliance of the tail i..n to the force F_i^d and the torque tau_i^w,
    whose work-conjugates are a_i and the link rotation alpha_i^o (the torque's share on point i-1 and the L_{i-1} part
    on point i travel in F_i^d): so A_i = A_i^T, b^w_i = p_i and q^w_i >= 0 -- an independent check of the seed's twelve
    formulas (§10), and the property the lock rule of the recursion relies on."""
    chain, state, control, desc = problem
    rng = np.random.default_rng(seed)
    n = chain.n
    active = choose_active(chain, state, control, rng)
    A, bw, p, qw = (np.asarray(x) for x in coefficient_groups(chain, state, control, active, rng.normal(size=n)))
    scale = max(np.abs(A).max() * np.max(chain.l), np.abs(p).max(), 1e-300)
    assert np.abs(bw - p).max() <= 1e-12 * scale, desc
    assert np.abs(A - np.swapaxes(A, 1, 2)).max() <= 1e-12 * np.abs(A).max(), desc
    assert np.all(qw >= -1e-12 * np.abs(qw).max()), desc


@jax.jit
def coefficient_groups(chain, state, control, active, alpha_w):
    """A_i (n,2,2), b^w_i (n,2), p_i (n,2), q^w_i (n,) of the recursion (:func:`diffchain._solvers.recursive_held.active_backward`)."""
    from diffchain._constraints.chain import point_projector_c, rod_terms_c

    X, Y, U, V = state.x[:, 0], state.x[:, 1], state.v[:, 0], state.v[:, 1]
    rx, ry, e = rod_terms_c(chain, X, Y, U, V)
    P11, P12, P22, a0x, a0y = point_projector_c(chain, X, Y, U, V, control.a_w)
    L = geometry.link_L(state.x)
    alpha = held_rows.active_terms(chain, state, alpha_w)
    pad = lambda x: jnp.concatenate([x, jnp.zeros((1,), x.dtype)])  # noqa: E731
    Fe = _forces.external_forces(chain, state, control)
    (A, bw, _, p, qw, _), _, _, _ = recursive_held.active_backward(
        chain.m, (pad(rx), pad(ry)), (pad(L[:, 0]), pad(L[:, 1])), pad(e), (Fe[:, 0], Fe[:, 1]), (P11, P12, P22),
        (a0x, a0y), pad(active[1:]), pad(alpha[1:]), jnp.max(1.0 / chain.m), jnp.min(chain.l))
    A11, A12, A21, A22 = A
    A = jnp.stack([jnp.stack([A11, A12], -1), jnp.stack([A21, A22], -1)], -2)
    return A, jnp.stack(bw, -1), jnp.stack(p, -1), qw
