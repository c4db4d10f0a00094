"""The benchmark suite of ``python -m diffchain bench``: its baselines are the same models, and the command runs."""
import importlib.util
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc
from diffchain._bench import workloads as wl


@pytest.mark.parametrize("n_links", [1, 3, 7])
def test_reduced_pendulum_equals_the_recursion(n_links):
    """The plain-JAX baseline's Lagrangian in absolute link angles (written out by hand) against diffchain's recursion
    at random states, masses and lengths: the two sides of the benchmark simulate the same model."""
    rng = np.random.default_rng(n_links)
    m, l = rng.uniform(0.5, 2.0, n_links), rng.uniform(0.5, 1.5, n_links)
    chain = dc.pendulum(n_links, mass=m, length=l)

    @jax.jit
    def both(th, thd):
        s = dc.from_joint_angles(chain, th, thd)
        alpha = dc.joint_accelerations(s, dc.forward_dynamics(chain, s))[:n_links]
        return jnp.cumsum(alpha), wl.reduced_pendulum_accel(jnp.cumsum(th), jnp.cumsum(thd), chain.m[1:], chain.l)

    for _ in range(3):
        th, thd = rng.uniform(-np.pi, np.pi, n_links), rng.uniform(-2, 2, n_links)
        recursion, reduced = both(jnp.asarray(th), jnp.asarray(thd))
        np.testing.assert_allclose(recursion, reduced, rtol=1e-10, atol=1e-10)


@pytest.mark.slow
def test_workloads_agree_with_their_baselines_and_are_float32():
    """Every workload with a closed-form baseline agrees with it at a random state, and a float32 workload's model and
    starts hold float32 arrays only (a float64 leaf would make its "float32" row a float64 program)."""
    for w in wl.workloads():
        if w.reduced is not None:
            assert w.reduced(jnp.float64)[3]() < 1e-9, w.name
            starts, *_ = w.reduced(jnp.float32)
            assert {a.dtype for a in starts(2, 0)} == {jnp.dtype(jnp.float32)}, w.name
        model, starts = w.build(jnp.float32)
        leaves = jax.tree_util.tree_leaves((model, starts(2, 0)))
        floats = {a.dtype for a in leaves if isinstance(a, jax.Array) and jnp.issubdtype(a.dtype, jnp.floating)}
        assert floats == {jnp.dtype(jnp.float32)}, (w.name, floats)


@pytest.mark.slow
def test_command_writes_the_report(tmp_path):
    """``python -m diffchain bench --quick --only pendulum5`` prints and writes the report's tables (with MJX's forward
    rate from its worker process, where MJX is installed)."""
    out = tmp_path / "report.md"
    run = subprocess.run([sys.executable, "-m", "diffchain", "bench", "--quick", "--only", "pendulum5", "--no-sharding",
                          "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    text = out.read_text()
    for heading in ("## The same model on every side", "## Forward rollouts", "## Gradients"):
        assert heading in text
    rows = [line for line in text.splitlines() if line.startswith("| 5-link pendulum | float32 | 1024 |")]
    assert len(rows) == 2  # a forward row and a gradient row
    rate = float(rows[0].split("|")[5])
    assert rate > 0
    if importlib.util.find_spec("mujoco.mjx") is not None:  # MJX's forward rate, from its worker process
        assert "| 5-link pendulum | MJX |" in text
        assert float(rows[0].split("|")[12]) > 0


def test_mjx_rollout_follows_diffchains():
    """The benchmark's MJX program (``peers.mjx_programs``) simulates the same 5-link pendulum as diffchain's
    ``SemiImplicitEuler`` rollout: from the same random starts (the suite's, seed 0) the two first-order schemes (in
    joint angles and in point coordinates) end 0.1 s later at joint angles and rates whose difference halves with dt."""
    pytest.importorskip("mujoco.mjx")
    from diffchain._bench import peers

    n, B, t_end = 5, 4, 0.1
    chain, starts = wl._pendulum(n)(jnp.float64)
    th = jnp.asarray(np.random.default_rng(0).uniform(-np.pi, np.pi, (B, n)))  # the suite's starts, as angles

    def difference(dt):
        T = round(t_end / dt)
        run, _ = peers.mjx_programs([1.0] * (n + 1), [1.0] * n, dt)
        q, qd = jax.jit(lambda th: run(th, 0 * th, T))(th)
        final = jax.jit(jax.vmap(lambda s: dc.rollout(chain, s, None, dt, n_steps=T,
                                                      integrator=dc.SemiImplicitEuler())[0]))(starts(B, 0))
        theta, omega = (jax.vmap(f)(final)[:, :n] for f in (dc.joint_angles, dc.joint_velocities))
        assert np.max(np.abs(np.asarray(theta - th))) > 0.01  # (they moved)
        return max(np.max(np.abs(np.angle(np.exp(1j * np.asarray(theta - q))))), np.max(np.abs(np.asarray(omega - qd))))

    d1, d2 = difference(1e-3), difference(5e-4)
    assert d1 < 1e-2 and 1.7 < d1 / d2 < 2.4, (d1, d2)
