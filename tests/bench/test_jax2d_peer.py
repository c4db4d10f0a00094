"""The Jax2D peer of the benchmark (:mod:`diffchain._bench.jax2d_peer`) simulates diffchain's pendulum."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc


def _wrapped(d):
    return np.abs((np.asarray(d) + np.pi) % (2 * np.pi) - np.pi)


@pytest.mark.slow
def test_jax2d_pendulum_follows_diffchain():
    """A 3-link Jax2D pendulum (float32) starts at diffchain's points (to 1e-6) and follows diffchain's RK4 rollout
    (float64) for 200 steps of 1 ms from 8 random starts (joint angles uniform in [-pi, pi], seed 0, at rest).

    Measured: the joint angles differ by 0.63e-3 to 1.08e-3 rad (first-order stepping and Jax2D's soft joints;
    diffchain's own semi-implicit Euler differs from its RK4 by up to 1.8e-3 rad on these starts), the links stretch
    by at most 4.3e-6. Tolerances: 5e-3 rad and 2e-5, about 5x the largest of each. A wrong model
    fails: against diffchain's chain with one wrong parameter, Jax2D's angles differ (largest over the 8 starts) by
    0.069 rad for a 2 kg mass at the second tip, 0.047 rad for 1.5 kg at the last tip, 0.0136 rad for a 1.1 m last
    link, 0.019 rad for a 1.1 m middle link, 0.017 rad for g = 10.3."""
    pytest.importorskip("jax2d")
    pytest.importorskip("chex")  # jax2d 1.0.2's engine imports chex without declaring it
    from diffchain._bench.jax2d_peer import jax2d_pendulum, link_stretch

    n, B, T = 3, 8, 200
    theta = np.random.default_rng(0).uniform(-np.pi, np.pi, (B, n))
    chain = dc.pendulum(n, mass=1.0, length=1.0)
    start = jax.vmap(lambda t: dc.from_joint_angles(chain, t))(jnp.asarray(theta))
    p = jax2d_pendulum(n)
    states = p.from_joint_angles(theta)
    np.testing.assert_allclose(np.asarray(p.joint_points(states), np.float64), np.asarray(start.x), rtol=0, atol=1e-6)
    assert _wrapped(np.asarray(p.joint_angles(states), np.float64) - theta).max() < 1e-6

    final = jax.jit(p.run, static_argnums=1)(states, T)
    ref = jax.jit(jax.vmap(lambda s: dc.rollout(chain, s, None, 1e-3, n_steps=T, integrator=dc.RK4())[0]))(start)
    stretch = link_stretch(p.joint_points(final))
    difference = _wrapped(np.asarray(p.joint_angles(final), np.float64) - np.asarray(jax.vmap(dc.joint_angles)(ref)))
    assert stretch < 2e-5, stretch
    assert difference.max() < 5e-3, difference.max(axis=-1)
