"""Gradients through event rollouts (contacts, angle limits, halving; seed 000 §7, §12), checked against central
finite differences on an event-free segment (gradients and Hessian-vector products) and against the one-chain
gradients for a batch (through events: the gradient matrix, tests/gradients).

A file of its own: these programs take most of the suite's compile time, and the test runner gives each file to one
worker.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc

DT = 1e-3


@pytest.fixture(scope="module")
def rollout_loss():
    chain = dc.free_chain(3, mass=1.0, length=0.4)
    lo = np.array([-np.inf, -0.9, -0.9])  # the interior joints limited; joint 1 against the world is not
    events = dc.Events(chain.n, ground=0.0, theta_min=lo, theta_max=-lo)

    def loss(theta, base_v, height):
        state = dc.from_joint_angles(chain, theta, base=jnp.stack([0.0, height]), base_velocity=base_v)
        final, (_, rep) = dc.event_rollout(chain, events, dc.EventState(state), None, DT, n_steps=1000)
        return jnp.sum(final.state.x[:, 1] * jnp.arange(1.0, 5.0)) + jnp.sum(final.state.v**2), rep

    return jax.jit(loss), jax.jit(jax.grad(loss, argnums=(0, 1), has_aux=True))


@pytest.mark.slow
def test_gradients_match_finite_differences_without_events(rollout_loss):
    """1000 quanta of flight high above the ground with every event mechanism switched on: the gradient equals central
    differences (no event happens, so the loss is smooth)."""
    f, grad = rollout_loss
    th, bv, height = jnp.array([0.3, 0.4, -0.5]), jnp.array([0.5, 3.0]), 6.0
    (g_th, g_bv), rep = grad(th, bv, height)
    assert int(rep.events.sum()) == 0
    assert np.all(np.isfinite(g_th)) and np.all(np.isfinite(g_bv))  # (assert_allclose takes NaN == NaN)
    eps = 1e-6
    for g, arg in ((g_th, 0), (g_bv, 1)):
        for k in range(g.shape[0]):
            args = [th, bv]
            plus = [a + eps * (i == arg) * jnp.eye(a.shape[0])[k] for i, a in enumerate(args)]
            minus = [a - eps * (i == arg) * jnp.eye(a.shape[0])[k] for i, a in enumerate(args)]
            fd = (f(*plus, height)[0] - f(*minus, height)[0]) / (2 * eps)
            np.testing.assert_allclose(g[k], fd, rtol=1e-6, atol=1e-7)


@pytest.mark.slow
def test_second_derivatives_match_finite_differences_without_events(rollout_loss):
    """Forward over reverse through the same 1000 event-free quanta: a Hessian-vector product equals central
    differences of the gradient."""
    _, grad = rollout_loss
    th, bv, height = jnp.array([0.3, 0.4, -0.5]), jnp.array([0.5, 3.0]), 6.0
    w = jnp.array([0.6, -0.3, 1.0])
    g_th = lambda t: grad(t, bv, height)[0][0]  # noqa: E731
    hvp = jax.jit(lambda t, w: jax.jvp(g_th, (t,), (w,))[1])(th, w)
    eps = 1e-5
    fd = (g_th(th + eps * w) - g_th(th - eps * w)) / (2 * eps)
    assert np.all(np.isfinite(hvp)) and np.all(np.isfinite(fd))  # (assert_allclose takes NaN == NaN)
    np.testing.assert_allclose(hvp, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.slow
def test_gradient_of_a_batch_equals_the_gradients_one_by_one(rollout_loss):
    """grad of a vmap over 1000-quantum rollouts, two with impacts and limit hits, one without: the per-chain
    gradients (this order transposes rare_cond's derivative under vmap: no stop_gradient of a tangent, jax-ml/jax#22011)."""
    loss, grad = rollout_loss
    rng = np.random.default_rng(11)
    th, bv = jnp.asarray(rng.uniform(-0.8, 0.8, (3, 3))), jnp.asarray(rng.normal(size=(3, 2)))
    height = jnp.array([1.0, 1.0, 6.0])
    total = lambda th, bv: jnp.sum(jax.vmap(lambda *a: loss(*a)[0])(th, bv, height))  # noqa: E731
    g_th, g_bv = jax.jit(jax.grad(total, (0, 1)))(th, bv)
    assert np.all(np.isfinite(g_th)) and np.all(np.isfinite(g_bv))
    events = 0
    for i in range(3):
        (one_th, one_bv), rep = grad(th[i], bv[i], height[i])
        np.testing.assert_allclose(g_th[i], one_th, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(g_bv[i], one_bv, rtol=1e-10, atol=1e-12)
        events += int(rep.impacts.sum()) + int(rep.limit_hits.sum())
    assert events >= 2
