"""Batched simulation with ``jax.vmap``: many initial states of one model, and many models.

1. states: B random initial states of a 5-link pendulum (unit masses and rods), built by vmapping
   ``dc.from_joint_angles``, simulated for T steps of dt under ``jit(vmap(rollout))``;
2. models:  B random pendulums (masses in [0.5, 2], rod lengths in [0.5, 1.5]) built *inside* the vmapped function
   with ``dc.pendulum(5, mass=m, length=l)`` from traced arrays, all released from the same pose.

Reports compile time, run time and copy-steps/s (B * T / run time) per case, the worst rod-length error and energy
drift over the batch (so a fast but wrong run shows), and saves histograms of the final tip heights to
examples/out/batched.png (``--out`` to change).

    python examples/batched_rollout.py [--batch 4096] [--steps 1000] [--dt 1e-3] [--integrators seed,rk4] [--quick]
"""
from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import diffchain as dc  # noqa: E402

dc.set_xla_cpu_flags()  # this script's process: the recommended XLA CPU flags

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")
N_LINKS = 5
INTEGRATORS = {"seed": dc.SeedQuantum(), "rk4": dc.RK4(), "euler": dc.SemiImplicitEuler()}


def energy(chain, state):
    return 0.5 * jnp.sum(chain.m * jnp.sum(state.v**2, -1)) + chain.g * jnp.sum(chain.m * state.x[:, 1])


def make_sim(n_steps, dt, integrator):
    """(masses, lengths, theta, theta_dot) -> final tip height, rod-length error, relative energy drift, final x."""

    def sim(masses, lengths, theta, theta_dot):
        chain = dc.pendulum(N_LINKS, mass=masses, length=lengths)
        s0 = dc.from_joint_angles(chain, theta, theta_dot)
        free = lambda s: dc.Control(n=chain.n, dtype=s.x.dtype)  # noqa: E731 -- unforced motion
        final, _ = dc.rollout(chain, s0, free, dt, n_steps=n_steps, integrator=integrator,
                              backend=dc.PointMajor())  # a batch under vmap; the trajectory is DCE'd
        rod_err, _ = dc.constraint_violation(chain, final)
        scale = chain.g * jnp.sum(chain.m) * jnp.sum(chain.l)  # energy scale of the motion
        drift = (energy(chain, final) - energy(chain, s0)) / scale
        return final.x[-1, 1], rod_err, drift, final.x

    return sim


def timed(fn, *args, min_time=0.3, max_reps=10):
    """Compile (lower + compile), then run until ``min_time`` has passed (at most ``max_reps`` runs).

    Returns (outputs, compile s, best run s): the best of several runs, since the machine may be shared.
    """
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    compile_s = time.perf_counter() - t0
    runs = []
    while len(runs) < max_reps and sum(runs) < min_time:
        t0 = time.perf_counter()
        out = jax.block_until_ready(compiled(*args))
        runs.append(time.perf_counter() - t0)
    return out, compile_s, min(runs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--dt", type=float, default=1e-3)
    ap.add_argument("--integrators", default="seed,rk4", help="comma list of " + ",".join(INTEGRATORS))
    ap.add_argument("--out", default=os.path.join(OUT, "batched.png"))
    ap.add_argument("--quick", action="store_true",
                    help="a smoke test: 64 copies, 100 steps, SeedQuantum only, no single-copy reference")
    args = ap.parse_args()
    if args.quick:
        args.batch, args.steps, args.integrators = 64, 100, "seed"
    B, T, dt = args.batch, args.steps, args.dt
    k1, k2, k3, k4 = jax.random.split(jax.random.PRNGKey(0), 4)

    # random initial states: link 1 anywhere, relative angles within +-1 rad, rates within +-1 rad/s
    theta = jnp.concatenate([jax.random.uniform(k1, (B, 1), minval=-jnp.pi, maxval=jnp.pi),
                             jax.random.uniform(k2, (B, N_LINKS - 1), minval=-1.0, maxval=1.0)], 1)
    theta_dot = jax.random.uniform(k3, (B, N_LINKS), minval=-1.0, maxval=1.0)
    ones = jnp.ones((N_LINKS,))
    # random models, all released from rest from one bent pose
    km, kl = jax.random.split(k4)
    masses = jax.random.uniform(km, (B, N_LINKS), minval=0.5, maxval=2.0)
    lengths = jax.random.uniform(kl, (B, N_LINKS), minval=0.5, maxval=1.5)
    pose = jnp.array([0.3, 0.9, -0.7, 0.5, 0.4])

    print(f"{N_LINKS}-link pendulum, batch {B}, {T} steps of dt = {dt:g} s ({T * dt:g} s simulated), "
          f"{jnp.zeros(()).dtype}, {jax.devices()[0].device_kind} x {os.cpu_count()} cores")
    rows, results = [], {}
    for name in args.integrators.split(","):
        sim = make_sim(T, dt, INTEGRATORS[name])
        if not args.quick:  # a single copy, for the vmap speed-up (which a small batch does not show)
            _, c1, r1 = timed(sim, ones, ones, theta[0], theta_dot[0])
            rows.append((f"1 state, {name}", 1, c1, r1))
        out, c, r = timed(jax.vmap(sim, in_axes=(None, None, 0, 0)), ones, ones, theta, theta_dot)
        rows.append((f"{B} states, {name}", B, c, r))
        results[("states", name)] = out
        out, c, r = timed(jax.vmap(sim, in_axes=(0, 0, None, None)), masses, lengths, pose, jnp.zeros(N_LINKS))
        rows.append((f"{B} models, {name}", B, c, r))
        results[("models", name)] = out

    hdr = f"{'case':<22} {'compile [s]':>11} {'run [s]':>9} {'copy-steps/s':>13} {'us/step/copy':>13}"
    print(hdr)
    print("-" * len(hdr))
    for label, b, c, r in rows:
        print(f"{label:<22} {c:11.2f} {r:9.3f} {b * T / r:13.3e} {1e6 * r / (b * T):13.3f}")
    print()
    hdr = (f"{'case':<22} {'tip y mean':>10} {'tip y std':>9} {'max rod err [m]':>15} {'max |dE|/E_scale':>16} "
           f"{'NaN':>4}")
    print(hdr)
    print("-" * len(hdr))
    for (kind, name), (tip, rod, drift, _) in results.items():
        tip, rod, drift = map(np.asarray, (tip, rod, drift))
        bad = int(np.sum(~np.isfinite(tip)))
        print(f"{f'{B} {kind}, {name}':<22} {np.nanmean(tip):10.3f} {np.nanstd(tip):9.3f} {np.nanmax(rod):15.2e} "
              f"{np.nanmax(np.abs(drift)):16.2e} {bad:4d}")

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    name = args.integrators.split(",")[-1]
    fig, axs = plt.subplots(1, 3, figsize=(14, 4.2), constrained_layout=True)
    for ax, kind, what in ((axs[0], "states", f"{B} random initial states, unit model"),
                           (axs[1], "models", f"{B} random models, one start pose")):
        tip, rod, drift, _ = map(np.asarray, results[(kind, name)])
        bins = np.linspace(np.nanmin(tip), np.nanmax(tip), 61)
        ax.hist(tip[np.isfinite(tip)], bins=bins, color="#2b4c7e", alpha=0.85, label=name)
        for other in args.integrators.split(",")[:-1]:  # the other integrators as outlines, for comparison
            tip_o = np.asarray(results[(kind, other)][0])
            ax.hist(tip_o[np.isfinite(tip_o)], bins=bins, histtype="step", lw=1.2, color="#d1495b", label=other)
        ax.legend(fontsize=8, frameon=False)
        ax.set_xlabel(f"tip height y after {T * dt:g} s [m]")
        ax.set_ylabel("count")
        ax.set_title(f"{what}\n({name}, worst rod error {np.nanmax(rod):.1e} m)")
        ax.grid(alpha=0.3)
    _, _, _, xf = map(np.asarray, results[("models", name)])
    ax = axs[2]
    for i in range(min(B, 200)):
        ax.plot(xf[i, :, 0], xf[i, :, 1], "-", color="#2b4c7e", alpha=0.15, lw=0.8)
        ax.plot(xf[i, -1, 0], xf[i, -1, 1], ".", color="#d1495b", ms=2)
    ax.plot(0, 0, "k^", ms=8)
    ax.set_aspect("equal")
    ax.set_xlabel("x [m]")
    ax.set_ylabel("y [m]")
    ax.set_title(f"final poses of the first {min(B, 200)} random models")
    fig.savefig(args.out, dpi=110)
    print(args.out)


if __name__ == "__main__":
    main()
