"""Throughput of a batch of 5-link pendulum rollouts on one device and sharded over all devices (``dc.shard``).

Forward (the final states) and gradient (of the mean final tip height with respect to every open-loop torque), float32
and float64, backend ``PointMajor()`` with ``SeedQuantum()`` (``--integrator rk4``, ``--backend default`` for the
others), one torque sequence per copy. Each program is compiled for the batch on the first device and for the batch
sharded over ``jax.devices()``; both are timed in interleaved rounds (median). "cores busy" is the process CPU time
over the wall time of a call: XLA may use more than one core for a one-device program.

    XLA_FLAGS=--xla_force_host_platform_device_count=2 python benchmarks/bench_sharding.py [--quick]

The script opts in to ``dc.set_xla_cpu_flags()`` (unless ``--no-xla-flags``); the device count is the caller's
``XLA_FLAGS`` (CPU host devices) or the accelerators present.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--quick", action="store_true", help="batch 512 x 200 steps, 3 rounds")
ap.add_argument("--batch", type=int, default=None, help="copies (default 4096; --quick 512)")
ap.add_argument("--steps", type=int, default=None, help="steps per rollout (default 1000; --quick 200)")
ap.add_argument("--rounds", type=int, default=None, help="interleaved timing rounds (default 5; --quick 3)")
ap.add_argument("--integrator", choices=["seedquantum", "rk4"], default="seedquantum")
ap.add_argument("--backend", choices=["pointmajor", "default"], default="pointmajor")
ap.add_argument("--no-check", action="store_true", help="rollout(..., check=False): no run-time checks")
ap.add_argument("--no-xla-flags", action="store_true", help="JAX's default XLA CPU flags")
ARGS = ap.parse_args()
B = ARGS.batch or (512 if ARGS.quick else 4096)
T = ARGS.steps or (200 if ARGS.quick else 1000)
ROUNDS = ARGS.rounds or (3 if ARGS.quick else 5)

import diffchain as dc  # noqa: E402

if not ARGS.no_xla_flags:
    dc.set_xla_cpu_flags()  # before JAX creates its backend

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import jaxlib  # noqa: E402
import numpy as np  # noqa: E402

from benchutil import cpu_description, md_table  # noqa: E402

jax.config.update("jax_enable_x64", True)  # every array below has an explicit dtype
N_LINKS, DT = 5, 1e-3
INTEGRATOR = {"seedquantum": dc.SeedQuantum(), "rk4": dc.RK4()}[ARGS.integrator]
BACKEND = dc.PointMajor() if ARGS.backend == "pointmajor" else None


def programs(dtype):
    """(chain, starts, torques) in ``dtype`` and the two programs of (starts, torques)."""
    chain = jax.tree.map(lambda a: a.astype(dtype) if isinstance(a, jax.Array) and jnp.issubdtype(a.dtype, jnp.floating)
                         else a, dc.pendulum(N_LINKS))
    rng = np.random.default_rng(0)
    thetas = jnp.asarray(rng.uniform(-1.0, 1.0, (B, N_LINKS)), dtype)
    starts = jax.vmap(lambda th: dc.from_joint_angles(chain, th))(thetas)
    taus = jnp.asarray(0.1 * rng.standard_normal((B, T, chain.n)), dtype)

    def finals(starts, taus):
        return jax.vmap(lambda s, u: dc.rollout(chain, s, dc.Control(tau=u), DT,
                                                integrator=INTEGRATOR, backend=BACKEND, check=not ARGS.no_check)[0])(
            starts, taus)

    def forward(starts, taus):
        return finals(starts, taus).x

    def gradient(starts, taus):
        return jax.grad(lambda u: jnp.mean(finals(starts, u).x[:, -1, 1]))(taus)

    return (starts, taus), {"forward": forward, "gradient": gradient}


def timed(compiled, args):
    """(wall seconds, process CPU seconds) of one call."""
    w, c = time.perf_counter(), time.process_time()
    jax.block_until_ready(compiled(*args))
    return time.perf_counter() - w, time.process_time() - c


def main():
    devices = jax.devices()
    load_start = os.getloadavg()
    rows = []
    for dtype in (jnp.float32, jnp.float64):
        args, progs = programs(dtype)
        placed = {1: jax.device_put(args, devices[0]), len(devices): dc.shard(args)}
        for name, fn in progs.items():
            compiled, compile_s = {}, {}
            for k, a in placed.items():
                t0 = time.perf_counter()
                compiled[k] = jax.jit(fn).lower(*a).compile()
                compile_s[k] = time.perf_counter() - t0
                out = compiled[k](*a)
                assert len(out.sharding.device_set) == k, out.sharding
            ref, out = (np.asarray(compiled[k](*placed[k])) for k in placed)
            rel = float(np.max(np.abs(ref - out)) / np.max(np.abs(ref)))
            samples = {k: [] for k in placed}
            for _ in range(ROUNDS):  # interleaved: a change of load affects both alike
                for k in placed:
                    samples[k].append(timed(compiled[k], placed[k]))
            wall = {k: statistics.median(s[0] for s in v) for k, v in samples.items()}
            busy = {k: statistics.median(s[1] / s[0] for s in v) for k, v in samples.items()}
            one, many = 1, len(devices)
            rows.append([name, jnp.dtype(dtype).name, f"{B} × {T}",
                         f"{B * T / wall[one]:.3g} ({busy[one]:.1f})", f"{B * T / wall[many]:.3g} ({busy[many]:.1f})",
                         f"{wall[one] / wall[many]:.2f}×", f"{compile_s[one]:.1f} / {compile_s[many]:.1f}",
                         f"{rel:.1e}"])
            print(rows[-1], flush=True)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True,
                                timeout=10).stdout.strip() or "?"
    except Exception:  # noqa: BLE001
        commit = "?"
    load_end = os.getloadavg()
    n = len(devices)
    print(f"\n### Rollouts sharded over {n} device(s): 5-link pendulum, "
          f"{'PointMajor' if BACKEND else 'default backend'} + {type(INTEGRATOR).__name__}, "
          f"open-loop torques{', check=False' if ARGS.no_check else ''}\n")
    print(f"- date: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}")
    print(f"- machine: {cpu_description()}, {os.cpu_count()} logical cores, "
          f"{len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else '?'} usable")
    print(f"- devices: {n} × {devices[0].device_kind} ({jax.default_backend()})")
    print(f"- versions: python {platform.python_version()}, jax {jax.__version__}, jaxlib {jaxlib.__version__}, "
          f"numpy {np.__version__}, diffchain {commit}")
    print(f"- XLA_FLAGS: `{os.environ.get('XLA_FLAGS', '') or '(none)'}`")
    print(f"- load average (1, 5, 15 min): start {' '.join(f'{x:.2f}' for x in load_start)}, "
          f"end {' '.join(f'{x:.2f}' for x in load_end)}\n")
    print(md_table(["program", "dtype", "B × T", "1 device: copy-steps/s (cores busy)",
                    f"{n} devices: copy-steps/s (cores busy)", "speed-up", "compile 1 / {n} dev. (s)".format(n=n),
                    "max rel. diff"], rows))


if __name__ == "__main__":
    main()
