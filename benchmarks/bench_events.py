"""Cost of the events module (ground contact, angle limits, adaptive halving; ``diffchain/events.py``) against a plain
step, float64, on this CPU.

    python benchmarks/bench_events.py                   # everything (~4-5 min on a 2-core machine)
    python benchmarks/bench_events.py --sections single,profile --sizes 5,20 --out /tmp/ev.md

Sections (all measured in the same run):
  single   single chain, no vmap: ``event_rollout`` vs ``rollout`` (SeedQuantum, Recursive), T = 1000 quanta, per
           quantum, free chains of k = 2, 5, 10, 20 links dropped onto the ground (*active*) and the same drop with the
           ground far below (*quiet*: nothing happens, only the machinery runs); StepReport totals show that events
           did happen; the headline pair once more without pinning the process to one core (a subprocess);
  budget   ``slots`` 3/4/8, ``max_depth`` 0 vs 3 and a low halving threshold (5-link chain, single);
  batched  ``jit(vmap(...))`` over B = 64, 1024 random drops of the 5-link chain, T = 200;
  kkt      ``solver=KKT()`` and ``solver=ShortChain()`` vs the default ``Recursive()`` (5-link chain, single);
  profile  where the single-chain time goes: a ladder of rollouts that adds the pieces of a quiet event quantum one at
           a time (Part I ``Recursive`` step -> Part II ``active_dynamics_recursive`` step ->
           ``events.constrained_dynamics`` -> + ``events.detect`` -> a quiet quantum's one slot -> ``event_rollout``),
           and the number of XLA kernels one call of each piece executes;
  grad     reverse-mode gradients of event rollouts (5-link chain, T = ``--grad-steps``): one drop, and
           ``vmap(grad)`` / ``grad(vmap)`` over 64 random drops, against the forward rollout; compile times.

Method (as benchmarks/bench.py): every timed function is jitted and compiled first (``jit(f).lower().compile()``),
run once as warm-up, then timed ``--repeats`` times (default 7; 2 for the largest batch) with
``jax.block_until_ready``; the tables give the median (min in brackets where useful). The cases compared with each
other are timed round-robin (one sample of each per round) and their ratio is the median over the rounds of the
per-round ratio, so that bursts of load from other processes on this shared machine hit both sides alike. Chains,
events and states are arguments of the compiled functions (not constants).

Two traps, both measured while writing this script (see the results file):
* **what the timed function returns.** The timed rollouts return the final state only. Returning the stacked
  trajectory or the stacked StepReports (even only their sums) gives XLA's CPU runtime loop buffers > 512 bytes, and
  its thunk executor then runs the loop body as a concurrent dataflow graph on the thread pool instead of in
  sequence (``ThunkExecutor::Options::execute_sequential_buffer_threshold = 512``): on this machine (not pinned)
  that made the 5-link event quantum ~2x slower. The StepReport totals therefore come from a second compiled function (a
  ``lax.scan`` of ``event_step`` that sums the reports in its carry), timed alongside as a check.
  The same threshold makes every loop with (n, 2, 2) float64 buffers, i.e. n >= 17 points, run concurrently: the
  k = 20 chain sits beyond it.
* **threads.** By default the process is pinned to one core (``--cores 1``) before JAX starts, so XLA's thread pool
  has one thread: single-chain programs are sequential anyway, and on a 2-core machine shared with other processes
  the concurrent executor otherwise waits for a busy core (bimodal timings, up to 2x). ``--cores 0`` leaves the
  affinity alone; section *single* repeats its headline pair that way in a subprocess for comparison.

Prints a report and writes it as markdown to benchmarks/results/bench-events-<YYYY-MM-DD>.md (``--out`` to change).
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

SECTIONS = ("single", "budget", "batched", "kkt", "profile", "grad")


def _parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated: " + " | ".join(SECTIONS))
    p.add_argument("--sizes", default="2,5,10,20", help="links k of the single-chain section")
    p.add_argument("--repeats", type=int, default=7, help="timed rounds per measurement (median reported)")
    p.add_argument("--steps", type=int, default=1000, help="quanta per single-chain rollout")
    p.add_argument("--batch-steps", type=int, default=200, help="quanta per batched rollout")
    p.add_argument("--grad-steps", type=int, default=200, help="quanta per rollout of section grad")
    p.add_argument("--batches", default="64,1024", help="batch sizes of section batched")
    p.add_argument("--cores", type=int, default=1, help="pin the process to this many cores (0: leave it alone)")
    p.add_argument("--no-unpinned", action="store_true", help="skip the unpinned comparison subprocess")
    p.add_argument("--out", default=None, help="markdown output (default benchmarks/results/bench-events-<date>.md)")
    p.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # worker mode: print section results
    args = p.parse_args()
    args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    bad = [s for s in args.sections if s not in SECTIONS]
    if bad:
        p.error(f"unknown section(s) {bad}; choose from {SECTIONS}")
    args.sizes = tuple(int(k) for k in args.sizes.split(","))
    args.batches = tuple(int(b) for b in args.batches.split(","))
    return args


ARGS = _parse()
# One OpenBLAS thread (the KKT solver's LAPACK calls otherwise fight XLA's thread pool on 2 cores; see bench.py).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
PINNED = None
if ARGS.cores > 0 and hasattr(os, "sched_setaffinity"):
    _usable = sorted(os.sched_getaffinity(0))
    PINNED = _usable[-ARGS.cores:]  # before JAX starts: XLA sizes its thread pool from the affinity mask
    os.sched_setaffinity(0, PINNED)

import diffchain as dc  # noqa: E402

dc.set_xla_cpu_flags()  # this script's process: the recommended XLA CPU flags

import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)
from diffchain._events import detection as dcd, dynamics as dce  # noqa: E402  (the pieces of section profile)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from benchutil import Report, cpu_description, fmt_t, md_table  # noqa: E402
with open(dce.__file__) as _fh:  # does constrained_dynamics fall back to the Part I solver when no joint is held?
    PART_ONE = "solver(ch, s_in, u, stab_in)" in _fh.read()
F64 = jnp.float64
DT = 1e-3
K_BUDGET = 5             # links of the chain used for the budget / batched / kkt sections and the reading
PROFILE_SIZES = (5, 20)  # links of the chains of section profile


# ------------------------------------------------------------------------------------------------------------ timing

def time_many(cases, repeats=None, warm=True, min_sample=0.01):
    """Round-robin timing of compiled functions, ``cases`` = {name: (fn, args)}: each is warmed up (unless ``warm`` is
    False: already called), then ``repeats`` rounds time every case once (calls shorter than ``min_sample`` grouped k
    per sample), so that a burst of load from other processes hits all cases alike. {name: [s per call, ...]}."""
    repeats = repeats or ARGS.repeats
    group = {}
    for name, (fn, args) in cases.items():
        t0 = time.perf_counter()
        if warm:
            jax.block_until_ready(fn(*args))
        once = time.perf_counter() - t0 if warm else min_sample
        group[name] = 1 if once >= min_sample else int(min(1000, max(1, min_sample / max(once, 1e-7))))
    samples = {name: [] for name in cases}
    for _ in range(repeats):
        for name, (fn, args) in cases.items():
            t0 = time.perf_counter()
            for _ in range(group[name]):
                out = fn(*args)
            jax.block_until_ready(out)
            samples[name].append((time.perf_counter() - t0) / group[name])
    return samples


def med(xs):
    return statistics.median(xs)


def paired_ratio(a, b):
    """Median over the rounds of a[r] / b[r] (same round = same background load)."""
    return statistics.median(x / y for x, y in zip(a, b))


def compile_fn(f, *args):
    t0 = time.perf_counter()
    c = jax.jit(f).lower(*args).compile()
    return c, time.perf_counter() - t0


R = Report(quiet=ARGS.json)


def log(*a):
    print(*a, file=sys.stderr if ARGS.json else sys.stdout, flush=True)


def machine_facts():
    import importlib.metadata as md
    import jaxlib
    try:
        eqx_v = md.version("equinox")
    except Exception:  # noqa: BLE001
        eqx_v = "?"
    try:
        root = os.path.dirname(HERE)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=10, check=False).stdout.strip() or "?"
        dirty = subprocess.run(["git", "--no-optional-locks", "status", "--porcelain", "--", "diffchain"], cwd=root, capture_output=True,
                               text=True, timeout=10, check=False).stdout.split()
        commit += f" (uncommitted changes in: {', '.join(d for d in dirty if d.endswith('.py'))})" if dirty else \
            " (diffchain/ clean)"
    except Exception:  # noqa: BLE001
        commit = "?"
    import hashlib
    pkg = os.path.dirname(os.path.abspath(dc.__file__))
    digest = hashlib.sha1()
    for fn in sorted(f for f in os.listdir(pkg) if f.endswith(".py")):
        with open(os.path.join(pkg, fn), "rb") as fh:
            digest.update(fn.encode() + fh.read())
    return {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "platform": platform.platform(),
        "CPU": cpu_description(),
        "cores": f"{os.cpu_count()} logical (shared machine); "
                 + (f"this process pinned to core {PINNED} before JAX started (`--cores {ARGS.cores}`)" if PINNED
                    else "affinity left alone"),
        "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "python": platform.python_version(),
        "jax / jaxlib": f"{jax.__version__} / {jaxlib.__version__} ({jax.default_backend()}, "
                        f"{len(jax.devices())} device(s))",
        "equinox / numpy": f"{eqx_v} / {np.__version__}",
        "diffchain commit": commit,
        "diffchain imported from": f"`{pkg}` (sha1 of its *.py: {digest.hexdigest()[:12]})",
        "constrained_dynamics with no joint held": ("Part I solver (the solver's Part I call)" if PART_ONE
                                                    else "Part II solver (`active_dynamics_recursive`)"),
        "XLA_FLAGS (effective)": "`" + (os.environ.get("XLA_FLAGS", "") or "(none)") + "`",
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", "(unset)"),
        "float64": str(jax.config.jax_enable_x64),
    }


# ------------------------------------------------------------------------------------------------------- the cases

def drop_state(k, omega):
    """A free chain of k links (mass 1 per point, length 0.5) starting as a zig-zag at 1 m height: link 1 tilted up by
    0.25 rad, then relative joint angles -0.25, +0.5, -0.5, ... (all points between ~0.9 m and ~1.3 m, every joint
    well inside the +-2 rad limits); joint rates 0, -omega, +omega, -omega, ... (omega = 8 makes an interior joint
    swing into its limit during the fall); the whole chain at rest otherwise."""
    chain = dc.free_chain(k, mass=1.0, length=0.5)
    th = np.array([0.25] + [(-1) ** i * 0.5 for i in range(1, k)])
    if k > 1:
        th[1] = -0.25
    thd = np.array([0.0] + [(-1) ** i * omega for i in range(1, k)])
    s = dc.from_joint_angles(chain, jnp.asarray(th, F64), jnp.asarray(thd, F64), base=(0.0, 1.0))
    assert float(jnp.min(s.x[:, 1])) > 0.5
    return chain, s


def make_events(n, ground=0.0, **kw):
    return dc.Events(n, ground=ground, theta_min=-2.0, theta_max=2.0, **kw)


def ev_fn(T, solver=dc.Recursive()):
    """The timed event rollout: ``event_rollout`` (with its start check), final state only."""
    def f(chain, events, es):
        return dc.event_rollout(chain, events, es, None, DT, n_steps=T, solver=solver)[0]
    return f


def plain_fn(T, solver=dc.Recursive()):
    """The timed plain rollout: ``rollout`` (SeedQuantum), final state only."""
    def f(chain, s):
        return dc.rollout(chain, s, None, DT, n_steps=T, solver=solver, integrator=dc.SeedQuantum())[0]
    return f


def rep_fn(T, solver=dc.Recursive()):
    """The reporting rollout: ``check_event_state`` + ``lax.scan`` of ``event_step`` (what ``event_rollout`` does,
    zero control) that sums the StepReports in its carry instead of stacking them. Returns (final, totals)."""
    def f(chain, events, es):
        es = dc.check_event_state(chain, events, es)
        n = chain.n
        zi = jnp.zeros((), jnp.int32)
        acc0 = {"impacts": zi, "limit_hits": zi, "releases": zi, "limit_releases": zi, "halvings": zi, "events": zi,
                "substeps": zi, "slots_sum": zi, "slots_max": zi, "exhausted": zi, "held_quanta": zi, "stuck_quanta": zi}

        def body(c, _):
            e, acc = c
            e, rep = dc.event_step(chain, events, e, dc.Control(n=n, dtype=F64), DT, solver=solver)
            cnt = lambda m: jnp.sum(m).astype(jnp.int32)  # noqa: E731
            acc = {"impacts": acc["impacts"] + cnt(rep.impacts), "limit_hits": acc["limit_hits"] + cnt(rep.limit_hits),
                   "releases": acc["releases"] + cnt(rep.releases),
                   "limit_releases": acc["limit_releases"] + cnt(rep.limit_releases),
                   "halvings": acc["halvings"] + rep.halvings, "events": acc["events"] + rep.events,
                   "substeps": acc["substeps"] + rep.substeps, "slots_sum": acc["slots_sum"] + rep.slots,
                   "slots_max": jnp.maximum(acc["slots_max"], rep.slots),
                   "exhausted": acc["exhausted"] + rep.exhausted.astype(jnp.int32),
                   "held_quanta": acc["held_quanta"] + jnp.any(e.held).astype(jnp.int32),
                   "stuck_quanta": acc["stuck_quanta"] + jnp.any(e.stuck).astype(jnp.int32)}
            return (e, acc), None

        (final, acc), _ = jax.lax.scan(body, (es, acc0), None, length=T)
        acc["slots_mean"] = acc.pop("slots_sum").astype(F64) / T
        return final, acc
    return f


def tot_py(tot):
    return {k: np.asarray(v) for k, v in tot.items()}


def tot_cells(t):
    return [int(t["impacts"]), int(t["limit_hits"]), int(t["releases"]) + int(t["limit_releases"]), int(t["events"]),
            int(t["halvings"]), f"{float(t['slots_mean']):.3f}", int(t["slots_max"]), int(t["exhausted"]),
            int(t["stuck_quanta"]), int(t["held_quanta"])]


TOT_HEAD = ["impacts", "limit hits", "releases", "event cuts", "halvings", "slots/quantum (mean)", "max", "exhausted",
            "quanta ending with a point stuck", "… with a joint held"]


# ---------------------------------------------------------------------------------------------- section 1: single

def single_measure(sizes):
    """Per size: compile event_rollout / rollout (final only) and the reporting scan; time the six rollouts (active
    and quiet start) round-robin. Returns {k: {...}} with plain floats (JSON-able) plus the compiled functions."""
    T = ARGS.steps
    res = {}
    for k in sizes:
        n = k + 1
        chain, s_act = drop_state(k, 8.0)
        _, s_quiet = drop_state(k, 0.0)
        ev = {"active": make_events(n, 0.0), "quiet": make_events(n, -1000.0)}
        st = {"active": s_act, "quiet": s_quiet}
        es = {name: dc.EventState(s) for name, s in st.items()}
        fe, ce = compile_fn(ev_fn(T), chain, ev["active"], es["active"])
        fp, cp = compile_fn(plain_fn(T), chain, s_act)
        fr, cr = (None, 0.0) if ARGS.json else compile_fn(rep_fn(T), chain, ev["active"], es["active"])
        r = {"compile_ev": ce, "compile_plain": cp, "compile_rep": cr}
        cases = {}
        for name in ("active", "quiet"):
            final = fe(chain, ev[name], es[name])
            assert bool(jnp.all(jnp.isfinite(final.state.x))), (k, name)
            r[name] = {}
            cases["ev_" + name] = (fe, (chain, ev[name], es[name]))
            cases["plain_" + name] = (fp, (chain, st[name]))
            if fr is not None:
                final_r, tot = fr(chain, ev[name], es[name])
                r[name]["tot"] = tot_py(tot)
                r[name]["same_final"] = float(jnp.max(jnp.abs(final_r.state.x - final.state.x)))
                cases["rep_" + name] = (fr, (chain, ev[name], es[name]))
        smp = time_many(cases)
        for name in ("active", "quiet"):
            e, p = smp["ev_" + name], smp["plain_" + name]
            r[name].update(ev=med(e) / T, ev_min=min(e) / T, plain=med(p) / T, plain_min=min(p) / T,
                           ratio=paired_ratio(e, p), ratio_min=min(e) / min(p))
            if fr is not None:
                r[name]["rep_over_ev"] = paired_ratio(smp["rep_" + name], e)
            log(f"  k={k:2d} {name:6s}: event {fmt_t(med(e) / T)}/quantum, plain {fmt_t(med(p) / T)}/quantum -> "
                f"{r[name]['ratio']:.2f}x [min/min {r[name]['ratio_min']:.2f}x]"
                + (f", reporting scan / event_rollout {r[name]['rep_over_ev']:.2f}" if fr is not None else "")
                + f"  (compile {ce:.1f} s / {cp:.1f} s)")
        r["fe"], r["fr"] = fe, fr
        res[k] = r
    return res


def run_unpinned(sizes):
    """Section single's headline pair in a subprocess that leaves the CPU affinity alone (XLA thread pool over all
    cores). Returns {k: {...}} or None."""
    cmd = [sys.executable, os.path.abspath(__file__), "--json", "--cores", "0", "--sections", "single",
           "--sizes", ",".join(map(str, sizes)), "--repeats", str(ARGS.repeats), "--steps", str(ARGS.steps)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=400, check=False)
    except subprocess.TimeoutExpired:
        log("  unpinned worker timed out")
        return None
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return {int(k): v for k, v in json.loads(line[7:]).items()}
    log("  unpinned worker failed:", out.stderr[-2000:])
    return None


def section_single():
    T = ARGS.steps
    R.add(f"## 1. Single chain (no vmap): event_rollout vs rollout, T = {T} quanta, dt = {DT:g}\n")
    R.add("`free_chain(k, mass=1, length=0.5)`, n = k + 1 points, dropped as a zig-zag from 1 m (link 1 tilted 0.25 rad, "
          "relative angles ∓0.5, alternate joint rates ∓8 rad/s; see `drop_state`). *event* = "
          "`event_rollout(chain, Events(n, ground=0, theta_min=-2, theta_max=2), ...)` (Recursive, slots 8, "
          "max_depth 3, threshold 1), final state returned; *plain* = `rollout(..., SeedQuantum(), Recursive())` of "
          "the same chain and start (it falls through the ground), final state returned. *active*: the drop onto "
          "y = 0 (the chain lands after ≈ 0.4 s and lies on the ground for the rest); *quiet*: the same compiled "
          "`Events` program with the ground at y = -1000 and joint rates 0 (free fall, no contact, no limit: only the "
          "machinery runs). Per quantum = rollout / T, median of the rounds (min in brackets); *ratio* = median over "
          "the rounds of event / plain, *[min/min]* = ratio of the minima.\n")
    res = single_measure(ARGS.sizes)
    rows, rows_t = [], []
    for k, r in res.items():
        a, q = r["active"], r["quiet"]
        rows.append([k, k + 1, f"{fmt_t(a['plain'])} ({fmt_t(a['plain_min'])})",
                     f"{fmt_t(a['ev'])} ({fmt_t(a['ev_min'])})", f"**{a['ratio']:.1f}×** [{a['ratio_min']:.1f}×]",
                     f"{fmt_t(q['ev'])} ({fmt_t(q['ev_min'])})", f"**{q['ratio']:.1f}×** [{q['ratio_min']:.1f}×]",
                     f"{a['rep_over_ev']:.2f} / {q['rep_over_ev']:.2f}",
                     f"{r['compile_ev']:.1f} s / {r['compile_plain']:.1f} s"])
        rows_t.append([k, k + 1, "active"] + tot_cells(a["tot"]))
        rows_t.append([k, k + 1, "quiet"] + tot_cells(q["tot"]))
    R.add(md_table(["links k", "n", "plain per quantum", "event per quantum (active)",
                    "ratio active (floor ≤ 3) [min/min]", "event per quantum (quiet)", "ratio quiet [min/min]",
                    "reporting scan / event_rollout (active / quiet)", "compile event / plain"], rows))
    R.add("\nStepReport totals per rollout (T quanta), from the reporting scan (`rep_fn`: `check_event_state` + "
          "`lax.scan` of `event_step` summing the reports in its carry; its cost relative to `event_rollout` is the "
          "column above, its final state equals the timed rollout's to "
          f"{max(max(r['active']['same_final'], r['quiet']['same_final']) for r in res.values()):.0e} m): "
          "impacts = points that stuck, limit hits = joints that reached a limit, releases = contacts + limits "
          "released, event cuts = impulse slots, slots/quantum = solver calls per quantum (1 in a quiet quantum, 2 after a control change), "
          "exhausted = quanta that hit the forced finish; the last two columns count the quanta after which some "
          "point is stuck / some joint is held (then the slots' solver calls carry those constraints).\n")
    R.add(md_table(["links k", "n", "case"] + TOT_HEAD, rows_t))
    R.add("")
    unp = None
    if PINNED and not ARGS.no_unpinned:
        t0 = time.perf_counter()
        unp = run_unpinned((max(ARGS.sizes),))
        log(f"  [unpinned worker: {time.perf_counter() - t0:.0f} s]")
        if unp:
            R.add("Not pinned (`--cores 0`, a subprocess run after the above: XLA's thread pool over both cores, shared "
                  "with whatever else runs on the machine), same pair:\n")
            rows = []
            for k, u in unp.items():
                a, q, p = u["active"], u["quiet"], res[k]
                rows.append([k, k + 1, fmt_t(a["plain"]), fmt_t(a["ev"]), f"{a['ratio']:.1f}× [{a['ratio_min']:.1f}×]",
                             fmt_t(q["ev"]), f"{q['ratio']:.1f}× [{q['ratio_min']:.1f}×]",
                             f"{p['active']['ratio']:.1f}× / {p['quiet']['ratio']:.1f}×"])
            R.add(md_table(["links k", "n", "plain per quantum", "event (active)", "ratio active [min/min]",
                            "event (quiet)", "ratio quiet [min/min]", "pinned ratio (active / quiet), above"], rows))
            R.add("")
    return {"res": res, "unpinned": unp}


# ---------------------------------------------------------------------------------------------- section 2: budget

BUDGET_CASES = (  # (start, slots, max_depth, threshold)
    ("quiet", 4, 3, 1.0), ("quiet", 8, 3, 1.0),
    ("active", 4, 3, 1.0), ("active", 8, 3, 1.0), ("active", 8, 0, 1.0),
    ("active", 4, 3, 1e-3), ("active", 8, 0, 1e-3), ("active", 8, 3, 1e-3))


def section_budget(single):
    T, k = ARGS.steps, K_BUDGET
    n = k + 1
    R.add(f"## 2. Budget: slots and max_depth ({k}-link chain, single, T = {T})\n")
    R.add("Starts of section 1 (*active* drop, *quiet* free fall); timed is the reporting scan (`rep_fn`, same cost as "
          "`event_rollout`, see section 1) so that each row shows its own StepReport. `slots` and `max_depth` are "
          "static (one compile each); `threshold` is data. With the default threshold (1 m/s) no sub-quantum is ever "
          "rejected on this drop, so threshold = 1e-3 is added to make the halving machinery work. Without vmap the "
          "unused slots are skipped by `lax.cond`: the budget costs what is used plus the skipped conds (quiet, "
          "slots 8 vs 4: 4 more skipped slot conds per quantum). All rows timed round-robin with the plain rollout; "
          "ratio = paired median over the rounds.\n")
    chain, s_act = drop_state(k, 8.0)
    _, s_quiet = drop_state(k, 0.0)
    compiled = {}
    if single and k in single["res"] and single["res"][k].get("fr") is not None:
        compiled[(8, 3)] = single["res"][k]["fr"]
    cases, info = {}, {}
    fp, _ = compile_fn(plain_fn(T), chain, s_act)
    cases["plain"] = (fp, (chain, s_act))
    for label, slots, depth, thr in BUDGET_CASES:
        ev = make_events(n, -1000.0 if label == "quiet" else 0.0, slots=slots, max_depth=depth, threshold=thr)
        es = dc.EventState(s_quiet if label == "quiet" else s_act)
        if (slots, depth) not in compiled:
            compiled[(slots, depth)] = compile_fn(rep_fn(T), chain, ev, es)[0]
        fr = compiled[(slots, depth)]
        final, tot = fr(chain, ev, es)
        assert bool(jnp.all(jnp.isfinite(final.state.x)))
        key = (label, slots, depth, thr)
        cases[key] = (fr, (chain, ev, es))
        info[key] = tot_py(tot)
    smp = time_many(cases)
    tp = smp["plain"]
    rows, res = [], []
    for key, t in info.items():
        label, slots, depth, thr = key
        te = smp[key]
        r = {"label": label, "slots": slots, "depth": depth, "thr": thr, "ev": med(te) / T, "ev_min": min(te) / T,
             "ratio": paired_ratio(te, tp), "tot": t}
        res.append(r)
        log(f"  {label:6s} slots={slots} max_depth={depth} threshold={thr:g}: {fmt_t(r['ev'])}/quantum -> "
            f"{r['ratio']:.2f}x plain (halvings {int(t['halvings'])}, slots mean {float(t['slots_mean']):.3f}, "
            f"exhausted {int(t['exhausted'])})")
        rows.append([label, slots, depth, f"{thr:g}", f"{fmt_t(r['ev'])} ({fmt_t(r['ev_min'])})",
                     f"{r['ratio']:.1f}×"] + tot_cells(t))
    R.add(f"Plain rollout of the same chain: {fmt_t(med(tp) / T)} per quantum ({fmt_t(min(tp) / T)} min).\n")
    R.add(md_table(["start", "slots", "max_depth", "threshold", "event per quantum", "ratio to plain"] + TOT_HEAD,
                   rows))
    R.add("")
    return res


# ---------------------------------------------------------------------------------------------- section 3: batched

def batch_states(chain, B, seed):
    """B random drops: link 1 tilted U(-0.6, 0.6) rad, relative joint angles U(-1, 1), joint rates U(-3, 3) rad/s,
    point-1 velocity (U(-0.5, 0.5), U(-2, 0)) m/s, the chain shifted so that its lowest point is at U(0.02, 0.15) m."""
    k = chain.n - 1
    rng = np.random.default_rng(seed)
    th = np.concatenate([rng.uniform(-0.6, 0.6, (B, 1)), rng.uniform(-1.0, 1.0, (B, k - 1))], 1)
    thd = rng.uniform(-3.0, 3.0, (B, k))
    bv = np.stack([rng.uniform(-0.5, 0.5, B), rng.uniform(-2.0, 0.0, B)], 1)
    s = jax.vmap(lambda a, b, c: dc.from_joint_angles(chain, a, b, base_velocity=c))(
        jnp.asarray(th, F64), jnp.asarray(thd, F64), jnp.asarray(bv, F64))
    lift = jnp.asarray(rng.uniform(0.02, 0.15, B), F64) - jnp.min(s.x[..., 1], -1)
    return dc.State(s.x + jnp.stack([jnp.zeros_like(lift), lift], -1)[:, None, :], s.v, s.t)


def section_batched():
    T, k = ARGS.batch_steps, K_BUDGET
    n = k + 1
    Bmax = max(ARGS.batches)
    R.add(f"## 3. Batched throughput with contacts ({k}-link chain, `jit(vmap(...))`, T = {T})\n")
    R.add("B different random drops (see `batch_states`: random tilt, joint angles/rates, downward velocity, lowest "
          "point 2–15 cm above the ground, so most chains land within the window). *event* = `vmap` of the reporting "
          "scan (`rep_fn`: `event_step` in `lax.scan`, StepReport summed per chain), *plain* = `vmap` of `rollout` "
          "(final state). Under `vmap` a `lax.cond` would become a select that computes both branches for every "
          "chain; instead the slots run only on the chains whose quiet trial (`events._quiet_trial`) does not "
          "apply, and only while they still need them, gathered into a batch of B/16 "
          "when they are that few (`batching.rare_cond`, `batching.scan_until`), and the held-joint solver, the event "
          "times and the reactions are skipped when no chain needs them. quanta·chains/s = B·T / wall time (median, best in "
          f"brackets); plain and event timed round-robin ({ARGS.repeats} rounds; B = {Bmax}: 2 rounds, the first "
          "call being the warm-up). Totals are means per chain.\n")
    chain = dc.free_chain(k, mass=1.0, length=0.5)
    rows, res = [], []
    for B in ARGS.batches:
        s0 = batch_states(chain, B, seed=B)
        es0 = dc.EventState(s0)
        fp, cp = compile_fn(lambda ch, s: jax.vmap(lambda si: plain_fn(T)(ch, si))(s), chain, s0)
        jax.block_until_ready(fp(chain, s0))
        cases, info = {"plain": (fp, (chain, s0))}, {}
        for slots in ((8,) if B == Bmax else (8, 4)):
            ev = make_events(n, 0.0, slots=slots)
            fe, ce = compile_fn(lambda ch, e, es: jax.vmap(lambda x: rep_fn(T)(ch, e, x))(es), chain, ev, es0)
            final, tot = fe(chain, ev, es0)
            assert bool(jnp.all(jnp.isfinite(final.state.x)))
            cases[slots] = (fe, (chain, ev, es0))
            info[slots] = (tot_py(tot), ce)
        smp = time_many(cases, repeats=2 if B == Bmax else None, warm=False)
        tp = smp["plain"]
        for slots, (t, ce) in info.items():
            te = smp[slots]
            landed = float(np.mean(t["impacts"] > 0))
            r = {"B": B, "slots": slots, "ev_rate": B * T / med(te), "plain_rate": B * T / med(tp),
                 "ratio": paired_ratio(te, tp), "tot": t, "landed": landed}
            res.append(r)
            log(f"  B={B:5d} slots={slots}: event {r['ev_rate']:.3e} quanta*chains/s, plain {r['plain_rate']:.3e} -> "
                f"{r['ratio']:.1f}x (compile {ce:.1f} s / {cp:.1f} s)")
            rows.append([B, slots, f"{r['plain_rate']:.3g} ({B * T / min(tp):.3g})",
                         f"{r['ev_rate']:.3g} ({B * T / min(te):.3g})", f"**{r['ratio']:.0f}×**",
                         fmt_t(med(te) / (B * T)), f"{landed * 100:.0f} %", f"{np.mean(t['impacts']):.2f}",
                         f"{np.mean(t['limit_hits']):.2f}", f"{np.mean(t['halvings']):.2f}",
                         f"{np.mean(t['slots_mean']):.3f}", f"{np.mean(t['exhausted']):.2f}", f"{ce:.1f} s / {cp:.1f} s"])
    R.add(md_table(["B", "slots", "plain quanta·chains/s", "event quanta·chains/s", "event / plain time",
                    "event per chain and quantum", "chains that landed", "impacts / chain", "limit hits / chain",
                    "halvings / chain", "slots used / quantum", "exhausted quanta / chain", "compile event / plain"],
                   rows))
    R.add("")
    return res


# -------------------------------------------------------------------------------------------------- section 4: KKT

def section_kkt(single):
    T, k = ARGS.steps, K_BUDGET
    n = k + 1
    R.add(f"## 4. Solver: KKT and ShortChain vs Recursive ({k}-link chain, single, active drop, T = {T})\n")
    R.add("The event rollout (reporting scan) with `solver=KKT()` (dense KKT with the held rows) and with "
          "`solver=ShortChain()` (the recursion's system written out in scalars, for one short chain) against the "
          "default `Recursive()`; the plain rollout with the same solvers. Round-robin timing.\n")
    chain, s = drop_state(k, 8.0)
    es, ev = dc.EventState(s), make_events(n, 0.0)
    cases, info = {}, {}
    for name, esolver, psolver in (("recursive", dc.Recursive(), dc.Recursive()), ("kkt", dc.KKT(), dc.KKT()),
                                   ("short", dc.ShortChain(), dc.ShortChain())):
        pre = single["res"][k].get("fr") if (single and name == "recursive" and k in single["res"]) else None
        fe, ce = (pre, single["res"][k]["compile_rep"]) if pre is not None else compile_fn(rep_fn(T, esolver), chain,
                                                                                           ev, es)
        fp, _ = compile_fn(plain_fn(T, psolver), chain, s)
        final, tot = fe(chain, ev, es)
        cases["ev_" + name], cases["plain_" + name] = (fe, (chain, ev, es)), (fp, (chain, s))
        info[name] = (esolver, psolver, tot_py(tot), final, ce)
    smp = time_many(cases)
    rows, res = [], {}
    for name, (esolver, psolver, t, final, ce) in info.items():
        te, tp = smp["ev_" + name], smp["plain_" + name]
        res[name] = {"ev": med(te) / T, "plain": med(tp) / T, "tot": t, "final": final}
        log(f"  {name}: event {fmt_t(med(te) / T)}/quantum, plain {fmt_t(med(tp) / T)}/quantum")
        rows.append([f"`{type(esolver).__name__}()` / `{type(psolver).__name__}()`", fmt_t(med(te) / T),
                     fmt_t(med(tp) / T), f"{paired_ratio(te, tp):.1f}×", int(t["impacts"]), int(t["limit_hits"]),
                     f"{float(t['slots_mean']):.3f}", f"{ce:.1f} s"])
    res["kkt_over_rec"] = paired_ratio(smp["ev_kkt"], smp["ev_recursive"])
    res["rec_over_short"] = paired_ratio(smp["ev_recursive"], smp["ev_short"])
    dx = float(jnp.max(jnp.abs(res["kkt"]["final"].state.x - res["recursive"]["final"].state.x)))
    R.add(md_table(["event solver / plain solver", "event per quantum", "plain per quantum", "event / plain",
                    "impacts", "limit hits", "slots/quantum", "compile event"], rows))
    R.add(f"\nRecursive / ShortChain event rollout: {res['rec_over_short']:.2f}×. "
          f"KKT / Recursive event rollout: {res['kkt_over_rec']:.2f}×; max |x_final(KKT) − "
          f"x_final(recursive)| = {dx:.1e} m after {T} quanta"
          + (" (same physics, not the same trajectory: round-off differences between the solvers change the timing "
             "and order of the contacts of the landing; see the impact counts)." if dx > 1e-6 else ".") + "\n")
    return res


# ------------------------------------------------------------------------------------------------- section 6: grad

def section_grad():
    T, k, B = ARGS.grad_steps, K_BUDGET, 64
    n = k + 1
    R.add(f"## 6. Reverse-mode gradients of event rollouts ({k}-link chain, T = {T})\n")
    R.add("loss = Σ x_final² + Σ v_final² after `event_rollout` (default `checkpoint=1`: each quantum recomputed in the "
          "reverse pass) from a drop given by its joint angles and height (`from_joint_angles`), differentiated with "
          "respect to both. *One chain*: the drop of section 1 (joint rates ±8 rad/s, a joint swings into its "
          f"limit, the chain lands). *{B} chains*: the random drops of section 3, `vmap` of `grad` and `grad` of the "
          "summed `vmap`, against the `vmap`-ed forward loss. Per quantum (per chain and quantum), median (best in "
          "brackets); forward and gradients timed round-robin, ratio = median of the per-round ratios; compile = "
          "trace + XLA compile.\n")
    chain = dc.free_chain(k, mass=1.0, length=0.5)
    ev = make_events(n, 0.0)
    _, s1 = drop_state(k, 8.0)
    th1, thd1 = dc.joint_angles(s1), dc.joint_velocities(s1)[:k]

    def loss(theta, height, theta_dot, base_v):
        s = dc.from_joint_angles(chain, theta, theta_dot, base=jnp.stack([jnp.zeros_like(height), height]),
                                 base_velocity=base_v)
        final, _ = dc.event_rollout(chain, ev, dc.EventState(s), None, DT, n_steps=T)
        return jnp.sum(final.state.x ** 2) + jnp.sum(final.state.v ** 2)

    one = (th1, s1.x[0, 1], thd1, s1.v[0])
    sb = batch_states(chain, B, seed=B)
    many = (jax.vmap(dc.joint_angles)(sb), sb.x[:, 0, 1], jax.vmap(dc.joint_velocities)(sb)[:, :k], sb.v[:, 0])
    g = jax.grad(loss, argnums=(0, 1))
    fns = {"fwd": (loss, one), "grad": (g, one),
           "fwd_b": (jax.vmap(loss), many), "vmap_grad": (jax.vmap(g), many),
           "grad_vmap": (jax.grad(lambda *a: jnp.sum(jax.vmap(loss)(*a)), argnums=(0, 1)), many)}
    cases, comp = {}, {}
    for name, (f, args) in fns.items():
        c, comp[name] = compile_fn(f, *args)
        out = c(*args)
        assert all(bool(jnp.all(jnp.isfinite(o))) for o in jax.tree.leaves(out)), name
        cases[name] = (c, args)
        log(f"  compiled {name}: {comp[name]:.1f} s")
    smp = time_many(cases)
    per = {name: T * (B if name in ("fwd_b", "vmap_grad", "grad_vmap") else 1) for name in fns}
    res = {name: med(smp[name]) / per[name] for name in fns}
    best = {name: min(smp[name]) / per[name] for name in fns}
    res["ratio"] = paired_ratio(smp["grad"], smp["fwd"])
    res["ratio_vg"] = paired_ratio(smp["vmap_grad"], smp["fwd_b"])
    res["ratio_gv"] = paired_ratio(smp["grad_vmap"], smp["fwd_b"])
    res["compile"] = comp
    cell = lambda name: f"{fmt_t(res[name])} ({fmt_t(best[name])})"  # noqa: E731
    rows = [["one chain, `grad`", cell("fwd"), cell("grad"), f"**{res['ratio']:.1f}×**",
             f"{comp['fwd']:.1f} s / {comp['grad']:.1f} s"],
            [f"{B} chains, `vmap(grad)`", cell("fwd_b"), cell("vmap_grad"), f"**{res['ratio_vg']:.0f}×**",
             f"{comp['fwd_b']:.1f} s / {comp['vmap_grad']:.1f} s"],
            [f"{B} chains, `grad(vmap)`", cell("fwd_b"), cell("grad_vmap"), f"**{res['ratio_gv']:.0f}×**",
             f"{comp['fwd_b']:.1f} s / {comp['grad_vmap']:.1f} s"]]
    for r in rows:
        log("  " + " | ".join(str(c) for c in r))
    R.add(md_table(["case", "forward per (chain·) quantum", "gradient per (chain·) quantum", "gradient / forward",
                    "compile forward / gradient"], rows))
    R.add("")
    return res


# ---------------------------------------------------------------------------------------------- section 5: profile

_TRIVIAL = {"parameter", "get-tuple-element", "tuple", "constant", "bitcast"}


def kernel_count(compiled):
    """Approximate number of kernels (XLA CPU thunks: fusions, dots, copies, ...) one call executes: the non-trivial
    instructions outside fused computations, each ``while`` body weighted by its known trip count, a ``conditional``
    counted with its largest branch (an upper bound). None if the HLO text cannot be parsed."""
    import re
    try:
        txt = compiled.as_text()
    except Exception:  # noqa: BLE001
        return None
    comps, entry, cur = {}, None, None
    for line in txt.splitlines():
        m = re.match(r"^(ENTRY )?%?([\w.\-]+) .*\{\s*$", line)
        if m:
            cur = m.group(2)
            comps[cur] = []
            entry = cur if m.group(1) else entry
        elif line.startswith("}"):
            cur = None
        elif cur is not None and re.match(r"\s+(ROOT )?%?\S+ = ", line):
            comps[cur].append(line)
    memo = {}

    def count(name):
        if name in memo:
            return memo[name]
        total = 0
        for line in comps.get(name, ()):
            m = re.search(r"= (?:\([^=]*?\)|\S+) ([\w\-]+)\(", re.sub(r"/\*.*?\*/", "", line))
            op = m.group(1) if m else "?"
            if op in _TRIVIAL:
                continue
            if op == "while":
                body = re.search(r"body=%?([\w.\-]+)", line).group(1)
                cond = re.search(r"condition=%?([\w.\-]+)", line).group(1)
                trip = re.search(r'"known_trip_count":\{"n":"(\d+)"', line)
                trip = int(trip.group(1)) if trip else 1
                total += trip * count(body) + (trip + 1) * count(cond)
            elif op == "conditional":
                names = re.findall(r"%([\w.\-]+)", line.split("branch_computations=")[-1]
                                   if "branch_computations=" in line else
                                   " ".join(re.findall(r"(?:true|false)_computation=%?[\w.\-]+", line)))
                names = [nm for nm in names if nm in comps]
                total += 1 + max((count(nm) for nm in names), default=0)
            elif op == "call":
                callee = re.search(r"to_apply=%?([\w.\-]+)", line)
                total += count(callee.group(1)) if callee else 1
            else:
                total += 1
        memo[name] = total
        return total

    return count(entry) if entry else None



def _seed_quantum(s, a, h):
    return dc.State(s.x + h * s.v + 0.5 * h**2 * a, s.v + h * a, s.t + h)


def ladder_fns(T, stab_factor=5.0):
    """Rollouts of T quanta that add the pieces of a quiet event quantum one at a time (all SeedQuantum, dt = DT, the
    EventState carried through ``lax.scan`` so its masks are runtime data as inside ``event_step``):

      part1:   the plain step (Recursive, Part I);
      part2:   the same step with ``active_dynamics_recursive`` (Part II; no joint held) as the solver;
      cd:      the same step with ``events.constrained_dynamics`` (Part II + masks, PD/impulse inputs, reactions R);
      cd_det:  cd + ``events.detect`` on the quantum (its result kept alive);
      one:     a quiet quantum without the bookkeeping: its one slot (the trial) = detect with the accelerations the
               last quantum left in the EventState, the quantum integrated, constrained at its end (stored for the
               next quantum), the error estimate kept alive.
    """
    stab = stab_factor * DT
    z = jnp.zeros((), bool)

    def cd(chain, events, es, s, u, impulse=z):
        return dce.constrained_dynamics(chain, events, es, s.x, s.v, s.t, u, stab, impulse)

    def keep(s, *xs):  # makes the extra outputs live without changing the state (0 * finite = 0)
        return dc.State(s.x, s.v, s.t + 0.0 * sum(jnp.sum(jnp.where(jnp.isfinite(x), x, 0.0)) for x in xs))

    def rollout_of(body):
        def f(chain, events, es):
            def step(e, _):
                u = dc.Control(n=chain.n, dtype=F64)
                out = body(chain, events, e, e.state, u)
                if isinstance(out, tuple):  # (state, accelerations for the next quantum)
                    return eqx.tree_at(lambda x: (x.state, x.a), e, out), None
                return eqx.tree_at(lambda x: x.state, e, out), None
            final, _ = jax.lax.scan(step, es, None, length=T)
            return final
        return f

    def part1(chain, events, es, s, u):
        return _seed_quantum(s, dc.Recursive()(chain, s, u, stab).a, DT)

    def part2(chain, events, es, s, u):
        a, phi, tau = dc.active_dynamics_recursive(chain, s, u, es.held, es.side, es.side, stab)
        return keep(_seed_quantum(s, a, DT), phi, tau)

    def cdq(chain, events, es, s, u):
        a, tau, Rf = cd(chain, events, es, s, u)
        return keep(_seed_quantum(s, a, DT), tau, Rf)

    def cd_det(chain, events, es, s, u):
        a, tau, Rf = cd(chain, events, es, s, u)
        (s_c, _, _), (s_l, _, _) = dcd.detect(chain, events, es, s.x, s.v, a, DT)
        return keep(_seed_quantum(s, a, DT), tau, Rf, s_c, s_l)

    def one(chain, events, es, s, u):  # a quiet quantum's one slot: detect, the quantum, one solver call at its end
        (s_c, _, _), (s_l, _, _) = dcd.detect(chain, events, es, s.x, s.v, es.a, DT)
        s1 = _seed_quantum(s, es.a, DT)
        a1, tau1, R1 = cd(chain, events, es, s1, u)
        err = jnp.max(jnp.linalg.norm(a1 - es.a, axis=-1)) * DT
        return keep(s1, s_c, s_l, tau1, R1, err), a1

    return {name: rollout_of(b) for name, b in (("part1", part1), ("part2", part2), ("cd", cdq), ("cd_det", cd_det),
                                                 ("one", one))}


def section_profile(single):
    T = ARGS.steps
    R.add(f"## 5. Where the single-chain time goes (quiet start, k = {', '.join(map(str, PROFILE_SIZES))} links, "
          f"T = {T}, per quantum)\n")
    R.add("A ladder of rollouts that adds the pieces of a quiet event quantum one at a time (`ladder_fns`; all "
          "SeedQuantum, the EventState carried through `lax.scan` so its masks are runtime data, as inside "
          "`event_step`; final state returned): *Part I* = the plain step (`Recursive`); *Part II* = the same step "
          "with `active_dynamics_recursive` as the solver (nothing held); *+ masks/reactions* = with "
          "`events.constrained_dynamics` (the solver call each slot makes: masks, PD/impulse inputs, the solver, the "
          "reactions R; in the measured tree, with no joint held, its solver is "
          + ("the Part I recursion via the solver's Part I call inside a `lax.cond`" if PART_ONE else
             "the Part II recursion") + "); *+ detect* = plus `events.detect`; *1 slot* = a quiet quantum without its bookkeeping (its one "
          "slot: detect with the accelerations cached by the last quantum, the quantum integrated, one constrained "
          "call at its end, error estimate); *event_rollout* on the quiet start (section 1's compiled function). All rollouts of a "
          "size timed round-robin; the table gives the **minimum** over the rounds (the least disturbed sample) and "
          "the paired median ratio to Part I in brackets. *kernels*: approximate number of XLA CPU kernels one call "
          "executes (`kernel_count` on the compiled HLO: fusions, dots, copies, ..., loop bodies weighted by their "
          "trip counts).\n")
    fns = ladder_fns(T)
    rows, krows, res = [], [], {}
    stab = 5.0 * DT
    for k in PROFILE_SIZES:
        n = k + 1
        chain, s = drop_state(k, 0.0)
        ev8 = make_events(n, -1000.0)
        es = dc.EventState(s)
        cases = {}
        for name, f in fns.items():
            c, _ = compile_fn(f, chain, ev8, es)
            cases[name] = (c, (chain, ev8, es))
        pre = single["res"].get(k, {}).get("fe") if single else None
        cases["ev8"] = (pre if pre is not None else compile_fn(ev_fn(T), chain, ev8, es)[0], (chain, ev8, es))
        smp = time_many(cases)
        r = {name: min(v) / T for name, v in smp.items()}
        r["ratio"] = {name: paired_ratio(v, smp["part1"]) for name, v in smp.items()}
        u1 = dc.Control(n=n, dtype=F64)
        pieces = {
            "part1": (lambda ch, e, x, u1=u1: dc.Recursive()(ch, x.state, u1, stab).a),
            "part2": (lambda ch, e, x, u1=u1: dc.active_dynamics_recursive(ch, x.state, u1, x.held, x.side, x.side,
                                                                           stab)),
            "cd": (lambda ch, e, x, u1=u1: dce.constrained_dynamics(ch, e, x, x.x, x.v, x.t, u1, stab,
                                                                    jnp.zeros((), bool))),
            "detect": (lambda ch, e, x: dcd.detect(ch, e, x, x.x, x.v, jnp.zeros_like(x.x), DT)),
        }
        kern = {name: kernel_count(jax.jit(f).lower(chain, ev8, es).compile()) for name, f in pieces.items()}
        r["kern"] = kern
        res[k] = r
        log(f"  k={k:2d} min per quantum: " + ", ".join(f"{nm} {fmt_t(r[nm])}" for nm in cases)
            + "; paired median / part1: " + ", ".join(f"{nm} {r['ratio'][nm]:.1f}x" for nm in cases)
            + f"; kernels {kern}")
        book = r["ev8"] - r["one"]
        rows.append([k, n] + [f"{fmt_t(r[nm])} ({r['ratio'][nm]:.1f}×)" for nm in
                              ("part1", "part2", "cd", "cd_det", "one", "ev8")]
                    + [f"{fmt_t(book)} ({book / r['ev8'] * 100:.0f} %)"])
        fk = lambda x: "–" if x is None else f"{x:.0f}"  # noqa: E731
        krows.append([k, n, fk(kern["part1"]), fk(kern["part2"]),
                      "–" if not (kern["part1"] and kern["part2"]) else f"{kern['part2'] / kern['part1']:.1f}×",
                      fk(kern["cd"]), fk(kern["detect"])])
    # XLA CPU runs a loop body's kernels in sequence only while all its buffers are <= 512 bytes
    # (ThunkExecutor::Options::execute_sequential_buffer_threshold); (n, 2, 2) float64 = 32 n bytes crosses it at n = 17
    thr = {}
    for k in (13, 14, 15, 16, 17):
        chain, s = drop_state(k, 0.0)
        c, _ = compile_fn(plain_fn(T), chain, s)
        thr[k + 1] = min(time_many({"p": (c, (chain, s))})["p"]) / T
    res["threshold"] = thr
    log("  plain step per quantum around the 512-byte threshold: "
        + ", ".join(f"n={n_}: {fmt_t(t_)}" for n_, t_ in thr.items()))
    R.add(md_table(["links k", "n", "Part I (plain step)", "Part II step", "+ masks/reactions", "+ detect",
                    "1 slot (quiet quantum w/o bookkeeping)", "event_rollout (slots 8)",
                    "bookkeeping = event slots 8 − 1 slot (share)"], rows))
    R.add("\nKernels executed per call (approximate). On 2-vectors a kernel is a handful of flops, so the time follows "
          "the number of kernels and loop iterations, not the arithmetic:\n")
    R.add(md_table(["links k", "n", "Part I call", "Part II call", "Part II / Part I",
                    "constrained call" + (" (counted with its larger, Part II branch)" if PART_ONE else ""), "detect"],
                   krows))
    R.add("\nThe plain step around n = 17 (min per quantum), where the (n, 2, 2) float64 loop buffers of the recursion "
          "pass XLA CPU's 512-byte limit for executing a loop body's kernels in sequence "
          "(`ThunkExecutor::Options::execute_sequential_buffer_threshold`; above it the body runs through the "
          "concurrent dataflow executor):\n")
    R.add(md_table(["n"] + [str(n_) for n_ in thr], [["plain per quantum"] + [fmt_t(t_) for t_ in thr.values()]]))
    R.add("")
    return res


# ------------------------------------------------------------------------------------------------------- reading

def reading(single, budget, batched, kkt, prof):
    """One paragraph built from the measured numbers (only the sections that ran)."""
    parts = ["**Reading.**"]
    kb = K_BUDGET
    if single:
        res = single["res"]
        act = [r["active"]["ratio"] for r in res.values()]
        qui = [r["quiet"]["ratio"] for r in res.values()]
        act_m = [r["active"]["ratio_min"] for r in res.values()]
        qui_m = [r["quiet"]["ratio_min"] for r in res.values()]
        ks = sorted(res)
        if max(act + qui) <= 3:
            verdict = "met."
        elif min(act + qui + act_m + qui_m) > 6:
            verdict = "**not met**, by a wide margin."
        else:
            verdict = "**not met**."
        def span(xs, fmt="{:.1f}"):
            lo, hi = fmt.format(min(xs)), fmt.format(max(xs))
            return lo if lo == hi else f"{lo}–{hi}"

        slots_span = span([float(res[k]["active"]["tot"]["slots_mean"]) for k in ks if "tot" in res[k]["active"]],
                          "{:.2f}")

        parts.append(
            f"Single chain{' (pinned to one core)' if PINNED else ''}: an event quantum costs {span(act)}× a plain "
            f"SeedQuantum/Recursive step on the drops (n = {span([k + 1 for k in ks], '{}')}; ratio of the minima "
            f"{span(act_m)}×) and {span(qui)}× (minima {span(qui_m)}×) when nothing happens, so the issue's floor "
            f"(≤ 3× for the single chain) is {verdict} Events themselves are rare in time ({slots_span} slots per "
            f"quantum on the drops: a handful of impact/limit quanta among the {ARGS.steps})")
        if kb in res and "tot" in res[kb]["active"]:
            a, q = res[kb]["active"], res[kb]["quiet"]
            held, stuck = int(a["tot"]["held_quanta"]), int(a["tot"]["stuck_quanta"])
            if PART_ONE and held:
                parts[-1] += (
                    f", but their consequences last: on the n = {kb + 1} drop a point is stuck after {stuck} and a "
                    f"joint held at its limit after {held} of the {ARGS.steps} quanta, and while a joint is held every "
                    f"solver call is the active-joint solver (the Part II recursion) instead of the Part I fallback "
                    f"— hence {a['ratio']:.1f}× "
                    f"on the drop vs {q['ratio']:.1f}× in free fall.")
            else:
                parts[-1] += (f"; on the n = {kb + 1} drop a point is stuck after {stuck} and a joint held after "
                              f"{held} of the {ARGS.steps} quanta ({a['ratio']:.1f}× vs {q['ratio']:.1f}× quiet).")
        else:
            parts[-1] += "."
        if max(ks) >= 16 and any(k < 16 for k in ks):
            big, small = max(ks), max(k for k in ks if k < 16)
            txt = (f"The ratio is lower at n = {big + 1} ({res[big]['quiet']['ratio']:.1f}× quiet) than at n = "
                   f"{small + 1} ({res[small]['quiet']['ratio']:.1f}×) mostly because the plain step itself jumps "
                   f"({fmt_t(res[small]['quiet']['plain'])} → {fmt_t(res[big]['quiet']['plain'])} per quantum)")
            thr = (prof or {}).get("threshold")
            if thr and 16 in thr and 17 in thr:
                txt += (f", between n = 16 and 17 ({fmt_t(thr[16])} → {fmt_t(thr[17])}, section 5), where the "
                        "(n, 2, 2) float64 loop buffers pass XLA CPU's 512-byte limit for sequential kernel execution")
            parts.append(txt + ".")
    if prof and kb in prof:
        p = prof[kb]
        pr = p["ratio"]
        share = (1 - p["one"] / p["ev8"]) * 100
        parts.append(
            f"The ladder of section 5 (n = {kb + 1}, paired ratios to the plain step): a step with "
            f"`active_dynamics_recursive` (the Part II recursion) as its solver costs {pr['part2']:.1f}×; a step with `constrained_dynamics`, the call each slot "
            f"makes, {pr['cd']:.1f}×"
            + (" (with no joint held it runs the Part I recursion, `part_one`)" if PART_ONE else "")
            + f"; + `detect` {pr['cd_det']:.1f}×; the one slot of a quiet quantum (one detect, one solver "
            f"call) {pr['one']:.1f}×; the full `event_rollout` {pr['ev8']:.1f}×, so the slot "
            "bookkeeping (the `lax.scan` over the slots, the conds, the selects and `tree_at`s of the slot body, "
            f"release and scuffing tests, the report) is {share:.0f} % of the event quantum.")
        big = max(PROFILE_SIZES)
        if big in prof and big != kb:
            q = prof[big]
            parts.append(
                f"At n = {big + 1}: Part II step {q['ratio']['part2']:.1f}×, constrained {q['ratio']['cd']:.1f}×, "
                f"1 slot {q['ratio']['one']:.1f}×, event {q['ratio']['ev8']:.1f}× (bookkeeping "
                f"{(1 - q['one'] / q['ev8']) * 100:.0f} %).")
        kern = p["kern"]
        if kern.get("part1") and kern.get("part2"):
            parts.append(
                f"At n = {kb + 1} an active-joint call executes {kern['part2'] / kern['part1']:.1f}× as many XLA "
                f"kernels as a Part I call ({kern['part2']:.0f} vs {kern['part1']:.0f}; "
                "12 coefficient groups, degenerate-case rules and locking tests per point instead of 4 groups"
                "), and with a few flops per kernel the time follows the kernel count.")
        if pr["one"] > 3.3:
            parts.append(
                f"So the solver work alone (one call per quantum, ≈ {pr['one']:.1f}× without any bookkeeping) "
                f"already exceeds the 3× floor, and the bookkeeping adds {share:.0f} % on top.")
        elif pr["one"] >= 2.7:
            parts.append(
                f"So in a quiet quantum the solver work alone (one Part I call + one detect, ≈ {pr['one']:.1f}×) "
                f"is already at the 3× floor, and the bookkeeping ({share:.0f} % of the event quantum) puts it over; "
                "on the drops the held joints' active-joint calls add the rest.")
        else:
            parts.append(
                f"So a quiet quantum fits under the 3× floor (solver work ≈ {pr['one']:.1f}×, bookkeeping {share:.0f} % "
                f"of the event quantum); what remains on the drops are the held joints' active-joint calls (a step "
                f"with them costs {pr['part2']:.1f}× a plain one) and, at small n, the bookkeeping.")
    if budget:
        bud = {(b["label"], b["slots"], b["depth"], b["thr"]): b for b in budget}
        q4, q8 = bud.get(("quiet", 4, 3, 1.0)), bud.get(("quiet", 8, 3, 1.0))
        if q4 and q8:
            parts.append(
                f"Without vmap the budget costs little: a quiet quantum costs {q4['ratio']:.1f}× a plain step with 4 "
                f"slots and {q8['ratio']:.1f}× with 8 (4 more skipped conds; min {fmt_t(q4['ev_min'])} vs "
                f"{fmt_t(q8['ev_min'])}).")
        h0, h3 = bud.get(("active", 8, 0, 1e-3)), bud.get(("active", 8, 3, 1e-3))
        if h0 and h3 and int(h3["tot"]["halvings"]) > 0:
            parts.append(
                f"Threshold 1e-3 makes {int(h3['tot']['halvings'])} halvings per rollout at max_depth 3 (none at "
                f"max_depth 0): {h3['ratio']:.1f}× vs {h0['ratio']:.1f}× a plain step (min {fmt_t(h3['ev_min'])} vs "
                f"{fmt_t(h0['ev_min'])} per quantum; mean slots "
                f"{float(h3['tot']['slots_mean']):.3f} vs {float(h0['tot']['slots_mean']):.3f}): a rare halving costs "
                "about one extra slot in the quantum where it happens.")
    if batched:
        by = {(b["B"], b["slots"]): b for b in batched}
        b8 = by.get((max(ARGS.batches), 8))
        if b8:
            txt = (f"Batched (B = {b8['B']}, vmap): event/plain = {b8['ratio']:.0f}× at slots 8 "
                   f"({b8['ev_rate']:.3g} vs {b8['plain_rate']:.3g} quanta·chains/s)")
            small = [by[key] for key in sorted(by) if key[0] == min(ARGS.batches)]
            if len(small) > 1:
                txt += f"; at B = {min(ARGS.batches)}: " + ", ".join(
                    f"{b['ratio']:.0f}× at slots {b['slots']}" for b in small)
            txt += ("; the slots run only on the chains whose quiet trial does not apply, and only while they "
                    "need them (`batching.rare_cond`, `batching.scan_until`), so the budget costs "
                    "nothing where it is not used.")
            parts.append(txt)
    if kkt:
        parts.append(f"KKT instead of Recursive: {kkt['kkt_over_rec']:.2f}× the event quantum at "
                     f"n = {kb + 1}.")
    return " ".join(parts)


# ---------------------------------------------------------------------------------------------------------- main

def main():
    if ARGS.json:  # worker: section single's headline pair only, as JSON
        res = single_measure(ARGS.sizes)
        out = {k: {name: {kk: vv for kk, vv in r[name].items() if isinstance(vv, float)} for name in ("active", "quiet")}
               for k, r in res.items()}
        print("RESULT " + json.dumps(out), flush=True)
        return
    t_start = time.perf_counter()
    facts = machine_facts()
    R.add(f"# diffchain events benchmark — {facts['date']}\n")
    R.add("`python benchmarks/bench_events.py` — cost of `event_step` / `event_rollout` (diffchain/events.py) "
          "against a plain `step` / `rollout`, float64. Method: jit, compile, warm-up call, then "
          f"{ARGS.repeats} timed rounds with `block_until_ready`, cases compared with each other timed round-robin, "
          "median (min in brackets); see the script's docstring for the two traps (returned buffers, threads).\n")
    R.add(md_table(["", ""], [[k, v] for k, v in facts.items()]))
    R.add("")
    secs = {name: None for name in SECTIONS}
    calls = {"single": lambda: section_single(), "budget": lambda: section_budget(secs["single"]),
             "batched": lambda: section_batched(), "kkt": lambda: section_kkt(secs["single"]),
             "profile": lambda: section_profile(secs["single"]), "grad": lambda: section_grad()}
    for name in SECTIONS:
        if name in ARGS.sections:
            t0 = time.perf_counter()
            secs[name] = calls[name]()
            log(f"  [section {name}: {time.perf_counter() - t0:.0f} s]\n")
    R.add(reading(secs["single"], secs["budget"], secs["batched"], secs["kkt"], secs["profile"]))
    R.save(ARGS.out or os.path.join(HERE, "results", f"bench-events-{datetime.date.today().isoformat()}.md"), t_start)

if __name__ == "__main__":
    main()
