"""Compile time of the README's user-facing programs, split into tracing, lowering and XLA compilation, float64.

    python benchmarks/compile_times.py [--xla-flags] [--out PATH]

Each program is the one a README block jits: the 3-link arm's rollout (500 steps) and the gradient of its final tip
height w.r.t. every torque, a batch of 256 rollouts, the 4-link drop's event rollout (1500 quanta) and its gradient
w.r.t. the start, the same with ``solver=ShortChain()``, and the README four-bar's rollout (500 steps). For each:
``jax.jit(f).trace(*args)`` (Python tracing), ``.lower()`` (to StableHLO) and ``.compile()`` (XLA), timed once in a
fresh process each (the same program compiled twice in one process would hit JAX's in-memory caches), then the
first call. ``--xla-flags`` runs every process with ``dc.set_xla_cpu_flags()``. The issue's goal is <= 5 s in all.

A second table: the 3-link arm's ``forward_dynamics`` and 200-step ``rollout`` called outside ``jit``, as a user
calls them at the prompt: the first call and the median of five more with new values of the same shapes (diffchain's
functions compile themselves once per signature).

A third table: the persistent compilation cache (``jax_compilation_cache_dir``) across two fresh processes, for the
rollout with ``check=True`` (the default: run-time checks are host callbacks) and ``check=False``.

Writes a markdown report to benchmarks/results/compile-times-<date>.md (``--out`` to change).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = ("rollout", "rollout_grad", "rollout_batch", "event_rollout", "event_grad", "event_rollout_short",
            "event_grad_short", "mechanism_rollout")


def build(name, check=True):
    """(f, args) of one README program (``check``: the rollout's run-time checks)."""
    import jax
    import jax.numpy as jnp

    import diffchain as dc

    arm = dc.pendulum(3, mass=[1.0, 0.8, 0.5], length=[1.0, 0.8, 0.6], k_omega=0.05)
    state = dc.from_joint_angles(arm, theta=jnp.array([-1.2, 0.4, 0.3]), theta_dot=jnp.zeros(3))
    if name == "rollout":
        return (lambda tau: dc.rollout(arm, state, dc.Control(tau=tau), 2e-3, check=check)[0].x,
                (jnp.zeros((500, 4)),))
    if name == "rollout_grad":
        tip = lambda tau: dc.rollout(arm, state, dc.Control(tau=tau), 2e-3)[0].x[-1, 1]  # noqa: E731
        return jax.grad(tip), (jnp.zeros((500, 4)),)
    if name == "rollout_batch":
        def simulate(m, l, theta0):
            chain = dc.pendulum(3, mass=m, length=l)
            return dc.rollout(chain, dc.from_joint_angles(chain, theta0), None, 1e-3, n_steps=200)[0].x[-1]

        return jax.vmap(simulate), (jnp.ones((256, 3)), jnp.ones((256, 3)), jnp.zeros((256, 3)))
    if name.startswith("event"):
        body = dc.free_chain(4, mass=1.0, length=0.4)
        limits = jnp.array([jnp.inf, 1.2, 1.2, 1.2])
        floor = dc.Events(body.n, ground=0.0, theta_min=-limits, theta_max=limits)
        start = dc.from_joint_angles(body, jnp.array([0.6, 0.8, 0.7, -0.5]), base=(0.0, 1.2), base_velocity=(1.0, -1.0))
        solver = dc.ShortChain() if name.endswith("short") else dc.Recursive()

        def run(x, v):
            return dc.event_rollout(body, floor, dc.EventState(dc.State(x, v)), None, 1e-3, n_steps=1500,
                                    solver=solver)[0].state

        if name.startswith("event_rollout"):
            return run, (start.x, start.v)
        return jax.grad(lambda v, x: jnp.sum(run(x, v).x[:, 1])), (start.v, start.x)
    if name == "mechanism_rollout":
        mb = dc.MechanismBuilder(g=9.81)
        mb.ground("O", (0.0, 0.0)), mb.ground("A", (3.0, 0.0))
        mb.point("B", (0.5, 0.9)), mb.point("C", (3.4, 2.3))
        mb.body("crank", "O", "B", mass=1.0, inertia=0.05, length=1.0)
        mb.body("coupler", "B", "C", mass=2.0, inertia=0.4, length=3.0)
        mb.body("rocker", "A", "C", mass=1.5, inertia=0.2, length=2.5)
        mb.motor("crank_motor", "ground", "crank")
        four_bar, guess = mb.build()
        fb_state, _ = dc.assemble(four_bar, guess)
        return (lambda tau: dc.rollout(four_bar, fb_state, dc.Control(tau=tau), 1e-3)[0].x,
                (jnp.full((500, 1), 0.5),))
    raise ValueError(name)


def measure(name, flags, cache_dir=None, check=True):
    """In this (fresh) process: seconds of trace, lower, compile and the first call of ``name``."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import diffchain as dc

    if flags:
        dc.set_xla_cpu_flags()
    if cache_dir:
        jax.config.update("jax_compilation_cache_dir", cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    f, args = build(name, check)
    t0 = time.perf_counter()
    traced = jax.jit(f).trace(*args)
    t1 = time.perf_counter()
    lowered = traced.lower()
    t2 = time.perf_counter()
    compiled = lowered.compile()
    t3 = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    t4 = time.perf_counter()
    return {"trace": t1 - t0, "lower": t2 - t1, "compile": t3 - t2, "first_call": t4 - t3}


def measure_eager(flags):
    """In this (fresh) process: seconds of the first and of later eager calls (new values) of forward_dynamics and of a
    200-step rollout of the README's arm."""
    import statistics

    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    import diffchain as dc

    if flags:
        dc.set_xla_cpu_flags()
    arm = dc.pendulum(3, mass=[1.0, 0.8, 0.5], length=[1.0, 0.8, 0.6], k_omega=0.05)
    calls = {"forward_dynamics": lambda s, u: dc.forward_dynamics(arm, s, u),
             "rollout, 200 steps": lambda s, u: dc.rollout(arm, s, None, 1e-3, n_steps=200)[0].x}
    out = {}
    for name, f in calls.items():
        times = []
        for k in range(6):
            state = dc.from_joint_angles(arm, jnp.array([-1.2, 0.4, 0.3]) + 0.01 * k, jnp.zeros(3))
            u = dc.Control(tau=jnp.array([0.0, 1.0, -0.5, 0.0]) * k)
            t0 = time.perf_counter()
            jax.block_until_ready(f(state, u))
            times.append(time.perf_counter() - t0)
        out[name] = {"first": times[0], "later": statistics.median(times[1:])}
    return out


def child(name, flags, cache_dir=None, check=True):
    call = f"c.measure_eager({flags})" if name == "eager" else f"c.measure({name!r}, {flags}, {cache_dir!r}, {check})"
    code = (f"import sys, json; sys.path.insert(0, {HERE!r}); import compile_times as c; "
            f"print('RESULT', json.dumps({call}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    line = [s for s in out.stdout.splitlines() if s.startswith("RESULT ")]
    if not line:
        raise RuntimeError(f"{name}: {out.stderr[-2000:]}")
    return json.loads(line[0][7:])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--xla-flags", action="store_true", help="run with dc.set_xla_cpu_flags()")
    p.add_argument("--only", default=",".join(PROGRAMS), help="comma-separated subset of " + ", ".join(PROGRAMS))
    p.add_argument("--out", default=None)
    args = p.parse_args()
    import jax

    sys.path.insert(0, HERE)
    from benchutil import cpu_description

    load = os.getloadavg()[0]
    rows = []
    print(f"{'program':22s} {'trace':>7s} {'lower':>7s} {'compile':>8s} {'total':>7s} {'1st call':>9s}", flush=True)
    for name in args.only.split(","):
        r = child(name, args.xla_flags)
        total = r["trace"] + r["lower"] + r["compile"]
        rows.append((name, r, total))
        print(f"{name:22s} {r['trace']:7.2f} {r['lower']:7.2f} {r['compile']:8.2f} {total:7.2f} {r['first_call']:9.2f}",
              flush=True)
    eager = child("eager", args.xla_flags)
    for name, r in eager.items():
        print(f"called outside jit: {name}: first call {r['first']:.2f} s, later calls {r['later'] * 1e3:.2f} ms",
              flush=True)
    cache = []
    for check in (True, False):
        with tempfile.TemporaryDirectory() as d:
            first, second = (child("rollout", args.xla_flags, d, check) for _ in range(2))
            n_files = sum(len(f) for _, _, f in os.walk(d))
        cache.append((check, first, second, n_files))
        print(f"persistent cache, rollout check={check}: compile {first['compile']:.2f} s -> {second['compile']:.2f} s "
              f"({n_files} cache files)", flush=True)

    date = datetime.date.today().isoformat()
    lines = [f"# Compile times of the README's programs ({date})", "",
             f"Machine: {cpu_description()}, {os.cpu_count()} cores, Python "
             f"{platform.python_version()}, jax {jax.__version__}; float64; XLA CPU flags: "
             f"{'dc.set_xla_cpu_flags()' if args.xla_flags else 'JAX defaults'}; load average "
             f"{load:.2f} at the start. One fresh process per program; seconds.", "",
             "| program | trace | lower | XLA compile | total | first call |", "|---|---|---|---|---|---|"]
    lines += [f"| {n} | {r['trace']:.2f} | {r['lower']:.2f} | {r['compile']:.2f} | {t:.2f} | {r['first_call']:.2f} |"
              for n, r, t in rows]
    lines += ["", "Called outside jit (new values of the same shapes after the first call):", "",
              "| call | first call, s | later calls, ms |", "|---|---|---|"]
    lines += [f"| {n} | {r['first']:.2f} | {r['later'] * 1e3:.2f} |" for n, r in eager.items()]
    lines += ["", "Persistent compilation cache, the rollout compiled in two fresh processes:", "",
              "| rollout | compile, 1st process | compile, 2nd process | cache files |", "|---|---|---|---|"]
    lines += [f"| check={c} | {a['compile']:.2f} | {b['compile']:.2f} | {k} |" for c, a, b, k in cache]
    out = args.out or os.path.join(HERE, "results", f"compile-times-{date}.md")
    with open(out, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("wrote", out)


if __name__ == "__main__":
    main()
