"""Why the batched sweeps cost what they cost on XLA CPU: a loop over the points against the same arithmetic written
out, on a toy sweep and on the library's batched rollout (README, "What limited the batched throughput").

    python experiments/xla_cpu_loops.py          # ~1 min, one core

1. *Toy sweep*: 6 points, 5 carries, one division per point, a batch of B chains as (B,) rows (the layout of the
   library's sweeps under ``vmap``): ``lax.scan`` over the points against the loop written out. Per chain and sweep.
2. *optimization_barrier*: whether XLA CPU keeps ``lax.optimization_barrier`` in the compiled program (it does not:
   the barrier cannot stop fusion there, so it cannot keep a written-out sweep from being fused into its consumers).
3. *Library*: the batched rollout of the 5-link pendulum (float32, 4096 copies) with the Part I sweeps as the library
   runs them under ``vmap`` (a scan) and written out point by point (``recursive._abcd_sweeps_c(..., unrolled=True)``
   patched in for this run), each point's carry either materialised by a product with the identity (as the library
   does on one chain of 6-8 points) or left to XLA's fusion, which then fuses the sweeps into the kernel that stacks
   the accelerations and recomputes them per output element.
"""
from __future__ import annotations

import os
import re
import statistics
import time

os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})  # one core: the numbers do not depend on the load
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import diffchain as dc  # noqa: E402
from diffchain import recursive  # noqa: E402


def per_call(f, *args, repeats=7):
    jax.block_until_ready(f(*args))
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def toy_step(c, x):
    c1, c2, c3, c4, c5 = c
    d = 1.0 / (x + c1)
    n = (c2 * d, c3 * d + x, c4 - d, c5 + d * x, c1 * x)
    return n, n


def toy_sweep(m, written_out):
    init = (jnp.zeros(m.shape[1:], m.dtype),) * 5
    if written_out:
        c, ys = init, []
        for i in range(m.shape[0]):
            c, y = toy_step(c, m[i])
            ys.append(y)
        ys = tuple(jnp.stack(v) for v in zip(*ys))
    else:
        _, ys = jax.lax.scan(toy_step, init, m)
    return sum(ys) * 0.2 + m * 0.5


def section_toy():
    print("1. toy sweep (6 points, 5 carries), float32, per chain and sweep")
    print(f"{'B':>6} {'scan':>10} {'written out':>12} {'ratio':>6}")
    for B in (64, 256, 1024, 4096):
        m = jnp.asarray(np.random.default_rng(0).uniform(1, 2, (6, B)), jnp.float32)
        L = max(50, 100_000 // B)
        t = {}
        for w in (False, True):
            f = jax.jit(lambda m, w=w: jax.lax.scan(lambda c, _: (toy_sweep(c, w), None), m, None, length=L)[0])
            t[w] = per_call(f, m) / L / B
        print(f"{B:6d} {t[False] * 1e9:8.1f} ns {t[True] * 1e9:10.1f} ns {t[False] / t[True]:5.1f}x")


def section_barrier():
    f = jax.jit(lambda x: jax.lax.optimization_barrier(jnp.sin(x)) * 2.0)
    jaxpr = str(jax.make_jaxpr(f)(jnp.ones(8)))
    hlo = f.lower(jnp.ones(8)).compile().as_text()
    print(f"\n2. optimization_barrier: in the jaxpr {jaxpr.count('optimization_barrier')}, "
          f"in the compiled XLA CPU program {len(re.findall('opt-barrier', hlo))}")


def section_library(B=4096, T=200):
    chain = dc.pendulum(5, mass=1.0, length=1.0)
    chain = jax.tree_util.tree_map(lambda a: a.astype(jnp.float32) if jnp.issubdtype(a.dtype, jnp.floating) else a,
                                   chain)
    th = jnp.asarray(np.random.default_rng(0).uniform(-np.pi, np.pi, (B, 5)), jnp.float32)
    s0 = jax.vmap(lambda t: dc.from_joint_angles(chain, t))(th)
    print(f"\n3. library: batched rollout, 5-link pendulum, float32, B = {B}, T = {T}")
    scan_form, fused_max = recursive.abcd_sweeps_c, recursive.FUSED_MAX
    written_out = lambda *a: recursive._abcd_sweeps_c(*a, unrolled=True)  # noqa: E731
    rows = []
    for name, sweeps, fused in (("scan (the library under vmap)", scan_form, fused_max),
                                ("written out, identity products", written_out, 0),
                                ("written out, left to fusion", written_out, 99)):
        recursive.abcd_sweeps_c, recursive.FUSED_MAX = sweeps, fused
        try:
            f = jax.jit(lambda c, s: jax.vmap(lambda si: dc.rollout(c, si, None, 1e-3, n_steps=T)[0].x)(s))
            out = f(chain, s0)
            t = per_call(f, chain, s0, repeats=5)
        finally:
            recursive.abcd_sweeps_c, recursive.FUSED_MAX = scan_form, fused_max
        rows.append((name, B * T / t, out))
    for name, rate, _ in rows:
        print(f"   {name:32s} {rate:10.3g} copy-steps/s")
    dx = max(float(jnp.max(jnp.abs(r[2] - rows[0][2]))) for r in rows)
    print(f"   same final states: max |dx| = {dx:.1e} m")


if __name__ == "__main__":
    print(f"jax {jax.__version__}, XLA_FLAGS = {os.environ.get('XLA_FLAGS', '')}\n")
    section_toy()
    section_barrier()
    section_library()
