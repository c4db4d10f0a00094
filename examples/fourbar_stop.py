"""A four-bar linkage against an angle stop and a floor: a closed mechanism through the event rollout.

The model, built with ``dc.MechanismBuilder``: a crank A0-A (driven by a motor), a coupler A-B carrying the point C
below it, a rocker B0-B whose angle against the ground has a stop at ``--stop`` rad (it may not fall below it), and
the floor y = ``--floor`` under C. Released at rest, the linkage falls against the stop (an inelastic impact: the
rocker stops dead), rests there, held by gravity, until the motor switches on at ``--t-on`` s and drives it off;
then C lands on the floor and sticks, which locks the linkage. ``dc.event_rollout`` finds each event time, applies
the impulse and holds the stop or the contact as a constraint of the mechanism; ``Projected`` keeps the loop closed
to round-off. Prints when each event happened and the largest loop-closure error and penetration; writes
examples/out/fourbar_stop.png (``--out`` to change).

    python examples/fourbar_stop.py [--torque 30] [--t-on 0.5] [--seconds 1.5] [--quick]
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

import diffchain as dc  # noqa: E402
from diffchain import systems, viz  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stop", type=float, default=1.28, help="the rocker's stop: its angle stays >= stop (rad)")
    ap.add_argument("--floor", type=float, default=-0.3, help="the floor's height under C (m)")
    ap.add_argument("--torque", type=float, default=30.0, help="the motor's torque once on (N m)")
    ap.add_argument("--t-on", type=float, default=0.5, help="when the motor switches on (s)")
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--dt", type=float, default=1e-3)
    ap.add_argument("--out", default=os.path.join(OUT, "fourbar_stop.png"))
    ap.add_argument("--quick", action="store_true", help="the same run (it takes a second after compiling)")
    args = ap.parse_args()

    linkage, start = systems.four_bar(stop=args.stop)
    floor = dc.Events(linkage, ground=args.floor, contact=["C"])
    T = int(round(args.seconds / args.dt))
    torque = jnp.where(jnp.arange(T) * args.dt >= args.t_on, args.torque, 0.0)[:, None]
    run = jax.jit(lambda es, u: dc.event_rollout(linkage, floor, es, dc.Control(tau=u), args.dt,
                                                 integrator=dc.Projected(dc.VelocityVerlet())))
    t0 = time.perf_counter()
    final, (path, report) = jax.block_until_ready(run(dc.EventState(start, model=linkage), torque))
    print(f"{T} steps of {args.dt:g} s in {time.perf_counter() - t0:.1f} s (compiling included)")

    names = linkage.point_names
    q = np.asarray(path.state.x).reshape(T, -1)
    t = np.asarray(path.state.t)
    P = np.asarray(jax.vmap(linkage.points)(jnp.asarray(q)))
    angle = np.asarray(jax.vmap(linkage.limit_angles)(jnp.asarray(q)))[:, 0]
    closure = float(np.max(np.abs(np.asarray(jax.vmap(linkage.phi)(jnp.asarray(q), path.state.t)))))
    c = names.index("C")
    events = [(k, what) for k in range(T) for what, hit in (
        ("hits the stop", report.limit_hits[k, 0]), ("leaves the stop", report.limit_releases[k, 0]),
        ("C lands", report.impacts[k, c])) if hit]
    for k, what in events:
        print(f"t = {t[k]:.3f} s: {what}")
    print(f"largest loop-closure error {closure:.1e}; lowest C {P[:, c, 1].min() - args.floor:+.1e} m from the "
          f"floor; lowest rocker angle {angle.min() - args.stop:+.1e} rad from the stop")
    print(f"C at rest: |v| = {float(np.abs(np.asarray(path.state.v[-1])).max()):.1e} m/s, stuck: {bool(final.stuck[c])}")

    fig, (ax, ax_a, ax_c) = plt.subplots(1, 3, figsize=(15, 4.6), gridspec_kw=dict(width_ratios=[1.5, 1, 1]))
    A0, B0, A, B = (names.index(n) for n in ("A0", "B0", "A", "B"))
    cmap = plt.get_cmap("viridis")
    when = {what: k for k, what in events}
    frames = [0, when.get("hits the stop", 0)] + list(range(when.get("leaves the stop", T), when.get("C lands", T), 100))
    for k in sorted(set(frames + [T - 1])):
        p = P[k]
        color = cmap(k / T)
        ax.plot(*p[[A0, A, B, B0]].T, "-o", color=color, lw=1.5, ms=3, alpha=0.8)
        ax.fill(*p[[A, B, c]].T, color=color, alpha=0.15)
        ax.plot(*p[c], "o", color=color, ms=4)
    ax.plot(*P[:, c].T, "k:", lw=0.8, label="path of C")
    x_lo, x_hi = P[..., 0].min() - 0.3, P[..., 0].max() + 0.3
    ax.axhline(args.floor, color="k", lw=1)
    ax.fill_between([x_lo, x_hi], args.floor - 0.12, args.floor, **viz.hatch_color("0.5", hatch="///", fc="none"))
    stop_dir = np.array([np.cos(args.stop), np.sin(args.stop)])
    ax.plot(*np.stack([P[0, B0], P[0, B0] + 1.7 * stop_dir]).T, "r--", lw=1, label="the rocker's stop")
    ax.set(xlim=(x_lo, x_hi), aspect="equal", title="start, at the stop, every 0.1 s once driven, landed", xlabel="x [m]",
           ylabel="y [m]")
    ax.legend(loc="upper left", fontsize=8)
    ax_a.plot(t, angle, "C0")
    ax_a.axhline(args.stop, color="r", ls="--", lw=1)
    ax_a.set(title="rocker angle", xlabel="t [s]", ylabel="rad")
    ax_c.plot(t, P[:, c, 1], "C2")
    ax_c.axhline(args.floor, color="k", lw=1)
    ax_c.set(title="height of C", xlabel="t [s]", ylabel="m")
    for k, what in events:
        for a in (ax_a, ax_c):
            a.axvline(t[k], color="0.6", lw=0.8)
        ax_a.annotate(what, (t[k], ax_a.get_ylim()[1]), fontsize=8, rotation=90, va="top", ha="right")
    ax_a.axvspan(args.t_on, t[-1], color="C1", alpha=0.08, label="motor on")
    ax_a.legend(loc="center right", fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out, dpi=90)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
