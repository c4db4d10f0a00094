"""Gradients through contact: two cases from the literature, diffchain's event-time gradients beside the closed forms
and beside a simulation that resolves impacts at step resolution ("naive").

A point mass under gravity g = 9.81 is thrown; its impacts are perfectly inelastic (it sticks to the line it hits,
and is released where the line would have to pull it).

1. Time of impact (the ball-against-a-wall problem of DiffTaichi, Hu et al., ICLR 2020): thrown from (0, 1) with
   velocity (3, 4) m/s against the wall x = 2, it sticks at t* = d / v_x, height y = y0 + v_y t* - g t*^2 / 2:
   dy/dv_x = -(v_y - g t*) t* / v_x, dy/dv_y = t*. Resolved at the step that detects it, dy/dv_x = 0.
2. A discontinuous objective (cf. Suh et al., ICML 2022): thrown at 6 m/s and angle theta from (0, 1) under a
   ceiling y = 2: the landing distance jumps at sin(theta_c) = sqrt(2 g (h - y0)) / v0, where the apex grazes the
   ceiling. diffchain's gradient is exact on each side; no gradient sees the jump.

Writes examples/out/contact_gradients.png (``--out`` to change).

    python examples/contact_gradients.py [--dt 0.01] [--quick]
"""
from __future__ import annotations

import argparse
import os
import time

import jax

jax.config.update("jax_enable_x64", True)

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import diffchain as dc  # noqa: E402

dc.set_xla_cpu_flags()  # optional: diffchain's recommended XLA CPU flags, before any computation

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")
G, Y0, D, V0, H = 9.81, 1.0, 2.0, 6.0, 2.0
THETA_C = float(np.arcsin(np.sqrt(2 * G * (H - Y0)) / V0))
WALL, CEILING = np.array([D, 0.0, -1.0, 0.0]), np.array([0.0, H, 0.0, -1.0])  # a point of the line, its normal


def polar(theta):
    return np.stack([V0 * np.cos(theta), V0 * np.sin(theta)], -1)


def exact(line, v):
    """Closed forms: where the throw from (0, y0) ends, (2,), and its Jacobian in v, (2, 2)."""
    vx, vy = v
    if line[2] == -1.0:  # the wall: sticks at t*
        t = line[0] / vx
        return np.array([line[0], Y0 + vy * t - G * t**2 / 2]), np.array([[0, 0], [-(vy - G * t) * t / vx, t]])
    disc = vy**2 - 2 * G * (line[1] - Y0)
    if disc > 0:  # hits the ceiling at t_1, drops
        t, dt_dvy = (vy - np.sqrt(disc)) / G, (1 - vy / np.sqrt(disc)) / G
    else:  # lands at t_land
        root = np.sqrt(vy**2 + 2 * G * Y0)
        t, dt_dvy = (vy + root) / G, (1 + vy / root) / G
    return np.array([vx * t, 0.0]), np.array([[t, vx * dt_dvy], [0, 0]])


def naive(line, v, dt, n_steps):
    """Fixed steps of the exact parabola; an impact is resolved at the step that detects it (the point put back onto
    the line and stopped, no event time); a stuck point is released where gravity pulls it off."""
    z0 = jnp.stack([jnp.asarray(line[:2]), jnp.zeros(2)])
    z = jnp.stack([jnp.asarray(line[2:]), jnp.array([0.0, 1.0])])  # the line, the ground
    a = jnp.array([0.0, -G])

    def step(carry, _):
        x, v, stuck = carry
        stuck = jnp.where((stuck >= 0) & (z[stuck] @ a > 0), -1, stuck)
        x1, v1 = x + v * dt + a * dt**2 / 2, v + a * dt
        gaps = jnp.sum((x1 - z0) * z, -1)
        hit = jnp.argmin(gaps)
        new = (stuck < 0) & (gaps[hit] < 0)
        x1 = jnp.where(new, x1 - gaps[hit] * z[hit], x1)
        return (jnp.where(stuck >= 0, x, x1), jnp.where((stuck >= 0) | new, 0.0, v1), jnp.where(new, hit, stuck)), None

    return jax.lax.scan(step, (jnp.array([0.0, Y0]), jnp.asarray(v), -1), None, length=n_steps)[0][0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dt", type=float, default=0.01)
    ap.add_argument("--thetas", type=int, default=121, help="launch angles in the sweep of case 2")
    ap.add_argument("--out", default=os.path.join(OUT, "contact_gradients.png"))
    ap.add_argument("--quick", action="store_true", help="a smoke test: 25 angles (the compilation remains)")
    args = ap.parse_args()
    if args.quick:
        args.thetas = 25
    T = int(round(1.6 / args.dt))

    point = dc.Chain(jnp.array([1.0]), jnp.zeros((0,)), g=G)
    template = dc.Events(1, ground=0.0, lines=(WALL[None, :2], WALL[None, 2:]))  # the ground, then the line

    def throw(line, v):
        events = eqx.tree_at(lambda e: (e.z0, e.z), template,
                             (template.z0.at[1].set(line[:2]), template.z.at[1].set(line[2:])))
        start = dc.EventState(dc.State(x=jnp.array([[0.0, Y0]]), v=v[None]))
        final, (traj, _) = dc.event_rollout(point, events, start, None, args.dt, n_steps=T)
        return final.state.x[0], traj.state.x[:, 0]

    def jacobians(line, v):  # forward mode (jax.linearize) and reverse mode (its transpose, as jax.vjp)
        end, lin, path = jax.linearize(lambda u: throw(line, u), v, has_aux=True)
        transpose = jax.linear_transpose(lin, v)
        return end, path, jax.vmap(lin, out_axes=1)(jnp.eye(2)), jax.vmap(lambda w: transpose(w)[0])(jnp.eye(2))

    # one batch, one program: the wall throw, then the ceiling throws of the sweep
    thetas = np.linspace(0.6, 1.1, args.thetas)
    lines = np.array([WALL] + [CEILING] * len(thetas))
    vs = np.concatenate([[[3.0, 4.0]], polar(thetas)])
    t0 = time.perf_counter()
    end, paths, fwd, rev = (np.asarray(r) for r in jax.jit(jax.vmap(jacobians))(lines, vs))
    print(f"{len(vs)} throws, values and both Jacobians, compiled and run in {time.perf_counter() - t0:.1f} s")
    naive_jac = jax.jit(jax.jacfwd(lambda v, line: naive(line, v, args.dt, T)))
    print(f"largest difference forward - reverse mode: {np.max(np.abs(fwd - rev)):.1e}")

    rows = [("wall: dy/dv_x", 0, 1, 0, None), ("wall: dy/dv_y", 0, 1, 1, None)]
    for side, th in (("below", 0.75), ("above", 0.95)):
        k = 1 + int(np.argmin(np.abs(thetas - th)))
        rows.append((f"ceiling, theta = {thetas[k - 1]:.3f} ({side} theta_c): dx/dtheta", k, 0, None, thetas[k - 1]))
    print(f"theta_c = {THETA_C:.4f} rad;  dt = {args.dt}")
    print(f"{'case':52s} {'analytic':>12s} {'diffchain':>12s} {'naive':>12s}")
    worst = 0.0
    for name, k, row, col, th in rows:
        ex, nv = exact(lines[k], vs[k])[1], np.asarray(naive_jac(vs[k], lines[k]))
        w = np.eye(2)[col] if th is None else V0 * np.array([-np.sin(th), np.cos(th)])  # d v / d theta
        a, b, c = ex[row] @ w, fwd[k][row] @ w, nv[row] @ w
        worst = max(worst, abs(b - a) / abs(a))
        print(f"{name:52s} {a:12.7f} {b:12.7f} {c:12.7f}")
    print(f"largest relative difference diffchain - analytic: {worst:.1e}")
    jump = [exact(CEILING, polar(THETA_C + s))[0][0] for s in (-1e-12, 1e-12)]
    print(f"at theta_c the landing distance jumps from {jump[0]:.4f} m to {jump[1]:.4f} m")
    figure(args, thetas, end[1:, 0], fwd[1:], paths, vs)


def figure(args, thetas, land, fwd, paths, vs):
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    ax = axes[0]
    ax.plot(paths[0][:, 0], paths[0][:, 1], color="tab:blue", label="v = (3, 4) m/s")
    for dvx in (-0.3, 0.3):  # the closed-form parabolas of neighbouring launches, to their impact
        t = np.linspace(0, D / (3 + dvx), 50)
        ax.plot((3 + dvx) * t, Y0 + 4 * t - G * t**2 / 2, color="0.6", lw=0.8, ls="--")
    ax.axvline(D, color="k", lw=2)
    ax.set_title("case 1: stuck on the wall at y(t*), t* = d / v_x\n(dashed: v_x -+ 0.3)")
    ax.set_xlabel("x [m]")
    ax.set_ylabel("y [m]")
    ax.legend(fontsize=9)
    ax = axes[1]
    for th, color in ((0.75, "tab:green"), (THETA_C - 0.01, "tab:olive"), (THETA_C + 0.01, "tab:orange"),
                      (0.95, "tab:red")):
        k = 1 + int(np.argmin(np.abs(thetas - th)))
        ax.plot(paths[k][:, 0], paths[k][:, 1], color=color, label=f"theta = {thetas[k - 1]:.3f}")
    ax.axhline(H, color="k", lw=2)
    ax.axhline(0, color="k", lw=2)
    ax.set_title(f"case 2: under a ceiling, theta_c = {THETA_C:.3f} rad")
    ax.set_xlabel("x [m]")
    ax.legend(fontsize=8)
    ax = axes[2]
    slope = np.einsum("ki,ki->k", fwd[:, 0], V0 * np.stack([-np.sin(thetas), np.cos(thetas)], -1))
    ax.plot(thetas, land, "o-", ms=3, color="tab:blue", label="landing distance x (diffchain)")
    ax.axvline(THETA_C, color="tab:red", ls="--", lw=1, label="theta_c")
    ax.set_xlabel("theta [rad]")
    ax.set_ylabel("x [m]")
    ax2 = ax.twinx()
    ax2.plot(thetas, slope, ".", color="tab:purple", label="dx/dtheta (diffchain)")
    ax2.set_ylabel("dx/dtheta [m/rad]")
    ax2.set_ylim(-20, 10)
    ax.set_title("the landing distance jumps; its gradient does not see it")
    ax.legend(loc="upper right", fontsize=8)
    ax2.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out, dpi=100)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
