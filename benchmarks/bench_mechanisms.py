"""Cost of one forward-dynamics evaluation of a closed chain of n links (both ends pinned: one loop through the ground):
dense KKT / range-space on the general model (O(n^3): dense Jacobian, complete-pivot rank check, dense solve) versus
the sparse method, dc.Banded (seed 001 §8.13: a tridiagonal Thomas solve, O(n)), on the same loop as a Chain pinned at
both ends. Prints a table of microseconds per call and ratios.

    python benchmarks/bench_mechanisms.py [--max-dense 256] [--max-banded 4096]
"""
import argparse
import platform
import time

import jax

jax.config.update("jax_enable_x64", True)
import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import diffchain as dc  # noqa: E402
from diffchain import MechanismBuilder  # noqa: E402

dc.set_xla_cpu_flags()  # this script's process: the recommended XLA CPU flags


def chain_points(n):
    xs = np.linspace(0.0, 0.8 * (n + 1), n + 2)
    ys = -0.25 * (n + 1) * np.sin(np.pi * np.arange(n + 2) / (n + 1))
    P = np.stack([xs, ys], 1)
    return P, np.linalg.norm(P[1:] - P[:-1], axis=1)


def timeit(f, *args, reps):
    jax.block_until_ready(f(*args))            # compile
    best = np.inf
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(reps):
            out = f(*args)
        jax.block_until_ready(out)
        best = min(best, (time.perf_counter() - t0) / reps)
    return best * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-dense", type=int, default=256)
    ap.add_argument("--max-banded", type=int, default=4096)
    args = ap.parse_args()
    print(f"# {platform.processor() or platform.machine()}, jax {jax.__version__}, {jax.devices()[0].platform}, "
          f"float64, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    solvers = {"KKT": dc.KKT(), "range": dc.RangeSpace(), "null": dc.NullSpace(), "Larin": dc.Larin()}
    dense = {k: eqx.filter_jit(lambda m, s, sv=sv: dc.forward_dynamics(m, s, solver=sv)) for k, sv in solvers.items()}
    print(f"{'n':>6} " + " ".join(f"{k + ' us':>10}" for k in solvers) + f" {'banded us':>10} {'KKT/banded':>11} {'max |da|':>9}")
    banded = jax.jit(lambda chain, s: dc.forward_dynamics(chain, s, solver=dc.Banded())[1:-1])
    kkt = dense["KKT"]
    n = 8
    while n <= args.max_banded:
        P, l = chain_points(n)
        v = jnp.asarray(np.random.default_rng(0).normal(0, 1, (n, 2)))
        chain = dc.Chain(jnp.ones(n + 2), jnp.asarray(l), guided=np.r_[True, np.zeros(n, bool), True])
        # velocities on the rods (J v = 0), where the chain's and the mechanism's rows have the same velocity terms
        s_chain = jax.jit(dc.project, static_argnums=2)(
            chain, dc.State(jnp.asarray(P), jnp.concatenate([jnp.zeros((1, 2)), v, jnp.zeros((1, 2))]), 0.0), 0)
        s = dc.State(s_chain.x[1:-1], s_chain.v[1:-1], 0.0)
        tb = timeit(banded, chain, s_chain, reps=max(10, 20000 // n))
        if n <= args.max_dense:
            mb = MechanismBuilder()
            mb.ground("a", P[0]), mb.ground("b", P[-1])
            names = ["a"] + [mb.point(f"p{k}", P[k + 1], mass=1.0) for k in range(n)] + ["b"]
            for k in range(n + 1):
                mb.rod(f"r{k}", names[k], names[k + 1])
            mech, _ = mb.build()
            t = {k: timeit(f, mech, s, reps=max(3, 2000 // n)) for k, f in dense.items()}
            err = float(jnp.max(jnp.abs(kkt(mech, s) - banded(chain, s_chain))))
            print(f"{n:>6} " + " ".join(f"{v:>10.1f}" for v in t.values())
                  + f" {tb:>10.1f} {t['KKT'] / tb:>11.1f} {err:>9.1e}", flush=True)
        else:
            print(f"{n:>6} " + " ".join(f"{'-':>10}" for _ in solvers) + f" {tb:>10.1f} {'-':>11} {'-':>9}", flush=True)
        n *= 2


if __name__ == "__main__":
    main()
