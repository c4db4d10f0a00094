"""``python -m diffchain bench``: diffchain's throughput, gradient cost and compile times on the workloads of
:mod:`diffchain._bench.workloads`, with the peers measured in the same process, as one markdown report.

Peers: the plain-JAX reduced-coordinate code a user would write instead (always), MuJoCo C through
``mujoco.rollout`` on one thread and on every core, MJX (when installed: the ``bench`` extra) on the
pendulums of up to 20 links, in float32 on CPU, in a process of its own whose ``jax_enable_x64`` matches the row's
dtype (MJX computes in float64 once it is on), and in the full run Jax2D (when installed: ``diffchain[jax2d]``).
Method: every program is compiled first (the compile time is reported), run once, then timed ``repeats`` times with
``jax.block_until_ready``; the median is reported (a first call of over 1 s, on every side, is itself the
measurement). A measurement's number of steps is chosen so that its work (copies x steps x points) is about the same
for every batch size. Before the timings, each peer's accelerations are compared with diffchain's at a random state
(float64): the same model on both sides.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
import time

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .timing import _timed
from .workloads import DT, workloads

MODES = {  # dtypes, batch sizes, gradient batch sizes, work per measurement (copy-steps x points), repeats,
    # the largest batch x points measured (on CPU the plain-JAX baseline of 65536 100-link chains takes minutes),
    # MJX's workloads (whether their gradient is measured too; on CPU in float32 only, as its users run it: its
    # program compiles in 3 s for the 5-link pendulum, 12 s for the 20-link one, its gradient in 16 s and 69 s, the
    # 100-link one in 400 s)
    "quick": (("float32",), (1024,), (1024,), 1e6, 3, None, {"pendulum5": False}),
    "full": (("float32", "float64"), (1, 1024, 65536), (1024,), 2e6, 3, 2e6, {"pendulum5": True, "pendulum20": False}),
    "gpu": (("float32", "float64"), (1, 1024, 65536, 262144), (1024, 65536), 2e9, 5, None,
            {"pendulum5": True, "pendulum20": True}),
}
MJX_MIN_BATCH = 1024  # MJX is measured on batches (its users' workload), not on one copy


def _steps(work, B, points):
    return int(np.clip(round(work / (B * points)), 10, 1000))


def _mujoco(masses, lengths, B, T, threads, repeats=3):
    """MuJoCo C copy-steps/s of B copies x T steps (semi-implicit Euler, same dt) on ``threads`` threads."""
    from . import peers

    return peers.mujoco_rollout_throughput(masses, lengths, n_steps=T, n_copies=B, dt=DT, threads=threads,
                                           repeats=repeats)["steps_per_s"]


def _available(module):
    try:
        __import__(module)
        return True
    except ImportError:
        return False


def machine(device):
    """The report's header: date, processor, cores, load, versions, flags."""
    import importlib.metadata as md

    def version(pkg):
        try:
            return md.version(pkg)
        except md.PackageNotFoundError:
            return "not installed"

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",)
    dev = jax.devices()[0]
    return [f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}",
            f"- machine: {cpu}, {os.cpu_count()} cores; device: {dev.platform} ({dev.device_kind}), "
            f"{len(jax.devices())} device(s)",
            f"- load average at the start: {', '.join(f'{x:.2f}' for x in load[:3])}",
            f"- versions: Python {platform.python_version()}, diffchain {version('diffchain')}, jax {jax.__version__}, "
            f"jaxlib {version('jaxlib')}, mujoco {version('mujoco')}, mujoco-mjx {version('mujoco-mjx')}",
            f"- XLA_FLAGS: `{os.environ.get('XLA_FLAGS', '') or 'none'}`"]


def _fmt(x):
    return "–" if x is None else f"{x:.3g}"


def _ratio(a, b):
    return "–" if a is None or b is None else f"{a / b:.3g}×"


def run_suite(mode, only=None, log=print):
    """Measure every workload (or those named in ``only``): the rows of the report's tables (forward, gradient, model
    agreement) and the forward rates by (workload, dtype, copies)."""
    dtypes, batches, grad_batches, work, repeats, most, mjx_on = MODES[mode]
    threads = os.cpu_count() or 1
    has_mujoco, has_mjx = _available("mujoco"), _available("mujoco.mjx")
    has_jax2d = mode != "quick" and _available("jax2d") and _available("chex")
    fwd_rows, grad_rows, check_rows, jax2d_rows, rates = [], [], [], [], {}
    for w in workloads():
        if only and w.name not in only:
            continue
        if w.reduced is not None:
            check_rows.append([w.label, "plain JAX (closed form)", f"{w.reduced(jnp.float64)[3]():.1e}"])
        if w.mujoco is not None and has_mujoco:
            check_rows.append([w.label, "MuJoCo C", f"{_mujoco_check(*w.mujoco):.1e}"])
        mjx = has_mjx and w.mujoco is not None and w.name in mjx_on
        if mjx:
            check_rows.append([w.label, "MJX", f"{_mujoco_check(*w.mujoco, mjx=True):.1e}"])
        for dtype_name in dtypes:
            dtype = jnp.dtype(dtype_name)
            model, starts = w.build(dtype)
            reduced = w.reduced(dtype) if w.reduced is not None else None
            # a workload whose gradient is costly to compile is differentiated in the full run, on CPU in float32 only
            costly = mode == "quick" or (mode == "full" and dtype_name != "float32")
            gradients = () if w.costly_gradient and costly else grad_batches
            sizes = [B for B in sorted(set(batches) | set(gradients)) if most is None or B * w.points <= most]
            mjx_rates = {}
            if mjx and (dtype_name == "float32" or mode == "gpu"):
                mjx_rates = _mjx_subprocess({
                    "mujoco": w.mujoco, "dtype": dtype_name, "repeats": repeats,
                    "items": [(B, _steps(work, B, w.points), mjx_on[w.name] and B in gradients)
                              for B in sizes if B >= MJX_MIN_BATCH]}, log)
            for B in sizes:
                T = _steps(work, B, w.points)
                mx = mjx_rates.get(str(B), {})
                s0 = starts(B, 0)
                fwd, c_fwd = _timed(lambda s: w.run(model, s, T), (s0,), repeats)
                rate = rates[w.name, dtype_name, B] = B * T / fwd
                r_rate = None
                if reduced is not None:
                    r0 = reduced[0](B, 0)
                    r_fwd, _ = _timed(lambda s: reduced[1](s, T), (r0,), repeats)
                    r_rate = B * T / r_fwd
                if B in batches:
                    mj1 = mjn = None
                    if w.mujoco is not None and has_mujoco:
                        mj1 = _mujoco(*w.mujoco, B, T, 1, repeats) if B <= 1024 else None
                        mjn = _mujoco(*w.mujoco, B, T, threads, repeats) if threads > 1 and B >= threads else mj1
                    mx_rate = B * T / mx["forward"] if "forward" in mx else None
                    fwd_rows.append([w.label, dtype_name, str(B), str(T), _fmt(rate), f"{c_fwd:.1f} s", _fmt(r_rate),
                                     _ratio(rate, r_rate), _fmt(mj1), _fmt(mjn), _ratio(rate, mjn), _fmt(mx_rate),
                                     _compile(mx.get("compile")), _ratio(rate, mx_rate)])
                    log(f"  {w.name} {dtype_name} B={B} T={T}: {rate:.3g} copy-steps/s (compile {c_fwd:.1f} s), plain "
                        f"JAX {_fmt(r_rate)}, MuJoCo 1/{threads} threads {_fmt(mj1)}/{_fmt(mjn)}, MJX {_fmt(mx_rate)}")
                    if has_jax2d and w.name == "pendulum5" and dtype_name == "float32" and B == 1024:
                        from .jax2d_peer import throughput

                        T_j = min(T, 100)  # (7 s a call)
                        j = throughput(w.points - 1, B, T_j, repeats=repeats)
                        jax2d_rows.append([w.label, dtype_name, str(B), str(T_j), _fmt(rate),
                                           _fmt(j["copy_steps_per_s"]), f"{j['compile_s']:.1f} s",
                                           _ratio(rate, j["copy_steps_per_s"]), f"{j['stretch']:.1e}"])
                        log(f"  Jax2D: {j['copy_steps_per_s']:.3g} copy-steps/s, links stretched by {j['stretch']:.1e}")
                if B in gradients:
                    gradient = eqx.filter_grad(lambda s: w.loss(model, s, T))  # (an EventState holds boolean masks)
                    grad, c_grad = _timed(lambda s: gradient(s), (s0,), repeats)
                    r_ratio = None
                    if reduced is not None:
                        r_grad, _ = _timed(jax.grad(lambda s: reduced[2](s, T)), (r0,), repeats)
                        r_ratio = r_grad / r_fwd
                    mx_grad = mx.get("gradient")
                    grad_rows.append([w.label, dtype_name, str(B), str(T), f"{fwd * 1e3:.3g} ms",
                                      f"{grad * 1e3:.3g} ms", f"{grad / fwd:.2f}", f"{c_grad:.1f} s", _fmt(r_ratio),
                                      _ratio(r_grad, grad) if reduced is not None else "–",
                                      "–" if mx_grad is None else f"{mx_grad / mx['forward']:.2f}",
                                      _compile(mx.get("gradient_compile")), _ratio(mx_grad, grad)])
                    log(f"  {w.name} {dtype_name} B={B}: gradient / forward {grad / fwd:.2f} (compile {c_grad:.1f} s)")
    return fwd_rows, grad_rows, check_rows, jax2d_rows, rates


def _compile(seconds):
    return "–" if seconds is None else f"{seconds:.1f} s"


def _mujoco_check(masses, lengths, mjx=False):
    """max |joint accelerations (diffchain) - qacc (MuJoCo C, or ``mjx``)| at a random state, float64."""
    import diffchain as dc

    from . import peers

    n = len(lengths)
    chain = dc.pendulum(n, mass=masses[1:], length=lengths)
    rng = np.random.default_rng(7)
    th, thd = rng.uniform(-np.pi, np.pi, n), rng.uniform(-2, 2, n)
    s = dc.from_joint_angles(chain, th, thd)
    alpha = np.asarray(dc.joint_accelerations(s, dc.forward_dynamics(chain, s)))[:n]
    qacc = (peers.mjx_qacc if mjx else peers.mujoco_qacc)(masses, lengths, th, thd, np.zeros(n))
    return float(np.max(np.abs(alpha - qacc)))


def _mjx_worker(spec):
    """In a fresh process whose ``jax_enable_x64`` matches ``spec["dtype"]``: MJX's forward rollout (and gradient,
    where asked) of ``spec["mujoco"]``'s pendulum for each (B, T, gradient) of ``spec["items"]``, from the same starts
    as diffchain's (joint angles uniform in [-pi, pi], seed 0, at rest); seconds per call and compile seconds."""
    from . import peers

    masses, lengths = spec["mujoco"]
    run, loss = peers.mjx_programs(masses, lengths, DT)
    dtype = jnp.dtype(spec["dtype"])
    out = {}
    for B, T, gradient in spec["items"]:
        q = jnp.asarray(np.random.default_rng(0).uniform(-np.pi, np.pi, (B, len(lengths))), dtype)
        r = out[str(B)] = {}
        r["forward"], r["compile"] = _timed(lambda q, qd: run(q, qd, T), (q, 0 * q), spec["repeats"])
        if gradient:
            r["gradient"], r["gradient_compile"] = _timed(jax.grad(lambda q, qd: loss(q, qd, T)), (q, 0 * q),
                                                          spec["repeats"])
    print("RESULT " + json.dumps(out), flush=True)


def _worker(args, env, log):
    """The RESULT of ``python -m diffchain bench *args`` in a fresh process with the environment ``env``."""
    cmd = [sys.executable, "-m", "diffchain", "bench", *args]
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        log(f"  worker {args[-1][:40]} timed out")
        return None
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    log(f"  worker {args[-1][:40]} failed: " + out.stderr[-1500:])
    return None


def _mjx_subprocess(spec, log):
    """MJX's timings (:func:`_mjx_worker`) by batch size, {} where it failed."""
    return _worker(["--_mjx-worker", json.dumps(spec)], dict(os.environ), log) or {}


def sharding_scaling(B, T, repeats=3):
    """copy-steps/s of the 5-link pendulum's float32 rollout on 1 device and on all of ``jax.devices()``, and of
    MuJoCo C on every core (when installed)."""
    import diffchain as dc

    from .workloads import _pendulum

    chain, starts = _pendulum(5)(jnp.float32)
    run = workloads()[0].run
    s0 = starts(B, 0)
    out = {}
    for k in sorted({1, len(jax.devices())}):
        s = dc.shard(s0, jax.devices()[:k])
        t, _ = _timed(lambda s_: run(chain, s_, T), (s,), repeats)
        out[k] = B * T / t
    if _available("mujoco"):
        out["mujoco"] = _mujoco(*workloads()[0].mujoco, B, T, os.cpu_count() or 1)
    return out


def _shard_worker(mode):
    _, batches, _, work, repeats, *_ = MODES[mode]
    B = max(batches) // 64 * 64
    T = _steps(work, B, 6)
    print("RESULT " + json.dumps({"B": B, "T": T, "rates": sharding_scaling(B, T, repeats)}), flush=True)


def _shard_subprocess(mode, log):
    """Sharding scaling on CPU: a fresh process with one host device per core (the flag must precede JAX's start)."""
    n = os.cpu_count() or 1
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={n}").strip()
    return _worker(["--mode", mode, "--_shard-worker"], env, log)


def table(header, rows):
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def main(args) -> int:
    mode = "quick" if args.quick else ("gpu" if args.device == "gpu" else "full")
    if args.shard_worker:
        _shard_worker(args.mode or mode)
        return 0
    if args.mjx_worker:
        _mjx_worker(json.loads(args.mjx_worker))
        return 0
    if args.device == "gpu" and jax.devices()[0].platform != "gpu":
        print("bench: --device gpu, but JAX sees no GPU (jax.devices() = "
              f"{jax.devices()}): install jax with CUDA, or run --device cpu", file=sys.stderr)
        return 1
    t_start = time.perf_counter()
    only = set(args.only.split(",")) if args.only else None
    print(f"diffchain bench ({mode}): {len(workloads()) if not only else len(only)} workloads", flush=True)
    lines = ["# diffchain benchmark", ""] + machine(args.device) + [""]
    fwd_rows, grad_rows, check_rows, jax2d_rows, rates = run_suite(mode, only, log=lambda s: print(s, flush=True))
    lines += ["## The same model on every side", "",
              "max |accelerations (diffchain) − accelerations (peer)| at a random state, float64:", ""]
    lines += table(["workload", "peer", "max difference"], check_rows) + [""]
    lines += ["## Forward rollouts", "",
              f"copy-steps/s = copies × steps / wall time (the median of {MODES[mode][4]} runs; one run where it "
              f"takes over 1 s); dt = {DT:g} s; semi-implicit Euler on every side "
              "(MuJoCo's `Euler`) except the drop (the event rollout's velocity Verlet). diffchain: "
              "`jax.jit(jax.vmap(rollout))` with the default solver and checks; plain JAX: `jax.vmap` of a `lax.scan` "
              "over the closed-form accelerations; MuJoCo C: `mujoco.rollout` (float64) on 1 thread and on every "
              "core (the ratio is diffchain over MuJoCo on every core); MJX: `jax.vmap` of a `lax.scan` of "
              "`mjx.step` from the same starts (batches of 1024 copies and more, float32 on CPU; a pendulum's "
              "program compiles in minutes beyond 20 links).", ""]
    lines += table(["workload", "dtype", "copies", "steps", "diffchain", "compile", "plain JAX", "diffchain / plain",
                    "MuJoCo 1 thread", f"MuJoCo {os.cpu_count()} threads", "diffchain / MuJoCo", "MJX", "MJX compile",
                    "diffchain / MJX"], fwd_rows) + [""]
    lines += ["## Gradients", "",
              "`jax.grad` of the sum of squares of the final positions and velocities with respect to the starts' "
              "arrays (the forward pass included), against the forward rollout of the same batch; MJX's of its final "
              "joint angles and rates with respect to the start angles.", ""]
    lines += table(["workload", "dtype", "copies", "steps", "forward", "gradient", "gradient / forward",
                    "compile", "plain JAX gradient / forward", "diffchain gradient speed / plain JAX's",
                    "MJX gradient / forward", "MJX gradient compile", "diffchain gradient speed / MJX's"],
                   grad_rows) + [""]
    if jax2d_rows:
        lines += ["## Jax2D", "",
                  "Jax2D (the `jax2d` extra), the engine of Kinetix: rigid bodies and soft revolute "
                  "joints solved by sequential impulses (10 iterations), one step of semi-implicit Euler per dt. Each "
                  "link is a body of 1 kg with its centre of mass at the link's tip and 1e-3 kg m² of inertia there "
                  "(Jax2D has no point masses; smaller inertias break its solver). Same starts as diffchain's; the "
                  "links' stretch is measured at the end of the timed rollouts. Its gradient through more than about "
                  "14 steps is not finite (diffchain/_bench/jax2d_peer.py).", ""]
        lines += table(["workload", "dtype", "copies", "steps", "diffchain", "Jax2D", "Jax2D compile",
                        "diffchain / Jax2D", "Jax2D max link stretch"], jax2d_rows) + [""]
    if mode == "quick":
        lines += ["(quick mode: float32, 1024 copies, no gradient of the event drop, whose program compiles in 70-90 "
                  "s at 1024 copies; the full run adds float64, 1 and 65536 copies, the drop's gradient in float32, "
                  "MJX's gradient and Jax2D.)", ""]
    if not args.no_sharding:
        if jax.devices()[0].platform == "cpu":
            res = _shard_subprocess(mode, print)
        else:
            B = max(MODES[mode][1]) // 64 * 64
            T = _steps(MODES[mode][3], B, 6)
            res = {"B": B, "T": T, "rates": sharding_scaling(B, T)}
        if res:
            mj = res["rates"].pop("mujoco", None)
            lines += ["## A batch sharded across devices (`diffchain.shard`)", "",
                      f"5-link pendulum, float32, {res['B']} copies × {res['T']} steps, as above; on CPU one host "
                      f"device per core (`--xla_force_host_platform_device_count`). Against MuJoCo C on every core "
                      f"({_fmt(mj)} copy-steps/s in the same process): every core on both sides.", ""]
            sharded = {int(k): v for k, v in res["rates"].items()}
            rows = [[str(k), _fmt(v), f"{v / sharded[1]:.2f}×", _ratio(v, mj)] for k, v in sorted(sharded.items())]
            alone = rates.get(("pendulum5", "float32", res["B"]))
            if alone is not None:  # (a process with several host devices runs a one-device program slower)
                rows.insert(0, ["1, in a process with one device (the row above)", _fmt(alone),
                                f"{alone / sharded[1]:.2f}×", _ratio(alone, mj)])
            lines += table(["devices", "copy-steps/s", "speed-up", "diffchain / MuJoCo (every core)"], rows) + [""]
    lines += [f"Total time: {time.perf_counter() - t_start:.0f} s.", ""]
    out = args.out or f"diffchain-bench-{datetime.date.today().isoformat()}{'-quick' if mode == 'quick' else ''}.md"
    with open(out, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    print(f"written to {out}")
    return 0
