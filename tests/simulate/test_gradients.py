"""Differentiability: gradients of rollouts against central finite differences, finiteness, no retracing."""
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, example, given, strategies as st

import diffchain as dc
from strategies import consistent_start, make_problem, random_problem


def _problem():
    rng = np.random.default_rng(4)
    T = 200
    tau = rng.normal(size=(T, 4)) * 0.5
    return T, tau


def _loss(params, integrator, T, checkpoint=None):
    """Scalar of the final state of a 3-link pendulum as a function of masses, lengths, initial angles and torques."""
    m, l, theta0, tau = params
    chain = dc.pendulum(3, mass=m, length=l, k_omega=0.1, k_v=0.05)
    state = dc.from_joint_angles(chain, theta0)
    controls = dc.Control(tau=tau, F=jnp.zeros((T, 4, 2)), a_w=jnp.zeros((T, 4, 2)))
    final, _ = dc.rollout(chain, state, controls, 2e-3, integrator=integrator, checkpoint=checkpoint)
    return jnp.sum(final.x[-1] * jnp.array([1.0, 2.0])) + 0.1 * jnp.sum(final.v**2)


def _central_fd(f, params, direction, h=1e-6):
    plus = jax.tree_util.tree_map(lambda p, d: p + h * d, params, direction)
    minus = jax.tree_util.tree_map(lambda p, d: p - h * d, params, direction)
    return (f(plus) - f(minus)) / (2 * h)


@pytest.mark.slow
def test_rollout_gradients_match_finite_differences():
    T, tau = _problem()
    params = (jnp.array([1.0, 0.8, 0.6]), jnp.array([1.0, 0.7, 0.5]), jnp.array([-1.2, 0.4, 0.3]), jnp.asarray(tau))
    rng = np.random.default_rng(5)
    for integrator in (dc.SeedQuantum(), dc.RK4()):
        f = jax.jit(lambda p: _loss(p, integrator, T))
        g_rev = jax.jit(jax.grad(lambda p: _loss(p, integrator, T)))(params)
        g_ckpt = jax.jit(jax.grad(lambda p: _loss(p, integrator, T, checkpoint=20)))(params)
        jvp = jax.jit(lambda p, d: jax.jvp(lambda q: _loss(q, integrator, T), (p,), (d,))[1])
        for _ in range(3):
            direction = jax.tree_util.tree_map(lambda p: jnp.asarray(rng.normal(size=p.shape)), params)
            fd = float(_central_fd(f, params, direction))
            rev = sum(float(jnp.vdot(g, d)) for g, d in zip(g_rev, direction))
            fwd = float(jvp(params, direction))
            assert abs(rev - fd) <= 1e-6 * max(abs(fd), 1.0), (type(integrator).__name__, rev, fd)
            assert abs(fwd - rev) <= 1e-10 * max(abs(rev), 1.0)
        for a, b in zip(g_rev, g_ckpt):  # checkpointing changes memory, not values
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.slow
def test_jacfwd_equals_jacrev_of_rollout_wrt_initial_state():
    T, tau = _problem()
    chain = dc.pendulum(3)
    controls = dc.Control(tau=jnp.asarray(tau), F=jnp.zeros((T, 4, 2)), a_w=jnp.zeros((T, 4, 2)))

    def final_angles(theta0):
        return dc.joint_angles(dc.rollout(chain, dc.from_joint_angles(chain, theta0), controls, 2e-3)[0])

    theta0 = jnp.array([-1.0, 0.5, 0.2])
    np.testing.assert_allclose(jax.jit(jax.jacfwd(final_angles))(theta0), jax.jit(jax.jacrev(final_angles))(theta0),
                               rtol=1e-9, atol=1e-12)


@eqx.filter_jit
@eqx.filter_grad
def _grads(args, controls):
    chain, state = args
    final, _ = dc.rollout(chain, state, controls, 1e-3, check=False)  # (runs that drift are left out below)
    return jnp.sum(final.x**2) + jnp.sum(final.v**2)


@eqx.filter_jit
def _peak_violation(chain, state, controls):
    """Largest relative rod-length or slider-line error along the rollout of :func:`_grads` (a rod between two guided
    points is switched off and may stretch)."""
    _, traj = dc.rollout(chain, state, controls, 1e-3, check=False)
    rho = jnp.linalg.norm(traj.x[:, 1:] - traj.x[:, :-1], axis=-1)
    rod = jnp.where(~(chain.guided[:-1] & chain.guided[1:]), jnp.abs(rho - chain.l) / chain.l, 0.0)
    line = jnp.where(chain.slider_mask, jnp.abs(jnp.sum(chain.s * traj.x, -1) - chain.c), 0.0) / jnp.max(chain.l)
    return jnp.maximum(jnp.max(rod), jnp.max(line))


@pytest.mark.slow
@given(random_problem(sizes=(2, 5, 13), pose="random"))
@example(make_problem(5, 4434, "random"))  # its random slider line was out of reach: the rollout diverged to 1e139
def test_gradients_finite_on_random_chains(problem):
    """Gradients of a short rollout w.r.t. every float parameter and the state stay finite, also at rest (v = 0:
    drag uses a safe norm) and with every joint kind. The rollout must be well posed: it starts where the constraints
    can be kept (:func:`strategies.consistent_start`), and a run the guided points' own random motion still drives out
    of reach (a closed run between them through a singular pose) leaves the manifold, diverges and is left out."""
    chain, state, control, desc = problem
    chain, state = consistent_start(chain, state)
    controls = jax.tree_util.tree_map(lambda u: jnp.broadcast_to(u, (20,) + u.shape), control)
    for s in (state, dc.State(state.x, jnp.zeros_like(state.v))):
        assume(bool(_peak_violation(chain, s, controls) < 0.1))
        g = _grads((chain, s), controls)
        bad = [k for k, leaf in zip("chain state".split(), g) if not all(
            bool(jnp.all(jnp.isfinite(x))) for x in jax.tree_util.tree_leaves(leaf))]
        assert not bad, (desc, g)


def test_jitted_step_does_not_retrace():
    traces = []

    @jax.jit
    def f(chain, state, control):
        traces.append(1)
        return dc.step(chain, state, control, 1e-3)

    rng = np.random.default_rng(0)
    for _ in range(3):
        chain = dc.pendulum(4, mass=rng.uniform(0.5, 1.5, 4), length=rng.uniform(0.5, 1.5, 4))
        state = dc.from_joint_angles(chain, rng.normal(size=4))
        state = f(chain, state, dc.Control(tau=rng.normal(size=5)))
        state = f(chain, state, dc.Control(tau=rng.normal(size=5)))
    assert len(traces) == 1


@pytest.mark.slow
def test_rk4_gradient_of_a_two_link_pendulum_in_float64():
    """Run in a subprocess with JAX's default XLA flags, as a user's process has them (on jaxlib 0.10.2 this gradient
    once segfaulted in XLA's CPU fusion emitter). The gradient must also match central finite differences."""
    import os
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
        import diffchain as dc
        chain = dc.pendulum(2)
        s0 = dc.from_joint_angles(chain, jnp.array([0.3, 0.3]))
        def loss(tau):
            return dc.rollout(chain, s0, dc.Control(tau=tau), 0.01, integrator=dc.RK4())[0].x[-1, 1]
        tau = jnp.linspace(-1.0, 1.0, 30).reshape(10, 3)
        g = jax.grad(loss)(tau)
        d = jnp.cos(jnp.arange(30.0)).reshape(10, 3)
        fd = (loss(tau + 1e-6 * d) - loss(tau - 1e-6 * d)) / 2e-6
        print(abs(float(jnp.vdot(g, d)) - float(fd)) / max(abs(float(fd)), 1e-12))
    """)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.strip().splitlines()[-1]) < 1e-6


def _solver_loss(solver, chain, x, v, tau, F, a_w, m):
    sol = solver(eqx.tree_at(lambda c: c.m, chain, m), dc.State(x, v), dc.Control(tau, F, a_w), 0.05)
    return jnp.sum(jnp.sin(sol.a)) + 1e-3 * jnp.sum(sol.forces**2)


_SOLVERS = (dc.Recursive(), dc.KKT())
_REV = [jax.jit(jax.grad(lambda *a, s=s: _solver_loss(s, *a), argnums=(1, 2, 3, 4, 5, 6))) for s in _SOLVERS]
_FWD = [jax.jit(lambda c, a, t, s=s: jax.jvp(lambda *q: _solver_loss(s, c, *q), a, t)[1]) for s in _SOLVERS]


@pytest.mark.slow
@given(st.one_of(random_problem(sizes=(1, 2, 5, 9)), random_problem(sizes=(2, 5), links=True)))
def test_implicit_recursion_derivatives_equal_autodiff_of_kkt(problem):
    """The recursion's derivatives are implicit (lax.custom_linear_solve: nothing is differentiated through the
    sweeps); they must equal plain autodiff through the dense KKT solve, in reverse and in forward mode, with respect
    to positions, velocities, torques, point forces, prescribed accelerations and masses, for every joint kind and
    off-manifold states, with point masses (:func:`diffchain._solvers.recursive.kkt_solve`) and rigid links
    (:func:`diffchain._solvers.recursive.link_solve`)."""
    chain, state, control, desc = problem
    args = (state.x, state.v, control.tau, control.F, control.a_w, chain.m)
    rev = [f(chain, *args) for f in _REV]
    scale = max(1.0, max(float(jnp.max(jnp.abs(g))) for g in rev[1]))
    for g_r, g_k in zip(*rev):
        np.testing.assert_allclose(g_r, g_k, atol=1e-8 * scale, err_msg=desc)
    t = tuple(jnp.cos(jnp.arange(a.size, dtype=a.dtype).reshape(a.shape)) for a in args)
    fwd = [f(chain, args, t) for f in _FWD]
    np.testing.assert_allclose(fwd[0], fwd[1], atol=1e-8 * max(1.0, abs(float(fwd[1]))), err_msg=desc)


@pytest.mark.slow
@pytest.mark.parametrize("n_links", [2, 12])
def test_second_derivatives_match_finite_differences(n_links):
    """The Hessian of an acceleration w.r.t. the joint angles (reverse over forward and forward over forward) equals
    central differences of its gradient: the implicit derivative of the recursion can itself be differentiated."""
    chain = dc.pendulum(n_links)

    def tip_vertical_acceleration(theta):
        return dc.forward_dynamics(chain, dc.from_joint_angles(chain, theta, jnp.full(n_links, 0.5)))[-1, 1]

    theta = jnp.linspace(0.3, -0.2, n_links)
    H = jax.jit(jax.hessian(tip_vertical_acceleration))(theta)
    eps = 1e-5
    grad = jax.jit(jax.grad(tip_vertical_acceleration))
    fd = np.stack([(grad(theta + eps * e) - grad(theta - eps * e)) / (2 * eps) for e in np.eye(n_links)])
    np.testing.assert_allclose(H, fd, atol=1e-7 * np.abs(fd).max())
    fwd_fwd = jax.jit(jax.jacfwd(jax.jacfwd(tip_vertical_acceleration)))(theta)
    np.testing.assert_allclose(fwd_fwd, H, atol=1e-12 * np.abs(H).max())
