"""Long-run accuracy and cost of the chain integrators (the choice of the default; issue "Trustworthy by default").

    python benchmarks/integrators.py            # 10^6 steps of the 5-link pendulum (several minutes on 2 cores)
    python benchmarks/integrators.py --quick    # 10^5 steps, for development
    python benchmarks/integrators.py --only RATTLE,RK4+proj   # a subset of the candidates (names as in the table)

For each candidate, float64: the 5-link pendulum released from rest in the README's bent pose (joint angles
0.3, 0.9, -0.7, 0.5, 0.4; chaotic) at dt = 1e-3 over 10^6 steps (10^5 with --quick), a single pendulum and a 50-link
pendulum (released bent, 10 s each). Columns: max |E - E0| / (g sum m sum l) over the run, the same over its first and
its last quarter (secular growth shows as last >> first), the largest and the final rod-length error, the time of the
first non-finite state, and the cost per step: one chain, jitted, after warm-up (a scan of 10^4 steps, fastest of 3), and per
chain-step under ``vmap`` of 1024 chains for 1000 steps. All candidates step through
``integrator.step`` (the array form); for the plain integrators the lean batched form
(``dc.rollout(..., backend=dc.PointMajor())``) is listed in its own column. Writes benchmarks/results/integrators.md.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import diffchain as dc  # noqa: E402
from diffchain._simulate.projection import RATTLE, Projected  # noqa: E402

dc.set_xla_cpu_flags()
jax.config.update("jax_enable_x64", True)
sys.path.insert(0, HERE)
from benchutil import Report, cpu_description, md_table  # noqa: E402

BENT = (0.3, 0.9, -0.7, 0.5, 0.4)
CANDIDATES = {
    "SeedQuantum": dc.SeedQuantum(),  # today's default (stab_factor 5)
    "SemiImplicitEuler": dc.SemiImplicitEuler(),
    "RK4": dc.RK4(),  # stab_factor 50
    "SeedQuantum+proj": Projected(dc.SeedQuantum(stab_factor=None), iterations=1),
    "SemiImplicitEuler+proj": Projected(dc.SemiImplicitEuler(stab_factor=None), iterations=2),
    "RK4+proj": Projected(dc.RK4(stab_factor=None), iterations=1),
    "RATTLE(2)": RATTLE(iterations=2),
    "RATTLE(3)": RATTLE(iterations=3),
}
CHUNK = 1000  # steps per recorded chunk (maxima per chunk)


def bent_start(n_links):
    chain = dc.pendulum(n_links)
    return chain, dc.from_joint_angles(chain, jnp.asarray(np.resize(np.asarray(BENT), n_links)))


def run_case(chain, s0, integrator, dt, n_steps):
    """Per chunk of CHUNK steps: max |dE| / (m g L), max rod error, all finite; and the final rod error."""
    scale = chain.g * jnp.sum(chain.m) * jnp.sum(chain.l)
    E0 = dc.energy(chain, s0)
    u = dc.Control(n=chain.n, dtype=s0.x.dtype)
    chunk = min(CHUNK, n_steps)

    @jax.jit
    def go(s0):
        def inner(c, _):
            s, dE, rod, ok = c
            s = integrator.step(chain, s, u, dt, dc.Recursive())
            e = jnp.abs(dc.energy(chain, s) - E0) / scale
            r = dc.constraint_violation(chain, s)[0]
            fin = jnp.all(jnp.isfinite(s.x)) & jnp.all(jnp.isfinite(s.v))
            return (s, jnp.maximum(dE, jnp.where(fin, e, jnp.inf)), jnp.maximum(rod, jnp.where(fin, r, jnp.inf)),
                    ok & fin), None

        def outer(s, _):
            z = jnp.zeros((), s.x.dtype)
            (s, dE, rod, ok), _ = jax.lax.scan(inner, (s, z, z, jnp.array(True)), None, length=chunk)
            return s, (dE, rod, ok)

        final, per = jax.lax.scan(outer, s0, None, length=n_steps // chunk)
        return final, per

    final, (dE, rod, ok) = go(s0)
    dE, rod, ok = np.asarray(dE), np.asarray(rod), np.asarray(ok)
    q = max(1, len(dE) // 4)
    bad = np.flatnonzero(~ok)
    return {
        "max_dE": dE.max(), "first_q": dE[:q].max(), "last_q": dE[-q:].max(), "max_rod": rod.max(),
        "final_rod": float(dc.constraint_violation(chain, final)[0]) if np.all(np.isfinite(np.asarray(final.x)))
        else float("nan"),
        "nan_t": None if bad.size == 0 else (bad[0] + 1) * chunk * dt,
    }


def _timed(fn, *args, repeats=5):
    """The fastest of ``repeats`` calls after a warm-up (the machine is shared: the minimum is the least disturbed)."""
    jax.block_until_ready(fn(*args))
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        samples.append(time.perf_counter() - t0)
    return min(samples)


def cost_one(chain, s0, integrator, dt, steps=10_000):
    """Seconds per step of one chain: a jitted scan of ``steps`` steps (final state only)."""
    u = dc.Control(n=chain.n, dtype=s0.x.dtype)

    @jax.jit
    def go(chain, s0):
        return jax.lax.scan(lambda s, _: (integrator.step(chain, s, u, dt, dc.Recursive()), None), s0, None,
                            length=steps)[0]

    return _timed(go, chain, s0, repeats=3) / steps


def cost_vmap(chain, s0, integrator, dt, B=1024, steps=1000, lean=False):
    """Seconds per chain-step under vmap of B chains (starts perturbed) for ``steps`` steps: the array form of
    ``integrator.step``, or ``dc.rollout(..., backend=dc.PointMajor())`` (the lean batched form) with ``lean``."""
    theta = jnp.asarray(np.resize(np.asarray(BENT), chain.n - 1)) + 0.1 * jax.random.normal(
        jax.random.PRNGKey(0), (B, chain.n - 1))
    starts = jax.vmap(lambda th: dc.from_joint_angles(chain, th))(theta)
    u = dc.Control(n=chain.n, dtype=s0.x.dtype)

    def one(s0):
        if lean:
            return dc.rollout(chain, s0, None, dt, n_steps=steps, integrator=integrator, check=False,
                              backend=dc.PointMajor())[0]
        return jax.lax.scan(lambda s, _: (integrator.step(chain, s, u, dt, dc.Recursive()), None), s0, None,
                            length=steps)[0]

    return _timed(jax.jit(jax.vmap(one)), starts, repeats=3) / (B * steps)


def machine():
    import jaxlib
    import importlib.metadata as md
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True,
                            timeout=10).stdout.strip() or "?"
    return {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "CPU": cpu_description(detail=True),
        "cores": f"{os.cpu_count()} logical (shared machine)",
        "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "python": platform.python_version(),
        "jax / jaxlib": f"{jax.__version__} / {jaxlib.__version__} ({jax.default_backend()})",
        "equinox": md.version("equinox"),
        "numpy": np.__version__,
        "diffchain commit": commit + " (working tree as found)",
        "XLA_FLAGS (effective)": "`" + (os.environ.get("XLA_FLAGS", "") or "(none)") + "`",
    }


def _e(x):
    return "–" if x is None else ("NaN" if x != x else f"{x:.1e}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="10^5 steps of the 5-link pendulum instead of 10^6")
    p.add_argument("--only", default="", help="comma-separated candidate names")
    p.add_argument("--no-cost", action="store_true", help="skip the timings")
    p.add_argument("--out", default=os.path.join(HERE, "results", "integrators.md"))
    args = p.parse_args()
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(CANDIDATES)
    t_start = time.perf_counter()
    R = Report()
    dt = 1e-3
    N = 10**5 if args.quick else 10**6
    R.add(f"# Chain integrators over long runs — {datetime.datetime.now():%Y-%m-%d %H:%M}\n")
    R.add(md_table(["", ""], list(machine().items())))
    R.add(f"\nfloat64, dt = {dt:g}, no input (conservative: energy is a constant of the motion). dE = max |E - E0| / "
          "(g Σm Σl); *first/last ¼*: the same over the first and the last quarter of the run (secular growth: last ≫ "
          "first). Rod error: max | |x_{k+1} - x_k| - l_k |, over the run and at its end. *NaN at*: the end of the "
          "first 1000-step chunk with a non-finite state. Cost (fastest of 3 runs: the machine is shared): one chain, `jit` of a 10^4-step scan (per step); "
          "`vmap` of 1024 chains × 1000 steps (per chain-step), array form of `integrator.step`; *lean*: `vmap` of "
          "`dc.rollout(..., backend=dc.PointMajor())`, the lean batched form (plain integrators only). "
          "Targets for the default: rod error ≤ 1e-8, dE ≤ 1e-4.\n")
    cases = [(f"5-link pendulum, {N:.0e} steps ({N * dt:g} s)", 5, N, True),
             ("1-link pendulum, 10 s", 1, 10_000, False),
             ("50-link pendulum, 10 s", 50, 10_000, False)]
    for title, n_links, steps, with_cost in cases:
        chain, s0 = bent_start(n_links)
        R.add(f"\n## {title}\n")
        header = ["integrator", "dE max", "first ¼", "last ¼", "rod max", "rod final", "NaN at"]
        if with_cost and not args.no_cost:
            header += ["µs / step (1 chain)", "µs / chain-step (vmap 1024)", "lean vmap"]
        rows = []
        for name in names:
            integ = CANDIDATES[name]
            t0 = time.perf_counter()
            r = run_case(chain, s0, integ, dt, steps)
            row = [name, _e(r["max_dE"]), _e(r["first_q"]), _e(r["last_q"]), _e(r["max_rod"]), _e(r["final_rod"]),
                   "–" if r["nan_t"] is None else f"{r['nan_t']:g} s"]
            if with_cost and not args.no_cost:
                lean = "–" if isinstance(integ, Projected) or isinstance(integ, RATTLE) else \
                    f"{cost_vmap(chain, s0, integ, dt, lean=True) * 1e6:.2f}"
                row += [f"{cost_one(chain, s0, integ, dt) * 1e6:.1f}", f"{cost_vmap(chain, s0, integ, dt) * 1e6:.2f}",
                        lean]
            rows.append(row)
            print(f"  {name}: {time.perf_counter() - t0:.0f} s  {row}", flush=True)
        R.add(md_table(header, rows))
    R.save(args.out, t_start)


if __name__ == "__main__":
    main()
