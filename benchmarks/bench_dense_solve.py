"""Large dense solves: the dense solvers' factorization (``factorization=``: LAPACK or the XLA loops of
diffchain/_xla/linalg.py) on one large system, float64, one state (no batch).

* ``solve``: one n x n solve (n = 768 by default) by ``jnp.linalg.solve`` (LAPACK), by ``linalg.solve`` with each
  factorization, checked against ``numpy.linalg.solve``;
* ``kkt``: ``dc.forward_dynamics(chain, state, None, solver=dc.KKT(...))`` of a 256-point pendulum, checked against the
  O(n) recursion (``dc.Recursive()``);
* ``fourbar``: the IFToMM N-four-bar (tests/analysis/test_failure_reports.py, N = 40 cranks), 5000 steps of RK4 at
  dt = 2e-3 with the default dense solver, timed once after compiling; its first crank checked against the
  one-degree-of-freedom solution.

    python benchmarks/bench_dense_solve.py [--only solve,kkt,fourbar] [--factorization auto,lapack,xla]

Runs on older versions of the library too (without ``factorization=``: the column ``default``), to measure before and
after a change in one way.
"""
import argparse
import os
import platform
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")    # as benchmarks/bench.py: LAPACK's threads off XLA's pool
import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import diffchain as dc  # noqa: E402
from diffchain._xla import linalg  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from benchutil import cpu_description  # noqa: E402

dc.set_xla_cpu_flags()


def best_of(f, *args, repeats=5):
    jax.block_until_ready(f(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        times.append(time.perf_counter() - t0)
    return min(times), float(np.median(times))


def has_factorization():
    try:
        dc.KKT(factorization="xla")
        return True
    except TypeError:
        return False


def solvers(choices):
    if not has_factorization():
        return {"default": dc.KKT()}
    return {f: dc.KKT(factorization=f) for f in choices}


def section_solve(n, choices):
    rng = np.random.default_rng(0)
    A, b = rng.normal(size=(n, n)), rng.normal(size=n)
    ref = np.linalg.solve(A, b)
    fns = {"jnp.linalg.solve": jax.jit(jnp.linalg.solve)}
    if has_factorization():
        fns.update({f"linalg.solve({f})": jax.jit(lambda A, b, f=f: linalg.solve(A, b, factorization=f))
                    for f in choices})
    else:
        fns["linalg.solve"] = jax.jit(linalg.solve)
    for name, f in fns.items():
        t, med = best_of(f, jnp.asarray(A), jnp.asarray(b))
        err = np.max(np.abs(np.asarray(f(A, b)) - ref)) / np.max(np.abs(ref))
        print(f"solve {n}x{n}  {name:24s} {t * 1e3:9.2f} ms (median {med * 1e3:.2f})  rel. error vs numpy {err:.1e}",
              flush=True)


def section_kkt(points, choices):
    chain = dc.pendulum(points - 1)
    rng = np.random.default_rng(1)
    state = dc.from_joint_angles(chain, jnp.asarray(rng.uniform(-1, 1, points - 1)),
                                 jnp.asarray(rng.uniform(-1, 1, points - 1)))
    ref = np.asarray(jax.jit(lambda c, s: dc.forward_dynamics(c, s, None, solver=dc.Recursive()))(chain, state))
    for name, solver in solvers(choices).items():
        f = jax.jit(lambda c, s, sv=solver: dc.forward_dynamics(c, s, None, solver=sv))
        t, med = best_of(f, chain, state)
        err = np.max(np.abs(np.asarray(f(chain, state)) - ref)) / np.max(np.abs(ref))
        print(f"KKT, {points}-point pendulum  {name:8s} {t * 1e3:9.2f} ms (median {med * 1e3:.2f})  "
              f"rel. difference from Recursive {err:.1e}", flush=True)


def n_four_bar(n):
    """tests/analysis/test_failure_reports.py's N-four-bar: cranks of 1 m on a frame of unit spacing, couplers of 1 m,
    uniform bars of 1 kg, cranks up, tips at 1 m/s."""
    mb = dc.MechanismBuilder(g=9.81)
    for i in range(n):
        mb.ground(f"G{i}", (float(i), 0.0)), mb.point(f"B{i}", (float(i), 1.0))
        mb.body(f"crank{i}", f"G{i}", f"B{i}", mass=1.0, inertia=1 / 12, length=1.0)
    for i in range(n - 1):
        mb.body(f"coupler{i}", f"B{i}", f"B{i + 1}", mass=1.0, inertia=1 / 12, length=1.0)
    mech, s = mb.build()
    return mech, dc.State(s.x, jnp.tile(jnp.array([1.0, 0.0]), (n, 1)), 0.0)


def crank_reference(times, n, h=1e-4):
    """The first crank's angle from I theta'' = -k cos(theta) (I = n/3 + n - 1, k = g (n/2 + n - 1)), RK4 at h."""
    inertia, k = n / 3 + n - 1, 9.81 * (n / 2 + n - 1)
    f = lambda y: jnp.array([y[1], -k * jnp.cos(y[0]) / inertia])  # noqa: E731

    def rk4(y, _):
        k1 = f(y)
        k2 = f(y + 0.5 * h * k1)
        k3 = f(y + 0.5 * h * k2)
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + f(y + h * k3))
        return y, y[0]

    steps = int(round(float(times[-1]) / h))
    _, th = jax.lax.scan(rk4, jnp.array([np.pi / 2, -1.0]), None, length=steps)
    return np.interp(np.asarray(times), h * np.arange(1, steps + 1), np.asarray(th))


def section_fourbar(n, steps, choices):
    mech, s0 = n_four_bar(n)
    for name, solver in solvers(choices).items():
        run = jax.jit(lambda s, sv=solver: dc.rollout(mech, s, None, 2e-3, n_steps=steps, integrator=dc.RK4(),
                                                      solver=sv, check=False)[1])
        t0 = time.perf_counter()
        run = run.lower(s0).compile()
        t_compile = time.perf_counter() - t0
        t0 = time.perf_counter()
        traj = jax.block_until_ready(run(s0))
        t_run = time.perf_counter() - t0
        ref = crank_reference(np.asarray(traj.t), n)
        tip = np.stack([np.cos(ref), np.sin(ref)], -1)
        err = np.abs(np.asarray(traj.x)[:, 0] - tip).max()
        print(f"N-four-bar N = {n}, {steps} RK4 steps  {name:8s} {t_run:8.1f} s (compile {t_compile:.1f} s)  "
              f"first tip vs closed form {err:.1e} m", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="solve,kkt,fourbar")
    ap.add_argument("--factorization", default="auto,lapack,xla")
    ap.add_argument("--n", type=int, default=768)
    ap.add_argument("--points", type=int, default=256)
    ap.add_argument("--cranks", type=int, default=40)
    ap.add_argument("--steps", type=int, default=5000)
    args = ap.parse_args()
    choices = [c for c in args.factorization.split(",") if c]
    print(f"# {cpu_description()}, {os.cpu_count()} cores, {platform.python_version()}, jax {jax.__version__}, "
          f"float64, load {os.getloadavg()[0]:.2f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    only = args.only.split(",")
    if "solve" in only:
        section_solve(args.n, choices)
    if "kkt" in only:
        section_kkt(args.points, choices)
    if "fourbar" in only:
        section_fourbar(args.cranks, args.steps, choices)


if __name__ == "__main__":
    main()
