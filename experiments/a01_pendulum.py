"""IFToMM multibody benchmark A01, the simple pendulum: work-precision of diffchain's integrators against scipy's
Radau and DOP853, measured from the exact solution.

The benchmark (IFToMM Library of Computational Benchmark Problems, A01; González et al. 2006): a point mass of 1 kg on
a massless link of 1 m, pinned at the origin, under g = 9.81 m/s^2 along -y, released at rest horizontal (P1 at
(1, 0)), simulated for 2000 s; the result is P1's position at 4000 output times (every 0.5 s), within 1e-3 for the
benchmark's high precision.

The reference here is exact: released from horizontal, the angle from the bottom phi obeys
sin(phi / 2) = k sn(K(k) - sqrt(g / L) t, k) with k = sin(pi / 4) (the swing's amplitude pi / 2), Jacobi's elliptic
function sn and the complete elliptic integral K (scipy.special). The error of a run is the largest distance of its P1
from the exact P1 over the output times; its work is its wall-clock time (compiled once before; the best of 3 with ``--quick``).

diffchain runs the chain ``dc.pendulum(1)`` in point coordinates with its integrators at fixed steps (the default
``Projected()``, RK4 projected onto the rod after each step; RK4 with its drift correction instead; velocity Verlet,
projected; RATTLE), one compiled program per run (``lax.scan`` over the output intervals of ``dc.rollout``). scipy solves the pendulum's own equation in its
minimal coordinate, theta'' = -(g / L) cos(theta), by ``solve_ivp`` with adaptive steps at tolerances rtol = atol
from 1e-4 to 1e-10: the peer as its users run it, on the easier equation (one coordinate, no constraint).

    python experiments/a01_pendulum.py [--quick] [--out experiments/results/a01_pendulum.png]

writes the picture and, beside it, the table (a01_pendulum.md). ``--quick``: 20 s instead of 2000 s.
"""
from __future__ import annotations

import argparse
import os
import time

import jax

jax.config.update("jax_enable_x64", True)  # errors down to 1e-10: float64

import jax.numpy as jnp  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from scipy import integrate, special  # noqa: E402

import diffchain as dc  # noqa: E402

G, L = 9.81, 1.0
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "a01_pendulum.png")


def exact(t):
    """P1 at times t: sin(phi/2) = k sn(K - w t, k), phi the angle from the bottom (positive towards +x)."""
    k = np.sin(np.pi / 4)
    m = k**2
    sn, cn, dn, _ = special.ellipj(special.ellipk(m) - np.sqrt(G / L) * t, m)
    phi = 2 * np.arcsin(k * sn)
    return np.stack([L * np.sin(phi), -L * np.cos(phi)], -1)


def diffchain_run(integrator, dt, outputs, every, repeats):
    """P1 at the output times (every ``every`` seconds, ``outputs`` of them) with ``integrator`` at step ``dt``, and
    the run's best wall time of ``repeats``."""
    chain = dc.pendulum(1, mass=1.0, length=L)
    start = dc.from_joint_angles(chain, jnp.array([0.0]))  # horizontal, at rest: P1 at (1, 0)
    k = int(round(every / dt))

    @jax.jit
    def run(state):
        def segment(s, _):
            s, _ = dc.rollout(chain, s, None, dt, n_steps=k, integrator=integrator, check=False)
            return s, s.x[1]
        return jax.lax.scan(segment, state, None, length=outputs)[1]

    P = jax.block_until_ready(run(start))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(run(start))
        times.append(time.perf_counter() - t0)
    return np.asarray(P), min(times)


def scipy_run(method, tol, t_out, repeats):
    """P1 at ``t_out`` by solve_ivp on theta'' = -(g/L) cos(theta) (theta from +x), and its best wall time of ``repeats``."""
    def f(t, y):
        return [y[1], -(G / L) * np.cos(y[0])]

    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sol = integrate.solve_ivp(f, (0.0, t_out[-1]), [0.0, 0.0], method=method, rtol=tol, atol=tol, t_eval=t_out)
        times.append(time.perf_counter() - t0)
    th = sol.y[0]
    return np.stack([L * np.cos(th), L * np.sin(th)], -1), min(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="20 s instead of 2000 s, fewer runs")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    duration, every = (20.0, 0.5) if args.quick else (2000.0, 0.5)
    outputs = int(round(duration / every))
    t_out = every * np.arange(1, outputs + 1)
    ref = exact(t_out)
    dts = [1e-2, 5e-3, 2.5e-3] if args.quick else [2e-2, 1e-2, 5e-3, 2.5e-3, 1.25e-3]
    tols = [1e-6, 1e-9] if args.quick else [1e-4, 1e-6, 1e-8, 1e-10]
    repeats = 3 if args.quick else 1
    integrators = {"diffchain default: RK4, projected": dc.Projected(), "diffchain RK4, drift-corrected": dc.RK4(),
                   "diffchain velocity Verlet, projected": dc.Projected(dc.VelocityVerlet(stab_factor=None)),
                   "diffchain RATTLE": dc.RATTLE()}
    rows = []  # (method, setting, error, seconds)
    for name, integrator in integrators.items():
        for dt in dts:
            P, sec = diffchain_run(integrator, dt, outputs, every, repeats)
            rows.append((name, f"dt = {dt:g}", float(np.max(np.linalg.norm(P - ref, axis=-1))), sec))
            print(f"{rows[-1][0]:40s} {rows[-1][1]:16s} error {rows[-1][2]:.3e} m  {sec:.3f} s", flush=True)
    for method in ("DOP853", "Radau"):
        for tol in tols:
            P, sec = scipy_run(method, tol, t_out, repeats)
            rows.append((f"scipy {method}", f"tol = {tol:g}", float(np.max(np.linalg.norm(P - ref, axis=-1))), sec))
            print(f"{rows[-1][0]:40s} {rows[-1][1]:16s} error {rows[-1][2]:.3e} m  {sec:.3f} s", flush=True)

    out = os.path.abspath(args.out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    fig, ax = plt.subplots(figsize=(7.5, 5), constrained_layout=True)
    for name in dict.fromkeys(r[0] for r in rows):
        e, s = zip(*[(r[2], r[3]) for r in rows if r[0] == name])
        ax.loglog(s, e, marker="o" if name.startswith("diffchain") else "s", label=name)
    ax.axhline(1e-3, color="0.4", ls="--", lw=1, label="A01 high precision (1e-3 m)")
    ax.set_xlabel("wall time [s] (one core, compiled)")
    ax.set_ylabel("largest error of P1 over the outputs [m]")
    ax.set_title(f"IFToMM A01, the simple pendulum: {duration:g} s, {outputs} outputs")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.savefig(out, dpi=100)
    table = os.path.splitext(out)[0] + ".md"
    with open(table, "w") as f:
        f.write(f"# IFToMM A01, the simple pendulum: {duration:g} s, {outputs} outputs, errors from the exact "
                "solution\n\n| method | setting | largest error of P1 [m] | wall time [s] |\n|---|---|---|---|\n")
        f.writelines(f"| {m} | {s} | {e:.2e} | {t:.3g} |\n" for m, s, e, t in rows)
    print(table)
    print(out)


if __name__ == "__main__":
    main()
