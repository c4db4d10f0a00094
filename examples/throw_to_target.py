"""Throw a chain so that it comes to rest at a target: gradient descent through impacts and joint limits (optax Adam).

The model: ``dc.free_chain(3)`` -- 4 unit point masses, rods of 0.3 m, gravity -- thrown from a bent pose 0.8 m up,
falls onto the ground y = 0 (inelastic impacts, points stick where they land: seed §7) and folds against joint
limits |theta_2|, |theta_3| <= ``--limit`` (seed §12.1) until it lies still. The decision variables are the launch:
the velocity (v_x, v_y) of point 1 and the spin of link 1. Loss after ``--seconds`` of ``dc.event_rollout``:

    (mean x of the points - target)^2 + 0.1 |v|^2        (where it lies, and that it lies still)

minimised with ``optax.adam`` (cosine-decayed step) on ``jax.jit(jax.value_and_grad(loss))``. The gradient is exact
along the run's sequence of events (which points stick, which joints are held, when): it is first checked against
central finite differences. Where a change of the launch changes that sequence -- a point lands first, a joint no
longer reaches its limit -- the loss jumps and no gradient sees it; the step size is kept small for that.
Writes examples/out/throw.png (the first and the last throw, the loss, the launch; ``--out`` to change).

    python examples/throw_to_target.py [--target 1.5] [--iters 150] [--limit 0.7] [--quick]
"""
from __future__ import annotations

import argparse
import os
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import diffchain as dc  # noqa: E402
from diffchain import viz  # noqa: E402

dc.set_xla_cpu_flags()  # optional: diffchain's recommended XLA CPU flags, before any computation

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", type=float, default=1.5, help="where the chain should lie (mean x of its points, m)")
    ap.add_argument("--limit", type=float, default=0.7, help="joint limits |theta_2|, |theta_3| <= limit (rad)")
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--dt", type=float, default=1e-3)
    ap.add_argument("--iters", type=int, default=150)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--out", default=os.path.join(OUT, "throw.png"))
    ap.add_argument("--quick", action="store_true", help="a smoke test: 10 gradient steps (the compilation remains)")
    args = ap.parse_args()
    if args.quick:
        args.iters = 10

    chain = dc.free_chain(3, mass=1.0, length=0.3)
    lim = np.r_[np.inf, args.limit, args.limit]  # joint 1 is link 1 against the world: free
    events = dc.Events(chain.n, ground=0.0, theta_min=-lim, theta_max=lim)
    T = int(round(args.seconds / args.dt))

    def launch(p):
        v_x, v_y, spin = p
        return dc.from_joint_angles(chain, jnp.array([0.3, -0.4, 0.5]), jnp.array([spin, 0.0, 0.0]), base=(0.0, 0.8),
                                    base_velocity=jnp.stack([v_x, v_y]))

    def throw(p):
        final, (traj, reports) = dc.event_rollout(chain, events, dc.EventState(launch(p)), None, args.dt, n_steps=T)
        return final, traj, reports

    def final_loss(final):
        return (jnp.mean(final.x[:, 0]) - args.target) ** 2 + 0.1 * jnp.sum(final.v**2)

    def loss(p):
        return final_loss(throw(p)[0].state)

    value_and_grad = jax.jit(jax.value_and_grad(loss))
    run = jax.jit(throw)  # the forward pass alone: for the central differences and the pictures
    p = jnp.array([1.0, 1.0, 0.0])
    t0 = time.perf_counter()
    value, grad = value_and_grad(p)
    print(f"loss and gradient compiled and run in {time.perf_counter() - t0:.1f} s")
    f, h = (lambda q: final_loss(run(q)[0].state)), 1e-6
    fd = np.array([(f(p.at[i].add(h)) - f(p.at[i].add(-h))) / (2 * h) for i in range(3)])
    print(f"gradient at the first launch {np.asarray(grad)}, central differences {fd}: "
          f"largest relative difference {np.max(np.abs(np.asarray(grad) - fd)) / np.max(np.abs(fd)):.1e}")

    opt = optax.adam(optax.cosine_decay_schedule(args.lr, args.iters, alpha=0.02))
    state, history, launches = opt.init(p), [], [p]
    t0 = time.perf_counter()
    for it in range(args.iters):
        value, grad = value_and_grad(p)
        history.append(float(value))
        updates, state = opt.update(grad, state)
        p = optax.apply_updates(p, updates)
        launches.append(p)
        if it % 10 == 0 or it == args.iters - 1:
            print(f"iter {it:3d}  loss {float(value):.3e}  launch v = ({p[0]:.4f}, {p[1]:.4f}) m/s, "
                  f"spin {p[2]:.4f} rad/s")
    print(f"{args.iters} gradient steps in {time.perf_counter() - t0:.1f} s")

    first, last = run(launches[0]), run(p)
    for name, (final, _, rep) in (("first", first), ("last", last)):
        print(f"{name} throw: rests at x = {float(jnp.mean(final.state.x[:, 0])):.5f} m (target {args.target}), "
              f"|v| <= {float(jnp.abs(final.state.v).max()):.1e} m/s, {int(rep.impacts.sum())} impacts, "
              f"{int(rep.limit_hits.sum())} limit hits")
    figure(chain, args, first, last, history, np.asarray(launches))


def figure(chain, args, first, last, history, launches):
    fig = plt.figure(figsize=(12, 7))
    grid = fig.add_gridspec(2, 3, height_ratios=[1.4, 1])
    ax = fig.add_subplot(grid[0, :])
    for name, (final, traj, rep), cmap in (("first throw", first, "Greys"), ("after gradient descent", last, "Blues")):
        x = np.asarray(traj.state.x)
        com = x.mean(1)
        ax.plot(com[:, 0], com[:, 1], color=plt.get_cmap(cmap)(0.8), lw=1.5, label=f"{name}: centre of the points")
        for k, idx in enumerate(np.linspace(0, len(x) - 1, 9).astype(int)):
            viz.draw_chain(ax, chain, dc.State(x[idx]), alpha=0.25 + 0.75 * k / 8,
                           rod_color=plt.get_cmap(cmap)(0.4 + 0.5 * k / 8), point_color=plt.get_cmap(cmap)(0.9),
                           lw=1.8, marker_scale=4.0)
        stuck = np.asarray(traj.stuck[-1])
        ax.plot(x[-1, stuck, 0], x[-1, stuck, 1], "ks", ms=6)
    ax.axvline(args.target, color="tab:red", ls="--", lw=1.2, label=f"target x = {args.target} m")
    ax.axhspan(-0.1, 0.0, color="0.85", zorder=0)
    ax.set_ylim(-0.1, None)
    ax.set_aspect("equal")
    ax.set_xlabel("x [m]")
    ax.set_ylabel("y [m]")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    ax.set_title(f"a 3-link chain thrown onto the ground, joint limits ±{args.limit} rad: snapshots every "
                 f"{args.seconds / 8:.2f} s, black squares: points stuck at rest")
    ax = fig.add_subplot(grid[1, 0])
    ax.semilogy(history, color="tab:blue")
    ax.set_xlabel("gradient step")
    ax.set_ylabel("loss")
    ax.set_title("(mean x - target)² + 0.1 |v|²")
    ax.grid(alpha=0.3)
    ax = fig.add_subplot(grid[1, 1])
    for i, label in enumerate(("v_x [m/s]", "v_y [m/s]", "spin [rad/s]")):
        ax.plot(launches[:, i], label=label)
    ax.set_xlabel("gradient step")
    ax.set_title("launch")
    ax.legend(fontsize=9)
    ax.grid(alpha=0.3)
    ax = fig.add_subplot(grid[1, 2])
    for name, (final, traj, rep), color in (("first", first, "tab:gray"), ("last", last, "tab:blue")):
        t = np.arange(1, len(traj.state.t) + 1) * args.dt
        ax.plot(t, np.asarray(traj.state.x)[:, :, 0].mean(1), color=color, label=f"{name} throw")
    ax.axhline(args.target, color="tab:red", ls="--", lw=1.2)
    ax.set_xlabel("time [s]")
    ax.set_ylabel("mean x [m]")
    ax.legend(fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out, dpi=100)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
