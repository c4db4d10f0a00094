"""diffchain performance benchmark: forward dynamics vs n, batched rollout throughput vs MuJoCo C / MJX, reverse-gradient
cost, compile time.

    python benchmarks/bench.py                       # all sections (< 10 min on a 2-core machine)
    python benchmarks/bench.py --only fd,throughput  # a subset: fd | throughput | grad | compile
    python benchmarks/bench.py --no-xla-flags        # JAX's default XLA CPU flags (for an A/B of the flags)

Prints a report and writes it as markdown to benchmarks/results/bench-<YYYY-MM-DD>.md (``--out`` to change).

Method. Every timed function is jitted and compiled first, run once more as a warm-up, then timed ``--repeats`` times
(default 7) with ``jax.block_until_ready``; the tables give the median (and the minimum in brackets where useful). Calls
shorter than ~10 ms are timed in groups so that one sample lasts >= 10 ms. The machine is shared: other processes may run
at the same time, so the load average at the start and end is printed; single numbers can be off by tens of per cent,
the medians over several repeats are the ones to read.

Threads. ``OPENBLAS_NUM_THREADS=1`` is set (unless already set): the KKT solver's LAPACK calls otherwise fight XLA's
thread pool on 2 cores and become erratic (n = 128: 72 ms instead of 7.5 ms).

XLA flags. The script opts in to ``diffchain.set_xla_cpu_flags()`` before JAX creates its backend (unless
``--no-xla-flags``): measured, the library's batched rollout runs ~1.9x faster with them on jaxlib 0.10.2, because the
YNN/XNNPACK path handles the chain's batched 2x2 algebra badly. The effective value is printed in the report. The same
flags make MJX ~10x faster on this machine (measured 2.4e4 -> 3.4e5 steps/s), so MJX is measured with them (fair
comparison, same process) and, for reference, once more in a subprocess with JAX's default flags.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time


SECTIONS = ("fd", "throughput", "grad", "compile")
HERE = os.path.dirname(os.path.abspath(__file__))


def _parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default=",".join(SECTIONS),
                   help="comma-separated sections to run: " + " | ".join(SECTIONS) + " (default: all)")
    p.add_argument("--repeats", type=int, default=7, help="timed repeats per measurement (median reported), >= 5")
    p.add_argument("--no-xla-flags", action="store_true",
                   help="do not set diffchain's recommended XLA CPU flags (JAX's defaults)")
    p.add_argument("--out", default=None, help="markdown output path (default benchmarks/results/bench-<date>.md)")
    p.add_argument("--batch", type=int, default=4096, help="throughput: diffchain batch size")
    p.add_argument("--steps", type=int, default=1000, help="throughput: steps per rollout")
    p.add_argument("--mjx-batch", type=int, default=1024)
    p.add_argument("--mjx-steps", type=int, default=200)
    p.add_argument("--mujoco-copies", type=int, default=1000)
    p.add_argument("--no-2dev", action="store_true",
                   help="throughput: skip the extra row that shards the batch over 2 host devices (both cores)")
    p.add_argument("--no-mjx-default", action="store_true",
                   help="throughput: skip the extra MJX run with JAX's default XLA flags (a subprocess, ~30 s)")
    p.add_argument("--_worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    args.only = [s.strip() for s in args.only.split(",") if s.strip()]
    bad = [s for s in args.only if s not in SECTIONS]
    if bad:
        p.error(f"unknown section(s) {bad}; choose from {SECTIONS}")
    args.repeats = max(args.repeats, 5)
    return args


ARGS = _parse()
# LAPACK (jnp.linalg.solve in the KKT solver) runs on jaxlib's bundled OpenBLAS; with its own threads competing with
# XLA's thread pool on this 2-core machine, KKT calls for n >= 128 became 5-10x slower and erratic (measured: n = 128
# 72 ms vs 7.5 ms, n = 256 212 ms vs 53 ms). One OpenBLAS thread removes that.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import diffchain as dc  # noqa: E402

if not (ARGS.no_xla_flags or ARGS._worker == "mjx-default"):
    dc.set_xla_cpu_flags()  # before JAX creates its backend
jax.config.update("jax_enable_x64", True)  # every array below gets an explicit dtype; float32 runs stay float32

sys.path.insert(0, HERE)
from benchutil import Report, cpu_description, fmt_t, md_table  # noqa: E402
F32, F64 = jnp.float32, jnp.float64


# ------------------------------------------------------------------------------------------------------------ timing

def _block(x):
    return jax.block_until_ready(x)


def time_fn(fn, *args, repeats=None, min_sample=0.01):
    """Median and min wall time of ``fn(*args)`` (already compiled): warm-up, then ``repeats`` samples; short calls are
    grouped (k calls per sample, k chosen so that a sample lasts >= ``min_sample`` s) and divided by k."""
    repeats = repeats or ARGS.repeats
    t0 = time.perf_counter()
    _block(fn(*args))  # warm-up
    once = time.perf_counter() - t0
    k = 1 if once >= min_sample else int(min(1000, max(1, min_sample / max(once, 1e-7))))
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(k):
            out = fn(*args)
        _block(out)
        samples.append((time.perf_counter() - t0) / k)
    return statistics.median(samples), min(samples)


def compile_fn(f, *args):
    """jit-compile ``f`` for ``args``; returns (compiled, seconds)."""
    t0 = time.perf_counter()
    c = jax.jit(f).lower(*args).compile()
    return c, time.perf_counter() - t0


def cast_chain(chain, dtype):
    """The chain with its floating-point arrays in ``dtype`` (boolean masks etc. untouched)."""
    return jax.tree_util.tree_map(
        lambda a: a.astype(dtype) if isinstance(a, jax.Array) and jnp.issubdtype(a.dtype, jnp.floating) else a, chain)


def zero_controls(n, T, dtype):
    return jax.tree_util.tree_map(lambda a: jnp.zeros((T,) + a.shape, dtype), dc.Control(n=n, dtype=dtype))


def has_f64(compiled):
    try:
        return "f64[" in compiled.as_text()
    except Exception:  # noqa: BLE001
        return None


R = Report()


# ------------------------------------------------------------------------------------------------------- machine facts

def machine_facts():
    import mujoco
    try:
        import importlib.metadata as md
        mjx_v = md.version("mujoco-mjx")
        eqx_v = md.version("equinox")
    except Exception:  # noqa: BLE001
        mjx_v = eqx_v = "?"
    import jaxlib
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True,
                                timeout=10).stdout.strip() or "?"
    except Exception:  # noqa: BLE001
        commit = "?"
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else "?"
    return {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "CPU": cpu_description(detail=True),
        "cores": f"{os.cpu_count()} logical, {affinity} usable by this process (shared machine)",
        "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "python": platform.python_version(),
        "jax / jaxlib": f"{jax.__version__} / {jaxlib.__version__} ({jax.default_backend()}, "
                        f"{len(jax.devices())} device(s))",
        "equinox": eqx_v,
        "mujoco / mujoco-mjx": f"{mujoco.__version__} / {mjx_v}",
        "numpy": np.__version__,
        "diffchain commit": commit + " (working tree as found)",
        "XLA_FLAGS (effective)": "`" + (os.environ.get("XLA_FLAGS", "") or "(none)") + "`",
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "(unset)"),
    }


# ----------------------------------------------------------------------------------------------------- section 1: fd

FD_NS = (8, 16, 32, 64, 128, 256, 512, 1024)


def fd_case(n, solver, rng):
    chain = dc.pendulum(n - 1)
    chain = cast_chain(chain, F64)
    th = rng.uniform(-1.0, 1.0, n - 1)
    thd = rng.uniform(-1.0, 1.0, n - 1)
    state = dc.from_joint_angles(chain, th, thd)
    u = dc.Control(tau=jnp.asarray(rng.uniform(-1, 1, n), F64))

    def fd(ch, s, u):
        return dc.forward_dynamics(ch, s, u, solver=solver)

    c, t_compile = compile_fn(fd, chain, state, u)
    a = c(chain, state, u)
    assert a.dtype == F64 and a.shape == (n, 2)
    t_call, t_call_min = time_fn(c, chain, state, u)
    # the same work K times inside one call (lax.map over K different states): the Python/jit dispatch is amortised
    K = int(np.clip(round(0.02 / max(t_call, 1e-6)), 1, 256))
    if K > 1:
        thK = rng.uniform(-1.0, 1.0, (K, n - 1))
        states = jax.vmap(lambda t: dc.from_joint_angles(chain, t, t))(jnp.asarray(thK))
        cm, _ = compile_fn(lambda ch, S, u: jax.lax.map(lambda s: fd(ch, s, u), S), chain, states, u)
        t_loop, _ = time_fn(cm, chain, states, u)
        t_loop /= K
    else:
        t_loop = t_call
    return {"n": n, "compile": t_compile, "call": t_call, "call_min": t_call_min, "loop": t_loop, "K": K}


def section_fd():
    R.add("## 1. Forward dynamics, one state, float64 (pendulum with n points = n-1 links)\n")
    R.add("`jit(forward_dynamics)` on a single state (no batch), random joint angles/rates/torques. *per call* = wall time "
          "of one jitted call including JAX dispatch (median, min in brackets); *in loop* = per state inside "
          "`lax.map` over K states in one call (dispatch amortised). KKT is dense O(n³) and is stopped once one call "
          "takes > 0.25 s (the next n would take > 2 s).\n")
    rng = np.random.default_rng(0)
    res = {"Recursive": [], "KKT": []}
    for name, solver in (("Recursive", dc.Recursive()), ("KKT", dc.KKT())):
        for n in FD_NS:
            r = fd_case(n, solver, rng)
            res[name].append(r)
            print(f"  {name:9s} n={n:5d}: call {fmt_t(r['call'])}  loop {fmt_t(r['loop'])}  "
                  f"(compile {r['compile']:.2f} s)", flush=True)
            if name == "KKT" and r["call"] > 0.25:
                break
    rows = []
    kkt = {r["n"]: r for r in res["KKT"]}
    for r in res["Recursive"]:
        k = kkt.get(r["n"])
        rows.append([r["n"], f"{fmt_t(r['call'])} ({fmt_t(r['call_min'])})", fmt_t(r["loop"]),
                     f"{r['loop'] / r['n'] * 1e9:.0f} ns",
                     f"{fmt_t(k['call'])} ({fmt_t(k['call_min'])})" if k else "not run",
                     fmt_t(k["loop"]) if k else "–",
                     f"{k['call'] / r['call']:.1f}×" if k else "–"])
    R.add(md_table(["n", "Recursive per call", "Recursive in loop", "Recursive per point (loop)",
                    "KKT per call", "KKT in loop", "KKT/Rec (call)"], rows))
    rec = {r["n"]: r for r in res["Recursive"]}
    if 32 in rec and 1024 in rec:
        rl = rec[1024]["loop"] / rec[32]["loop"]
        rc = rec[1024]["call"] / rec[32]["call"]
        ok = [("meets" if q <= 40 else "MISSES") + " " + w for q, w in ((rc, "per call"), (rl, "in loop"))]
        R.add(f"\nRecursion t(1024)/t(32) = **{rc:.1f}** per call (**{rl:.1f}** in loop); linear would be 32, target "
              f"≤ 40: {', '.join(ok)}. Per-point cost at n = 1024: {rec[1024]['call'] / 1024 * 1e9:.0f} ns per call, "
              f"{rec[1024]['loop'] / 1024 * 1e9:.0f} ns in loop. Both sweeps are `lax.scan`s over the points (from "
              "n = 64 scans over blocks of 32 points, `recursive.scan_points`), so a single state costs ~n sequential "
              "loop iterations of a few tiny kernels each: the per-point cost is the XLA CPU while-loop/kernel-launch "
              "overhead, not arithmetic.")
    if len(res["KKT"]) >= 2:
        a, b = res["KKT"][-2], res["KKT"][-1]
        R.add(f"KKT growth from n = {a['n']} to {b['n']}: ×{b['call'] / a['call']:.1f} per call "
              f"(dense O(n³) would be ×8 per doubling once the LU solve dominates).")
    R.add("")
    return res


# --------------------------------------------------------------------------------------------- section 2: throughput

N_LINKS = 5
DT = 1e-3


def dc_throughput(dtype, B, T, integrator, devices=1, seed=0):
    chain = cast_chain(dc.pendulum(N_LINKS, mass=1.0, length=1.0), dtype)
    n = chain.n
    th = jnp.asarray(np.random.default_rng(seed).uniform(-np.pi, np.pi, (B, N_LINKS)), dtype)
    s0 = jax.vmap(lambda t: dc.from_joint_angles(chain, t))(th)
    ctrls = zero_controls(n, T, dtype)
    if devices > 1:
        from jax.sharding import Mesh, NamedSharding, PartitionSpec
        mesh = Mesh(np.array(jax.devices()[:devices]), ("batch",))
        s0 = jax.device_put(s0, NamedSharding(mesh, PartitionSpec("batch")))

    def run(ch, s, u):
        return jax.vmap(lambda si: dc.rollout(ch, si, u, DT, integrator=integrator, backend=dc.PointMajor())[0])(s)

    c, t_compile = compile_fn(run, chain, s0, ctrls)
    final = _block(c(chain, s0, ctrls))
    assert final.x.dtype == dtype, final.x.dtype
    t_med, t_min = time_fn(c, chain, s0, ctrls)
    pos_err, _ = jax.vmap(lambda s: dc.constraint_violation(chain, s))(final)
    return {"steps_per_s": B * T / t_med, "steps_per_s_best": B * T / t_min, "seconds": t_med, "compile": t_compile,
            "B": B, "T": T, "rod_err": float(jnp.max(pos_err)), "finite": bool(jnp.all(jnp.isfinite(final.x))),
            "f64_in_hlo": has_f64(c) if dtype == F32 else None}


def _worker(mode):
    """Subprocess entry points (they need other XLA flags than this process); print one JSON line."""
    if mode == "2dev":  # float32 SeedQuantum throughput, batch sharded over 2 host devices
        r = dc_throughput(F32, ARGS.batch, ARGS.steps, dc.SeedQuantum(), devices=2)
    elif mode == "mjx-default":  # MJX with JAX's default XLA CPU flags
        from diffchain._bench import peers
        jax.config.update("jax_enable_x64", False)
        r = peers.mjx_rollout_throughput([1.0] * (N_LINKS + 1), [1.0] * N_LINKS, n_steps=max(ARGS.mjx_steps // 4, 10),
                                         batch=ARGS.mjx_batch, dt=DT)
        r["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "")
    else:
        raise ValueError(mode)
    print("RESULT " + json.dumps(r))


def run_worker(mode):
    env = dict(os.environ)
    cmd = [sys.executable, os.path.abspath(__file__), "--_worker", mode, "--batch", str(ARGS.batch),
           "--steps", str(ARGS.steps), "--repeats", str(ARGS.repeats), "--mjx-batch", str(ARGS.mjx_batch),
           "--mjx-steps", str(ARGS.mjx_steps)]
    if mode == "2dev":
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
        if ARGS.no_xla_flags:
            cmd.append("--no-xla-flags")
    else:  # JAX's defaults: drop the benchmark's and diffchain's XLA CPU flags
        drop = dc.xla_cpu_flags()
        env["XLA_FLAGS"] = " ".join(f for f in env.get("XLA_FLAGS", "").split() if f not in drop)
        cmd.append("--no-xla-flags")
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    except subprocess.TimeoutExpired:
        print(f"  worker {mode} timed out")
        return None
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    print(f"  worker {mode} failed:", out.stderr[-2000:])
    return None


def section_throughput():
    from diffchain._bench import peers

    R.add(f"## 2. Batched rollout throughput, {N_LINKS}-link pendulum (n = {N_LINKS + 1} points)\n")
    R.add(f"Masses 1, lengths 1, dt = {DT:g}, zero torque, initial joint angles uniform in [-π, π], velocities 0. "
          "copy-steps/s = copies × steps / wall time of the timed run (median of the repeats; best in brackets). "
          "diffchain: `jit(vmap(rollout))` (final state only returned), Recursive solver, drift correction on "
          "(the integrator's default, δε = 5 dt). MuJoCo: hinge joints, contacts off (diffchain/_bench/peers.py).\n")
    masses, lengths = [1.0] * (N_LINKS + 1), [1.0] * N_LINKS
    B, T = ARGS.batch, ARGS.steps
    rows, res = [], {}
    for key, dtype, integ, label in (("dc32", F32, dc.SeedQuantum(), "SeedQuantum (x += v dt + a dt²/2, v += a dt)"),
                                     ("dc64", F64, dc.SeedQuantum(), "SeedQuantum"),
                                     ("dc32_sie", F32, dc.SemiImplicitEuler(), "SemiImplicitEuler (= MuJoCo's Euler)")):
        r = dc_throughput(dtype, B, T, integ)
        res[key] = r
        print(f"  diffchain {key}: {r['steps_per_s']:.3e} copy-steps/s ({r['seconds']:.3f} s per run, "
              f"compile {r['compile']:.2f} s, max rod-length error {r['rod_err']:.1e})", flush=True)
        rows.append([f"diffchain {'float32' if dtype == F32 else 'float64'}", label, f"{B} × {T}",
                     f"{r['steps_per_s']:.3g} ({r['steps_per_s_best']:.3g})", f"{r['compile']:.2f} s",
                     f"{r['rod_err']:.1e}"])
    if not ARGS.no_2dev:
        r = run_worker("2dev")
        if r:
            res["dc32_2dev"] = r
            print(f"  diffchain f32, 2 devices: {r['steps_per_s']:.3e} copy-steps/s", flush=True)
            rows.append(["diffchain float32, **2 host devices** (batch sharded, both cores)", "SeedQuantum",
                         f"{B} × {T}", f"{r['steps_per_s']:.3g} ({r['steps_per_s_best']:.3g})",
                         f"{r['compile']:.2f} s", f"{r['rod_err']:.1e}"])
    mj = []
    for i in range(3):
        r = peers.mujoco_rollout_throughput(masses, lengths, n_steps=T, n_copies=ARGS.mujoco_copies, dt=DT, seed=i)
        mj.append(r)
        print(f"  MuJoCo C run {i}: {r['steps_per_s']:.3e} steps/s ({r['seconds']:.2f} s)", flush=True)
    mj_rate = statistics.median(r["steps_per_s"] for r in mj)
    res["mujoco"] = mj_rate
    rows.append(["MuJoCo C, 1 thread (float64)", "Euler (semi-implicit: v += a dt, x += v dt)",
                 f"{ARGS.mujoco_copies} × {T}", f"{mj_rate:.3g} ({max(r['steps_per_s'] for r in mj):.3g})",
                 "–", "0 (joint coords)"])
    jax.config.update("jax_enable_x64", False)  # MJX in its usual float32
    try:
        r = peers.mjx_rollout_throughput(masses, lengths, n_steps=ARGS.mjx_steps, batch=ARGS.mjx_batch, dt=DT)
    finally:
        jax.config.update("jax_enable_x64", True)
    res["mjx"] = r["steps_per_s"]
    print(f"  MJX: {r['steps_per_s']:.3e} steps/s ({r['seconds']:.2f} s, compile {r['compile_s']:.1f} s)", flush=True)
    rows.append(["MJX (jax impl, float32), jit(vmap(scan(step))), same XLA flags as diffchain", "Euler",
                 f"{r['batch']} × {r['n_steps']}", f"{r['steps_per_s']:.3g} (1 run)", f"{r['compile_s']:.1f} s",
                 "0 (joint coords)"])
    if not ARGS.no_mjx_default:
        r = run_worker("mjx-default")
        if r:
            res["mjx_default"] = r["steps_per_s"]
            print(f"  MJX, JAX default XLA flags: {r['steps_per_s']:.3e} steps/s ({r['seconds']:.2f} s, "
                  f"compile {r['compile_s']:.1f} s)", flush=True)
            rows.append(["MJX as above, **JAX's default XLA flags** (`" + (r["XLA_FLAGS"] or "none") + "`)", "Euler",
                         f"{r['batch']} × {r['n_steps']}", f"{r['steps_per_s']:.3g} (1 run)",
                         f"{r['compile_s']:.1f} s", "0 (joint coords)"])
    R.add(md_table(["engine", "integrator", "batch × steps", "copy-steps/s", "compile", "max rod-length error at end"],
                   rows))
    d32 = res["dc32"]["steps_per_s"]
    R.add("")
    R.add(md_table(["ratio", "value", "target"], [
        ["diffchain f32 / MuJoCo C (1 thread)", f"**{d32 / mj_rate:.1f}×**", "≥ 10×"],
        ["diffchain f64 / MuJoCo C (1 thread)", f"{res['dc64']['steps_per_s'] / mj_rate:.1f}×", "–"],
        ["diffchain f32 SemiImplicitEuler / MuJoCo C Euler (same integrator class)",
         f"{res['dc32_sie']['steps_per_s'] / mj_rate:.1f}×", "–"],
        ["diffchain f32 / MJX (same XLA flags)", f"**{d32 / res['mjx']:.1f}×**", "≥ 100×"],
    ] + ([["diffchain f32 / MJX at JAX's default XLA flags", f"{d32 / res['mjx_default']:.0f}×", "–"]]
         if "mjx_default" in res else []) + [
    ] + ([["diffchain f32 on 2 devices / MuJoCo C (1 thread) — not like for like",
           f"{res['dc32_2dev']['steps_per_s'] / mj_rate:.1f}×", "–"]] if "dc32_2dev" in res else [])))
    if res["dc32"].get("f64_in_hlo"):
        R.add("\nNote: the float32 program contains f64 operations (a promotion inside the library).")
    R.add("\nThe 1-device diffchain program runs essentially on one core (its wall time ≈ its CPU time), so the "
          "1-device ratios compare one core with one core. MuJoCo runs with the same dt; its state stays exactly on "
          "the constraint manifold (joint coordinates), diffchain's float32 rod-length error is in the last column.\n")
    return res


# --------------------------------------------------------------------------------------------------- section 3: grad

def section_grad():
    R.add(f"## 3. Reverse-mode gradient cost, {N_LINKS}-link pendulum, 1000 steps, float64\n")
    R.add("loss = Σ x_final² + Σ v_final² after `rollout` (SeedQuantum, dt = 1e-3) from a random state under a random "
          "torque sequence tau (T, n). *forward* = jit(loss); *grad* = jit(grad(loss)) w.r.t. the initial state and "
          "the whole torque sequence (returns the loss's cotangents, i.e. the forward pass is included). One copy: "
          "`checkpoint=k` recomputes the forward pass in segments of k steps (k = 1: only the state at each step is "
          "stored, each step is recomputed once in the reverse pass); without it (*none*) the rollout still stores "
          "only each step's state and KKT solution and recomputes the elementwise terms around the solve. Batch: the "
          "loss summed over a vmapped batch of (state, tau); *+ chain* also differentiates with respect to the "
          "chain's arrays (masses, lengths, gravity, damping and drag coefficients); *policy*: the torques are a "
          "linear feedback tanh(G (x, v)) of the state instead (a (n, 4n) gain G shared by the batch), the gradient "
          "w.r.t. G, against the forward pass of the same policy rollouts; *cart chain*: the same number of points, "
          "the first on a rail (`cart_chain`, a slider), against its own forward pass. The cases of a row and their forward "
          "passes are timed round-robin; the ratio is the median of the per-round ratios.\n")
    T = 1000
    chain = cast_chain(dc.pendulum(N_LINKS), F64)
    n = chain.n
    rng = np.random.default_rng(1)

    def make(B):
        th = jnp.asarray(rng.uniform(-np.pi, np.pi, (B, N_LINKS)), F64)
        thd = jnp.asarray(rng.uniform(-1, 1, (B, N_LINKS)), F64)
        s0 = jax.vmap(lambda a, b: dc.from_joint_angles(chain, a, b))(th, thd)
        tau = jnp.asarray(rng.uniform(-0.5, 0.5, (B, T, n)), F64)
        return s0, tau

    def loss1(ch, s0, tau, checkpoint=None, roll=dc.rollout):
        u = dc.Control(tau=tau, F=jnp.zeros((T, n, 2), F64), a_w=jnp.zeros((T, n, 2), F64))
        final, _ = roll(ch, s0, u, DT, checkpoint=checkpoint)
        return jnp.sum(final.x ** 2) + jnp.sum(final.v ** 2)

    def policy_loss1(ch, s0, G, roll=dc.rollout):
        policy = lambda s: dc.Control(tau=jnp.tanh(G @ jnp.concatenate([s.x.ravel(), s.v.ravel()])))  # noqa: E731
        final, _ = roll(ch, s0, policy, DT, n_steps=T)
        return jnp.sum(final.x ** 2) + jnp.sum(final.v ** 2)

    def array_form(ch, s0, u, dt, checkpoint=None, n_steps=None):  # the vmap of the one-chain program
        from diffchain._simulate.rollout import _rollout
        return _rollout(ch, s0, u, dt, n_steps, dc.Recursive(), dc.SeedQuantum(), checkpoint)

    def timed(fns, ratios):
        """Round-robin samples of the compiled ``fns`` {key: (f, args)}; medians and the per-round ratios
        {key: (numerator, denominator)}."""
        samples = {key: [] for key in fns}
        for f, a in fns.values():
            _block(f(*a))
        for _ in range(ARGS.repeats):
            for key, (f, a) in fns.items():
                t0 = time.perf_counter()
                _block(f(*a))
                samples[key].append(time.perf_counter() - t0)
        med = {key: statistics.median(v) for key, v in samples.items()}
        return med, {key: statistics.median(x / y for x, y in zip(samples[a], samples[b]))
                     for key, (a, b) in ratios.items()}

    rows, res = [], {}
    s0, tau = make(1)
    s0, tau = jax.tree_util.tree_map(lambda a: a[0], s0), tau[0]
    fwd, c_f = compile_fn(loss1, chain, s0, tau)
    fns, compile_s = {"fwd": (fwd, (chain, s0, tau))}, {}
    for ck in (None, 1, 50):
        g, compile_s[ck] = compile_fn(jax.grad(lambda s, t, ch: loss1(ch, s, t, ck), argnums=(0, 1)), s0, tau, chain)
        fns[ck] = (g, (s0, tau, chain))
    med, ratio = timed(fns, {ck: (ck, "fwd") for ck in (None, 1, 50)})
    res[1] = {"fwd": med["fwd"], "fwd_compile": c_f}
    for ck in (None, 1, 50):
        res[1][ck] = (med[ck], compile_s[ck], ratio[ck], None)
        print(f"  batch 1: forward {fmt_t(med['fwd'])}, grad(checkpoint={ck}) {fmt_t(med[ck])} -> {ratio[ck]:.2f}x",
              flush=True)
        rows.append([1, "none" if ck is None else f"{ck} steps", fmt_t(med["fwd"]), fmt_t(med[ck]),
                     f"**{ratio[ck]:.2f}**", "–", f"{c_f:.1f} s / {compile_s[ck]:.1f} s"])

    B = 256
    s0, tau = make(B)
    G = jnp.asarray(rng.normal(size=(n, 4 * n)) * 0.1, F64)
    cart = cast_chain(dc.cart_chain(N_LINKS), F64)  # as many points, the first on a rail (a slider)
    s_cart = jax.vmap(lambda th: dc.from_joint_angles(cart, th))(jnp.asarray(rng.uniform(-1, 1, (B, n - 1)), F64))
    batched = lambda f, **k: lambda ch, s, t: jnp.sum(jax.vmap(lambda a, b: f(ch, a, b, **k))(s, t))  # noqa: E731
    shared = lambda f, **k: lambda ch, s, G: jnp.sum(jax.vmap(lambda a: f(ch, a, G, **k))(s))  # noqa: E731
    fns, compile_s = {}, {}
    pm = dict(roll=lambda *a, **k: dc.rollout(*a, backend=dc.PointMajor(), **k))  # the batch: point-major backend
    for key, f, args in (("fwd", batched(loss1, **pm), (chain, s0, tau)),
                         ("fwd_array", batched(loss1, roll=array_form), (chain, s0, tau)),
                         ("fwd_policy", shared(policy_loss1, **pm), (chain, s0, G)),
                         ("fwd_cart", batched(loss1, **pm), (cart, s_cart, tau))):
        fns[key] = (compile_fn(f, *args)[0], args)
    for key, f, args, argnums in (("inputs", batched(loss1, **pm), (chain, s0, tau), (1, 2)),
                                  ("all", batched(loss1, **pm), (chain, s0, tau), (0, 1, 2)),
                                  ("policy", shared(policy_loss1, **pm), (chain, s0, G), 2),
                                  ("cart", batched(loss1, **pm), (cart, s_cart, tau), (1, 2))):
        g, compile_s[key] = compile_fn(jax.grad(f, argnums=argnums, allow_int=True), *args)
        fns[key] = (g, args)
    med, ratio = timed(fns, {"inputs": ("inputs", "fwd"), "all": ("all", "fwd"), "policy": ("policy", "fwd_policy"),
                             "cart": ("cart", "fwd_cart"), "inputs_array": ("inputs", "fwd_array")})
    res[B] = {k: med[k] for k in ("fwd", "fwd_array", "fwd_policy", "fwd_cart")}
    for key, label, f in (("inputs", "state, tau", "fwd"), ("all", "+ chain", "fwd"), ("policy", "policy: G", "fwd_policy"),
                          ("cart", "cart chain (slider): state, tau", "fwd_cart")):
        res[B][key] = (med[key], compile_s[key], ratio[key])
        print(f"  batch {B} ({label}): forward {fmt_t(med[f])}, grad {fmt_t(med[key])} -> {ratio[key]:.2f}x", flush=True)
        rows.append([B, label, fmt_t(med[f]), fmt_t(med[key]), f"**{ratio[key]:.2f}**",
                     f"{ratio['inputs_array']:.2f} ({fmt_t(med['fwd_array'])})" if key == "inputs" else "–",
                     f"– / {compile_s[key]:.1f} s"])
    R.add(md_table(["batch", "checkpoint (one copy) / differentiated (batch)", "forward", "forward + reverse (grad)",
                    "grad / forward (target ≤ 3)", "grad / array-form forward", "compile fwd / grad"], rows))
    R.add("For a batch both passes are those of `backend=dc.PointMajor()` (`diffchain._xla.point_major`): the forward pass, and the reverse pass "
          "(`lean.lean_rollout_vjp`: the Thomas solve differentiated implicitly, only the cotangents asked for; the "
          "forward pass keeps the state at the start of each block of 10 steps, and the reverse pass recomputes each "
          "block in cache; with a policy, each reverse step pulls the inputs' cotangent back through the policy's "
          "vjp). The second ratio is against the forward pass of the array form (the `vmap` of the one-chain "
          "program, whose derivatives the batch took before), timed in the same rounds.\n")
    R.add("")
    return res


# ------------------------------------------------------------------------------------------------ section 4: compile

def section_compile():
    R.add("## 4. Compile time of a rollout vs n and horizon T (float64, single copy)\n")
    R.add("`jax.jit(rollout).lower(...)` (trace + lower to StableHLO) and `.compile()` (XLA) for a fresh function each "
          "time; median over repeats (3 for n = 512, else 5). The horizon only sets the `lax.scan` length, so the "
          "compile time should not grow with T.\n")
    rows, res = [], {}
    for n in (8, 64, 512):
        chain = cast_chain(dc.pendulum(n - 1), F64)
        s0 = dc.from_joint_angles(chain, jnp.full((n - 1,), 0.1, F64))
        for T in (100, 10000):
            u = zero_controls(n, T, F64)
            lows, comps = [], []
            for _ in range(3 if n >= 512 else 5):
                def f(ch, s, uu):  # a fresh function object: no tracing cache hit
                    return dc.rollout(ch, s, uu, DT)
                t0 = time.perf_counter()
                lowered = jax.jit(f).lower(chain, s0, u)
                t1 = time.perf_counter()
                lowered.compile()
                t2 = time.perf_counter()
                lows.append(t1 - t0)
                comps.append(t2 - t1)
            res[(n, T)] = (statistics.median(lows), statistics.median(comps))
            print(f"  n={n:4d} T={T:6d}: trace+lower {statistics.median(lows):.2f} s, "
                  f"compile {statistics.median(comps):.2f} s", flush=True)
            rows.append([n, T, f"{statistics.median(lows):.2f} s", f"{statistics.median(comps):.2f} s",
                         f"{statistics.median(lows) + statistics.median(comps):.2f} s"])
    R.add(md_table(["n", "T", "trace + lower", "XLA compile", "total"], rows))
    ratios = [sum(res[(n, 10000)]) / sum(res[(n, 100)]) for n in (8, 64, 512)]
    R.add("\nTotal(T = 10000) / total(T = 100): " + ", ".join(f"n = {n}: {r:.2f}" for n, r in zip((8, 64, 512), ratios))
          + "\n")
    return res


# ------------------------------------------------------------------------------------------------------------- main

def main():
    if ARGS._worker:
        _worker(ARGS._worker)
        return
    t_start = time.perf_counter()
    facts = machine_facts()
    R.add(f"# diffchain benchmark — {facts['date']}\n")
    R.add(md_table(["", ""], [[k, v] for k, v in facts.items()]))
    R.add(f"\nSections: {', '.join(ARGS.only)}; timed repeats per measurement: {ARGS.repeats} (median).\n")
    summary = {}
    for sec in SECTIONS:
        if sec in ARGS.only:
            t0 = time.perf_counter()
            summary[sec] = globals()[f"section_{sec}"]()
            print(f"  [section {sec}: {time.perf_counter() - t0:.0f} s]\n", flush=True)
    R.save(ARGS.out or os.path.join(HERE, "results", f"bench-{datetime.date.today().isoformat()}.md"), t_start)

if __name__ == "__main__":
    main()
