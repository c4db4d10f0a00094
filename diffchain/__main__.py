"""Command line of diffchain: ``python -m diffchain demo [--out PATH] [--links 5] [--seconds 10] [--gif]``,
``python -m diffchain events [--out PATH] [--gif PATH]`` (a chain falling onto the ground against joint limits) and
``python -m diffchain bench [--quick] [--device cpu|gpu] [--out PATH]`` (throughput, gradients and compile times
against peers, :mod:`diffchain._bench.suite`).

``demo`` releases an n-link pendulum from rest in a bent pose, integrates it with RK4 under ``jax.jit`` and writes a
picture: the stroboscopic motion on the left, the relative energy error and the rod-length error on the right.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

# A bent start pose (joint angles, rad) that gives a rich, chaotic motion; longer chains repeat the pattern.
_BENT = (0.3, 0.9, -0.7, 0.5, 0.4)


def _meter():
    """The long commands' progress meter (on standard error): a tqdm bar where tqdm is installed, else lines."""
    import diffchain as dc

    try:
        return dc.TqdmProgressMeter()
    except ImportError:
        return dc.TextProgressMeter()


def demo(args) -> int:
    import jax
    import jax.numpy as jnp
    import matplotlib

    if not os.environ.get("DISPLAY") and not os.environ.get("MPLBACKEND"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    import diffchain as dc
    from diffchain import viz

    jax.config.update("jax_enable_x64", True)  # so that the energy error shows the integrator, not float32 round-off
    n_links, dt = args.links, args.dt
    n_steps = int(round(args.seconds / dt))
    chain = dc.pendulum(n_links, mass=1.0, length=1.0)
    theta = np.resize(np.asarray(_BENT), n_links)
    s0 = dc.from_joint_angles(chain, theta)

    @jax.jit
    def simulate(chain, s0):
        final, traj = dc.rollout(chain, s0, None, dt, n_steps=n_steps, integrator=dc.RK4(), progress=_meter())
        rod_err, _ = jax.vmap(lambda s: dc.constraint_violation(chain, s))(traj)
        return traj, dc.energy(chain, traj), rod_err

    t0 = time.perf_counter()
    traj, E, rod_err = jax.block_until_ready(simulate(chain, s0))
    wall = time.perf_counter() - t0
    E0 = float(dc.energy(chain, s0))
    # relative to the energy scale of the motion: potential energy range of the chain (E0 itself may be ~0)
    E_scale = float(chain.g * jnp.sum(chain.m) * jnp.sum(chain.l))
    rel_E = (np.asarray(E) - E0) / E_scale
    rod_err, t = np.asarray(rod_err), np.asarray(traj.t)
    if not np.all(np.isfinite(np.asarray(traj.x))):
        print("demo: the simulation diverged (NaN); try a smaller --dt", file=sys.stderr)
        return 1

    fig = plt.figure(figsize=(12, 6.2), constrained_layout=True)
    gs = fig.add_gridspec(2, 2, width_ratios=[1.5, 1])
    ax = fig.add_subplot(gs[:, 0])
    stride = max(1, int(round(0.01 / dt)))  # 10 ms samples are plenty for the picture
    sub = jax.tree_util.tree_map(lambda a: np.asarray(a)[::stride], traj)
    window = min(args.seconds, 2.0)
    viz.plot_trajectory(chain, sub, ax=ax, every=max(1, int(round(0.1 / (stride * dt)))), window=(0.0, window))
    ax.set_title(f"{n_links}-link pendulum released from rest\n"
                 f"poses every 0.1 s for the first {window:g} s, tip path for all {args.seconds:g} s")
    ax1 = fig.add_subplot(gs[0, 1])
    ax1.plot(t, rel_E, color="#2b4c7e", lw=1)
    ax1.set_ylabel(r"$(E - E_0)\,/\,(g\,\Sigma m\,\Sigma l)$")
    ax1.set_title(f"energy drift (RK4, dt = {dt:g} s)")
    ax1.ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    ax1.grid(alpha=0.3)
    ax2 = fig.add_subplot(gs[1, 1], sharex=ax1)
    ax2.semilogy(t, np.maximum(rod_err, 1e-17), color="#d1495b", lw=1)
    ax2.set_ylabel(r"max$_i\,|\,\|x_{i+1}-x_i\| - l_i\,|$ [m]")
    ax2.set_xlabel("time [s]")
    ax2.set_title("rod-length error")
    ax2.grid(alpha=0.3)
    fig.savefig(args.out, dpi=args.dpi)
    plt.close(fig)
    print(args.out)
    print(f"simulated {args.seconds:g} s ({n_steps} RK4 steps, {n_links} links) in {wall:.2f} s wall incl. compile; "
          f"max rod-length error {rod_err.max():.2e} m; max |relative energy drift| {np.abs(rel_E).max():.2e}")
    if args.gif:
        gif = os.path.splitext(args.out)[0] + ".gif"
        t0 = time.perf_counter()
        viz.animate(chain, traj, gif, fps=args.fps, dt=dt)
        print(f"{gif} ({time.perf_counter() - t0:.1f} s to render)")
    return 0


def events(args) -> int:
    import matplotlib

    if not os.environ.get("DISPLAY") and not os.environ.get("MPLBACKEND"):
        matplotlib.use("Agg")
    import jax

    from diffchain._events.demo import falling_chain_figure

    jax.config.update("jax_enable_x64", True)
    falling_chain_figure(args.out, gif=args.gif, T=args.steps, dt=args.dt, progress=_meter())
    return 0


def bench(args) -> int:
    import jax

    from diffchain._bench.suite import main as bench_main

    # float64 rows (float32 ones cast their models and starts); MJX computes in float32 only without x64
    x64 = args.mjx_worker is None or json.loads(args.mjx_worker)["dtype"] == "float64"
    jax.config.update("jax_enable_x64", x64)
    return bench_main(args)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m diffchain",
                                     description="diffchain: differentiable dynamics of planar kinematic chains in JAX")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = sub.add_parser("demo", help="simulate a pendulum released in a bent pose and draw the motion",
                       description="Simulate an n-link pendulum (unit masses and lengths) released from rest in a "
                                   "bent pose with RK4, and write a picture of the motion and its energy and "
                                   "rod-length errors.")
    p.add_argument("--out", default="diffchain_demo.png", help="output PNG (default: %(default)s)")
    p.add_argument("--links", type=int, default=5, help="number of links (default: %(default)s)")
    p.add_argument("--seconds", type=float, default=10.0, help="simulated time in s (default: %(default)s)")
    p.add_argument("--dt", type=float, default=1e-3, help="RK4 time step in s (default: %(default)s)")
    p.add_argument("--gif", action="store_true", help="also write an animation next to --out (.gif)")
    p.add_argument("--fps", type=int, default=30, help="frame rate of the GIF (default: %(default)s)")
    p.add_argument("--dpi", type=int, default=120, help="resolution of the PNG (default: %(default)s)")
    p.set_defaults(func=demo)
    e = sub.add_parser("events", help="drop a chain on the ground with joint angle limits and draw what happens",
                       description="A 6-link free chain falls onto the ground and folds against its joint angle "
                                   "limits (contacts, limits, impulses, releases: diffchain.event_rollout).")
    e.add_argument("--out", default="falling_chain.png", help="output PNG (default: %(default)s)")
    e.add_argument("--gif", default=None, help="also write an animation to this path (needs pillow)")
    e.add_argument("--steps", type=int, default=1500, help="number of quanta (default: %(default)s)")
    e.add_argument("--dt", type=float, default=1e-3, help="quantum length in s (default: %(default)s)")
    e.set_defaults(func=events, links=1, seconds=1.0)
    b = sub.add_parser("bench", help="measure throughput, gradients and compile times against peers",
                       description="Time diffchain's rollouts and their gradients on the benchmark workloads (5-, "
                                   "20- and 100-link pendulums, cart-pole, acrobot, a four-bar, an event drop) with "
                                   "plain JAX, MuJoCo C and MJX (when installed) measured in the same process, and "
                                   "write a markdown report (the full run: float32 and float64, 1, 1024 and "
                                   "65536 copies, about 10 minutes on 2 cores).")
    b.add_argument("--quick", action="store_true", help="float32, batches of 1024 copies (about 2 minutes on 2 cores)")
    b.add_argument("--device", choices=("cpu", "gpu"), default="cpu", help="where JAX runs (default: %(default)s)")
    b.add_argument("--only", default=None, help="comma-separated workload names (pendulum5, pendulum20, pendulum100, "
                                                "cartpole, acrobot, fourbar, drop)")
    b.add_argument("--out", default=None, help="markdown report (default: diffchain-bench-<date>.md)")
    b.add_argument("--no-sharding", action="store_true", help="skip the scaling across devices")
    b.add_argument("--mode", default=None, help=argparse.SUPPRESS)
    b.add_argument("--_shard-worker", dest="shard_worker", action="store_true", help=argparse.SUPPRESS)
    b.add_argument("--_mjx-worker", dest="mjx_worker", default=None, help=argparse.SUPPRESS)
    b.set_defaults(func=bench, links=1, seconds=1.0, dt=1e-3)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.links < 1 or args.seconds <= 0 or args.dt <= 0:
        parser.error("--links must be >= 1, --seconds and --dt positive")
    if args.command == "bench":
        return args.func(args)
    try:
        import matplotlib  # noqa: F401  (demo and events draw: the `viz` extra)
    except ModuleNotFoundError:
        from ._extras import install_hint

        print(f"python -m diffchain draws with matplotlib, which is not installed; install {install_hint('viz')}",
              file=sys.stderr)
        return 1
    return args.func(args)


if __name__ == "__main__":
    from diffchain import set_xla_cpu_flags

    set_xla_cpu_flags()  # the command line's own process: the recommended XLA CPU flags
    sys.exit(main())
