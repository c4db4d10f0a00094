"""The point-major backend (diffchain._xla.point_major, ``rollout(..., backend=dc.PointMajor())``): under vmap, rollouts of chains
of point masses run the lambda-first form point by point; they must be the recursion's rollouts (the array form,
vmap-ed) to round-off, for every integrator, batched or shared chains, states and controls, and derivatives must be
the array form's."""
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc
from diffchain._simulate import rollout as integrate
from diffchain._xla import point_major as lean, point_major_adjoint, point_major_backend
from strategies import consistent_start, make_problem

DT, T = 1e-3, 40


def point_major(*args, **kwargs):
    """The point-major program, compared below with the array form's (integrate._rollout: no run-time checks); some
    random problems leave their constraints on purpose (guided points driven out of reach), so neither side checks."""
    kwargs.setdefault("integrator", dc.SeedQuantum())  # (the default, Projected(), has no point-major form)
    return dc.rollout(*args, backend=dc.PointMajor(), check=False, **kwargs)


def lean_problem(n, seed, sliders=True):
    """A random problem of :func:`make_problem` (free, guided and slider points, a random pose and inputs, a start on
    the constraints: :func:`consistent_start`) without its damping and drag, and without sliders unless ``sliders``.
    (Not its near-stretched and near-folded poses: between two guided points those are close to singular, and any two
    exact solvers drift apart there -- the recursion and the KKT form by up to 1e-8 m in 40 steps.)"""
    chain, state, control, _ = make_problem(n, seed, pose="random")
    chain = eqx.tree_at(lambda c: (c.damper_c, c.k_v), chain, (jnp.zeros_like(chain.damper_c), jnp.zeros_like(chain.k_v)))
    if not sliders:
        chain = eqx.tree_at(lambda c: c.point_kinds.slider, chain, jnp.zeros_like(chain.slider))
    chain, state = consistent_start(chain, state)
    return chain, dc.check_state(chain, state), control


def batch(n, seeds, sliders=True):
    """Chains, states and open-loop controls (T steps) of several problems, stacked."""
    chains, states, controls = zip(*(lean_problem(n, s, sliders) for s in seeds))
    rng = np.random.default_rng(n)
    u = dc.Control(tau=rng.normal(size=(len(seeds), T, n)), F=rng.normal(size=(len(seeds), T, n, 2)),
                   a_w=rng.normal(size=(len(seeds), T, n, 2)))
    stack = lambda *xs: jnp.stack(xs)  # noqa: E731
    return jax.tree.map(stack, *chains), jax.tree.map(stack, *states), u


def array_form(chain, state, controls, integrator=dc.SeedQuantum(), n_steps=None):
    return integrate._rollout(chain, state, controls, DT, n_steps, dc.Recursive(), integrator, None)


def assert_same_rollout(a, b, rtol=1e-10, spread=None):
    """a and b agree to ``rtol`` of their scale, per batch element; with ``spread`` (a third rollout, by another
    exact solver), to ``rtol`` or 4x what round-off makes the two exact solvers b and ``spread`` differ by there."""
    for p, q, r in zip(jax.tree.leaves(a), jax.tree.leaves(b), jax.tree.leaves(b if spread is None else spread)):
        axes = tuple(range(1, q.ndim))
        scale = 1.0 + jnp.max(jnp.abs(q), axis=axes, keepdims=True)
        tol = jnp.maximum(rtol * scale, 4.0 * jnp.max(jnp.abs(r - q), axis=axes, keepdims=True))
        assert bool(jnp.all(jnp.abs(p - q) <= tol)), float(jnp.max(jnp.abs(p - q) / scale))


INTEGRATORS = [dc.SeedQuantum(), dc.SemiImplicitEuler(), dc.RK4()]


@pytest.mark.slow
@pytest.mark.parametrize("integrator", INTEGRATORS, ids=lambda i: type(i).__name__)
@pytest.mark.parametrize("n", [2, 3, 6, 9])
def test_lean_rollout_is_the_recursion(n, integrator):
    chains, states, u = batch(n, range(6), sliders=n != 2)  # 2 points: none; else sliders in some chains
    assert int(lean.lean_kind(chains)) == (0 if n == 2 else 1)
    got = jax.jit(jax.vmap(lambda c, s, u: point_major(c, s, u, DT, integrator=integrator)))(chains, states, u)
    want = jax.jit(jax.vmap(lambda c, s, u: array_form(c, s, u, integrator)))(chains, states, u)
    # a random 9-point chain may be ill-conditioned enough that round-off grows to ~1e-9 m in 40 steps: there the
    # recursion and the dense KKT form differ by as much (n = 9, seed 5: 4.4e-9 m; the lean form 7.3e-9 m from the
    # recursion, 2.9e-9 m from the KKT form, on one machine; < 1e-15 m for the other seeds)
    kkt = jax.jit(jax.vmap(lambda c, s, u: integrate._rollout(c, s, u, DT, None, dc.KKT(), integrator, None)))(
        chains, states, u)
    assert_same_rollout(got, want, spread=kkt)


def test_the_point_major_program_runs_only_when_asked_for(monkeypatch):
    calls = []
    real = lean.lean_rollout
    monkeypatch.setattr(point_major_backend, "lean_rollout", lambda *a, **k: calls.append(1) or real(*a, **k))
    chains, states, u = batch(3, range(2))
    policy = lambda s: dc.Control(n=3)  # noqa: E731
    jax.make_jaxpr(jax.vmap(lambda c, s, u: dc.rollout(c, s, u, DT)))(chains, states, u)  # the default: vmap of one
    jax.make_jaxpr(jax.vmap(lambda c, s: dc.rollout(c, s, policy, DT, n_steps=T)))(chains, states)
    assert calls == []
    jax.make_jaxpr(jax.vmap(lambda c, s, u: point_major(c, s, u, DT)))(chains, states, u)
    jax.make_jaxpr(jax.vmap(lambda c, s: point_major(c, s, policy, DT, n_steps=T)))(chains, states)
    assert len(calls) == 6  # each: the three lean programs (a lax.switch on the chains' values, lean_kind)
    big = dc.pendulum(16)  # more than max_points (default 16) points, or the KKT solver: a clear error
    big_states = jax.vmap(lambda th: dc.from_joint_angles(big, th))(jnp.zeros((2, 16)))
    with pytest.raises(ValueError, match="backend=PointMajor.*max_points = 16 points, got 17"):
        jax.vmap(lambda s: point_major(big, s, None, DT, n_steps=T))(big_states)
    longer = dc.PointMajor(max_points=17)  # the bound is an argument
    jax.make_jaxpr(jax.vmap(lambda s: dc.rollout(big, s, None, DT, n_steps=T, integrator=dc.RK4(),
                                                 backend=longer)))(big_states)
    assert len(calls) == 9
    for bad in (1, 2.5, True):
        with pytest.raises(ValueError, match="max_points must be an integer >= 2"):
            dc.PointMajor(max_points=bad)
    with pytest.raises(ValueError, match="backend=PointMajor.*Recursive solver"):
        jax.vmap(lambda c, s, u: point_major(c, s, u, DT, solver=dc.KKT()))(chains, states, u)
    with pytest.raises(TypeError, match="backend"):
        dc.rollout(big, dc.from_joint_angles(big, jnp.zeros(16)), None, DT, n_steps=T, backend="point-major")
    assert len(calls) == 9


@pytest.mark.slow
def test_lean_rollout_with_a_shared_chain_and_no_input():
    chains, states, _ = batch(5, range(4), sliders=False)  # new starts below: no line to keep them on
    chain = jax.tree.map(lambda a: a[0], chains)
    theta = jnp.asarray(np.random.default_rng(0).normal(size=(4, 4)))
    states = jax.vmap(lambda th: dc.from_joint_angles(chain, th))(theta)
    got = jax.jit(jax.vmap(lambda s: point_major(chain, s, None, DT, n_steps=T)))(states)
    want = jax.jit(jax.vmap(lambda s: array_form(chain, s, None, n_steps=T)))(states)
    assert_same_rollout(got, want)
    # one state, a batch of open-loop controls
    u = dc.Control(tau=jnp.asarray(np.random.default_rng(1).normal(size=(3, T, 5))))
    state = jax.tree.map(lambda a: a[0], states)
    got = jax.vmap(lambda u: point_major(chain, state, u, DT))(u)
    assert_same_rollout(got, jax.vmap(lambda u: array_form(chain, state, u))(u))


def test_nested_vmap_and_no_drift_correction():
    chains, states, u = batch(4, range(6))
    pair = lambda t: jax.tree.map(lambda a: a.reshape((2, 3) + a.shape[1:]), t)  # noqa: E731  a 2 x 3 batch
    flat = lambda t: jax.tree.map(lambda a: a.reshape((6,) + a.shape[2:]), t)  # noqa: E731
    integrator = dc.SeedQuantum(stab_factor=None)
    got = jax.jit(jax.vmap(jax.vmap(lambda c, s, u: point_major(c, s, u, DT, integrator=integrator))))(
        pair(chains), pair(states), pair(u))
    want = jax.jit(jax.vmap(lambda c, s, u: array_form(c, s, u, integrator)))(chains, states, u)
    assert_same_rollout(flat(got), want)


@pytest.mark.slow
def test_chains_with_damping_or_drag_are_the_recursions():
    # the point-major program with damping -k_omega omega^z and drag -k_v |v| v, in one batch: a chain with damping
    # only, one with drag only, one with both; results and gradients with respect to everything (k_omega and k_v
    # included)
    chains, states, u = batch(4, range(3))
    k_omega = chains.k_omega.at[jnp.array([0, 2]), 1:].set(0.3)
    k_v = chains.k_v.at[jnp.array([1, 2]), 1:].set(0.1)
    other = eqx.tree_at(lambda c: (c.damper_c, c.k_v), chains, (k_omega, k_v))
    assert int(lean.lean_kind(other)) == 2
    got = jax.jit(jax.vmap(lambda c, s, u: point_major(c, s, u, DT)))(other, states, u)
    assert_same_rollout(got, jax.jit(jax.vmap(lambda c, s, u: array_form(c, s, u)))(other, states, u))
    for integrator in (dc.SeedQuantum(), dc.RK4()):
        grad = lambda roll: jax.jit(jax.grad(rollout_loss(roll), argnums=(0, 1, 2), allow_int=True))  # noqa: E731
        got = grad(lambda c, s, u: point_major(c, s, u, DT, integrator=integrator))(other, states, u)
        assert_same_gradients(got, grad(lambda c, s, u: array_form(c, s, u, integrator))(other, states, u))


def feedback(K, c0):
    """A policy closed over its gains: joint torques -K (theta, omega) of each joint, plus c0 on the first."""
    def policy(s):
        d = s.x[1:] - s.x[:-1]
        w = (d[:, 0] * (s.v[1:, 1] - s.v[:-1, 1]) - d[:, 1] * (s.v[1:, 0] - s.v[:-1, 0])) / jnp.sum(d * d, -1)
        tau = -K[0] * jnp.arctan2(d[:, 1], d[:, 0]) - K[1] * w
        return dc.Control(tau=jnp.concatenate([tau, jnp.zeros(1)]).at[0].add(c0))
    return policy


@pytest.mark.slow
def test_derivatives_of_a_lean_rollout_are_the_array_forms():
    chains, states, u = batch(4, range(3))

    def loss(tau, roll):
        ctrl = dc.Control(tau=tau, F=u.F, a_w=u.a_w)
        final, traj = jax.vmap(roll)(chains, states, ctrl)
        return jnp.sum(final.x[..., 1]) + jnp.sum(traj.v**2)

    fast = lambda c, s, u: point_major(c, s, u, DT)  # noqa: E731
    grad = jax.jit(jax.grad(loss), static_argnums=1)
    np.testing.assert_allclose(grad(u.tau, fast), grad(u.tau, array_form), rtol=1e-10, atol=1e-12)
    jvp = jax.jit(lambda tau, roll: jax.jvp(lambda tau: loss(tau, roll), (tau,), (jnp.ones_like(tau),))[1],
                  static_argnums=1)
    np.testing.assert_allclose(jvp(u.tau, fast), jvp(u.tau, array_form), rtol=1e-10)

    def one(tau, roll, c, s):  # vmap of grad: per-chain gradients
        final, _ = roll(c, s, dc.Control(tau=tau))
        return jnp.sum(final.x[..., 1])

    per_chain = [jax.jit(jax.vmap(jax.grad(one), in_axes=(0, None, 0, 0)), static_argnums=1)(u.tau, r, chains, states)
                 for r in (fast, array_form)]
    np.testing.assert_allclose(*per_chain, rtol=1e-10, atol=1e-12)


def assert_same_gradients(got, want, rtol=1e-10):
    """Every floating leaf of ``got`` equals ``want``'s to ``rtol`` of that leaf's scale."""
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(got), jax.tree.leaves(want)):
        if jnp.issubdtype(a.dtype, jnp.floating):
            scale = float(jnp.max(jnp.abs(b), initial=0.0))
            assert float(jnp.max(jnp.abs(a - b), initial=0.0)) <= rtol * max(scale, 1e-300), jax.tree_util.keystr(path)


def rollout_loss(roll, in_axes=(0, 0, 0)):
    """A loss of the final states and of the whole trajectories of a vmap-ed rollout."""
    def loss(c, s, u):
        final, traj = jax.vmap(roll, in_axes=in_axes)(c, s, u)
        return jnp.sum(final.x**2) + jnp.sum(final.v * final.x) + jnp.sum(jnp.sin(traj.v)) + jnp.sum(traj.t)
    return loss


ADJOINT_INTEGRATORS = [dc.SeedQuantum(), dc.SemiImplicitEuler(), dc.RK4()]


@pytest.mark.slow
@pytest.mark.parametrize("integrator", ADJOINT_INTEGRATORS, ids=lambda i: type(i).__name__)
@pytest.mark.parametrize("n, sliders", [(2, False), (5, False), (5, True)])
def test_batched_gradients_with_respect_to_everything_are_the_array_forms(n, sliders, integrator):
    # the lean adjoint (point_major_adjoint.lean_rollout_vjp): chains, states and inputs all batched, random free and guided points,
    # and points on lines (the chains' s and c differentiated too)
    chains, states, u = batch(n, range(4), sliders=sliders)
    assert int(lean.lean_kind(chains)) == int(sliders)
    grad = lambda roll: jax.jit(jax.grad(rollout_loss(roll), argnums=(0, 1, 2), allow_int=True))  # noqa: E731
    got = grad(lambda c, s, u: point_major(c, s, u, DT, integrator=integrator))(chains, states, u)
    want = grad(lambda c, s, u: array_form(c, s, u, integrator))(chains, states, u)
    assert_same_gradients(got, want)
    assert float(jnp.max(jnp.abs(got[0].k_v))) > 0  # drag is zero here, its derivative is not


@pytest.mark.slow
def test_batched_gradients_of_shared_arguments_and_of_no_input_are_the_array_forms():
    chain = dc.pendulum(3, length=[0.8, 1.1, 0.6])  # 4 points
    rng = np.random.default_rng(7)
    states = jax.vmap(lambda th, om: dc.from_joint_angles(chain, th, om))(rng.uniform(-2, 2, (5, 3)),
                                                                            rng.uniform(-1, 1, (5, 3)))
    u = dc.Control(tau=rng.normal(size=(T, 4)), F=rng.normal(size=(T, 4, 2)), a_w=np.zeros((T, 4, 2)))
    grad = lambda roll: jax.jit(jax.grad(rollout_loss(roll, (None, 0, None)), argnums=(0, 1, 2), allow_int=True))  # noqa: E731
    got = grad(lambda c, s, u: point_major(c, s, u, DT))(chain, states, u)
    assert_same_gradients(got, grad(array_form)(chain, states, u))
    grad = lambda roll: jax.jit(jax.grad(rollout_loss(roll, (None, 0, None)), argnums=(0, 1), allow_int=True))  # noqa: E731
    got = grad(lambda c, s, u: point_major(c, s, None, DT, n_steps=T))(chain, states, None)
    assert_same_gradients(got, grad(lambda c, s, u: array_form(c, s, None, n_steps=T))(chain, states, None))


@pytest.mark.slow
@pytest.mark.parametrize("integrator, sliders", [(dc.SeedQuantum(), False), (dc.SemiImplicitEuler(), True),
                                                 (dc.RK4(), True), (dc.SeedQuantum(), True)],
                         ids=["SeedQuantum", "SemiImplicitEuler-sliders", "RK4-sliders", "SeedQuantum-sliders"])
def test_policy_rollouts_and_their_gradients_are_the_array_forms(integrator, sliders):
    # closed loop: the rollouts equal the array form's, and the lean adjoint pulls each step's input cotangents back
    # through the policy (its arguments: gains shared, offsets per chain), with torques, forces and guided
    # accelerations of the state and of the time; gradients in both orders of vmap and grad
    chains, states, _ = batch(4, range(4), sliders=sliders)
    assert int(lean.lean_kind(chains)) == int(sliders)
    K, c0 = jnp.asarray([2.0, 0.5]), jnp.linspace(-1.0, 1.0, 4)

    def policy(K, c0):
        def p(s):
            return dc.Control(tau=feedback(K, c0)(s).tau * jnp.cos(3.0 * s.t), F=0.1 * K[1] * s.v,
                              a_w=0.05 * jnp.sin(s.x + c0))
        return p

    fast = lambda c, s, p: point_major(c, s, p, DT, n_steps=T, integrator=integrator)  # noqa: E731
    slow = lambda c, s, p: array_form(c, s, p, integrator, n_steps=T)  # noqa: E731
    roll = lambda form: jax.jit(jax.vmap(lambda c, s, c0: form(c, s, policy(K, c0))))(chains, states, c0)  # noqa: E731
    assert_same_rollout(roll(fast), roll(slow))

    def grads(roll):
        def loss(K, c0, chains, states):
            return rollout_loss(lambda c, s, c0: roll(c, s, policy(K, c0)))(chains, states, c0)
        return jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3), allow_int=True))(K, c0, chains, states)

    got, want = grads(fast), grads(slow)
    assert_same_gradients(got, want)
    assert float(jnp.max(jnp.abs(got[3].t))) > 0  # the policy reads the time
    per_chain = [jax.jit(jax.vmap(jax.grad(lambda K, c, s, c0: jnp.sum(f(c, s, policy(K, c0))[0].x**2)),
                                  (None, 0, 0, 0)))(K, chains, states, c0) for f in (fast, slow)]
    assert_same_gradients(*per_chain)


@pytest.mark.slow
def test_per_chain_gradients_and_second_derivatives_of_batched_rollouts_are_the_array_forms():
    chains, states, u = batch(3, range(3), sliders=False)

    def one(tau, roll, c, s):
        final, traj = roll(c, s, dc.Control(tau=tau, F=u.F[0], a_w=u.a_w[0]))
        return jnp.sum(final.x[..., 1]) + jnp.sum(traj.v**2)

    fast = lambda c, s, u: point_major(c, s, u, DT)  # noqa: E731
    per_chain = [jax.jit(jax.vmap(jax.grad(one), in_axes=(0, None, 0, 0)), static_argnums=1)(u.tau, r, chains, states)
                 for r in (fast, array_form)]
    np.testing.assert_allclose(*per_chain, rtol=1e-10, atol=1e-12)

    def batched(tau, roll):
        return jnp.sum(jax.vmap(one, in_axes=(0, None, 0, 0))(tau, roll, chains, states))

    hvp = [jax.jit(lambda t, d: jax.jvp(jax.grad(lambda t: batched(t, r)), (t,), (d,))[1])(u.tau, u.F[..., 0])
           for r in (fast, array_form)]  # forward over reverse: the linear map's jvp
    np.testing.assert_allclose(*hvp, rtol=1e-9, atol=1e-12)


@pytest.mark.slow
def test_the_lean_adjoint_is_traced_only_where_it_applies(monkeypatch):
    calls = []
    real = point_major_adjoint.lean_rollout_vjp
    monkeypatch.setattr(point_major_backend, "lean_rollout_vjp", lambda *a, **k: calls.append(1) or real(*a, **k))
    chains, states, u = batch(3, range(2))

    class Heun(dc.SeedQuantum):  # an integrator the adjoint does not know: the array form's reverse mode
        pass

    for integrator, expected in ((dc.SeedQuantum(), 3), (dc.RK4(), 6), (Heun(), 6)):  # 3: lean_kind's programs
        roll = lambda c, s, u: point_major(c, s, u, DT, integrator=integrator)  # noqa: E731
        jax.make_jaxpr(jax.grad(rollout_loss(roll), argnums=1))(chains, states, u)
        assert len(calls) == expected
    policy = lambda s: dc.Control(n=3)  # noqa: E731
    policy_loss = rollout_loss(lambda c, s, u: point_major(c, s, policy, DT, n_steps=T))
    jax.make_jaxpr(jax.grad(policy_loss, argnums=1))(chains, states, u)
    assert len(calls) == 9  # closed loop: the adjoint too
