"""Swing-up of a 2-link pendulum by trajectory optimisation through a differentiable rollout (optax Adam).

The model: ``dc.pendulum(2)`` -- point 1 pinned at the origin, unit point masses at the elbow and the tip, unit rods,
gravity. It starts hanging straight down at rest (theta = [-pi/2, 0]) and must end upright (theta = [pi/2, 0], tip at
y = +2, at rest) after T seconds. The decision variables are an open-loop torque profile, piecewise linear between
knots and saturated smoothly, tau(t) = tau_max * tanh(u(t)):

    --actuation pendubot  (default) a motor at joint 1 only (ground -> link 1), the elbow is passive
    --actuation both      motors at both joints

Loss = w_tip (2 - y_tip(T))^2 + w_ang sum_i (1 - cos(theta_i(T) - theta*_i)) + w_vel |theta_dot(T)|^2
       + w_tau mean_t |tau(t)|^2 + w_run mean_t (2 - y_tip(t))^2 * (t/T)^4     (a gentle pull upwards near the end)

minimised with ``optax.adam`` on ``jax.jit(jax.value_and_grad(loss))``; gradients flow through ``dc.rollout`` with RK4.
Writes examples/out/swingup.png (stroboscopic motion, torque profile, loss curve; ``--out`` to change).

    python examples/swingup_optax.py [--actuation both] [--iters 600] [--horizon 3.0] [--dt 0.01] [--quick]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import jax

if "--x64" in sys.argv:
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
    ap.add_argument("--actuation", choices=["pendubot", "both"], default="pendubot")
    ap.add_argument("--horizon", type=float, default=3.0, help="seconds")
    ap.add_argument("--dt", type=float, default=0.01)
    ap.add_argument("--knots", type=int, default=31, help="torque knots over the horizon (piecewise linear)")
    ap.add_argument("--tau-max", type=float, default=20.0, help="torque saturation [N m]")
    ap.add_argument("--iters", type=int, default=600)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--x64", action="store_true", help="float64 (default float32)")
    ap.add_argument("--out", default=os.path.join(OUT, "swingup.png"))
    ap.add_argument("--quick", action="store_true", help="a smoke test: 30 Adam steps (no swing-up yet)")
    args = ap.parse_args()
    if args.quick:
        args.iters = 30

    chain = dc.pendulum(2, mass=1.0, length=1.0)
    s0 = dc.from_joint_angles(chain, jnp.array([-jnp.pi / 2, 0.0]))
    target = jnp.array([jnp.pi / 2, 0.0])
    T = int(round(args.horizon / args.dt))
    n_act = 1 if args.actuation == "pendubot" else 2
    t_knots = jnp.linspace(0.0, args.horizon, args.knots)
    t_steps = jnp.arange(T) * args.dt
    integrator = dc.RK4()
    w = dict(tip=10.0, ang=5.0, vel=0.5, tau=1e-3, run=1.0)

    def torques(u):
        """Knot parameters u (knots, n_act) -> joint torques per step (T, n) = (T, 3); tau_3 = 0 always."""
        u_t = jax.vmap(lambda col: jnp.interp(t_steps, t_knots, col), in_axes=1, out_axes=1)(u)
        tau = args.tau_max * jnp.tanh(u_t)
        return jnp.zeros((T, chain.n)).at[:, :n_act].set(tau)

    def simulate(u):
        tau = torques(u)
        # dc.Control(tau=tau) with tau (T, n) would read n = T; build the time-stacked Control per step instead
        controls = jax.vmap(lambda tau_t: dc.Control(tau=tau_t))(tau)
        final, traj = dc.rollout(chain, s0, controls, args.dt, integrator=integrator)
        return tau, final, traj

    def loss_fn(u):
        tau, final, traj = simulate(u)
        theta = dc.joint_angles(final)
        theta_dot = dc.joint_velocities(final)[:2]
        tip_y = final.x[-1, 1]
        y_path = traj.x[:, -1, 1]
        terms = dict(
            tip=(2.0 - tip_y) ** 2,
            ang=jnp.sum(1.0 - jnp.cos(theta - target)),
            vel=jnp.sum(theta_dot**2),
            tau=jnp.mean(jnp.sum(tau**2, -1)),
            run=jnp.mean((2.0 - y_path) ** 2 * (t_steps / args.horizon) ** 4),
        )
        return sum(w[k] * v for k, v in terms.items()), terms

    key = jax.random.PRNGKey(args.seed)
    u = 0.1 * jax.random.normal(key, (args.knots, n_act))  # the hanging rest state is a saddle: break the symmetry
    # a swing-up is very sensitive to early torques: decay the step size so the end of the run settles
    lr = optax.cosine_decay_schedule(args.lr, args.iters, alpha=0.02)
    opt = optax.chain(optax.clip_by_global_norm(10.0), optax.adam(lr))
    opt_state = opt.init(u)

    @jax.jit
    def update(u, opt_state):
        (loss, terms), g = jax.value_and_grad(loss_fn, has_aux=True)(u)
        upd, opt_state = opt.update(g, opt_state, u)
        return optax.apply_updates(u, upd), opt_state, loss, terms

    print(f"swing-up: {args.actuation}, horizon {args.horizon:g} s = {T} RK4 steps of {args.dt:g} s, "
          f"{args.knots} knots x {n_act} torques, |tau| <= {args.tau_max:g} N m, {args.iters} Adam steps "
          f"(lr {args.lr:g}, cosine decay)")
    t0 = time.perf_counter()
    u, opt_state, loss, terms = jax.block_until_ready(update(u, opt_state))
    t_compile = time.perf_counter() - t0
    losses = [float(loss)]
    t0 = time.perf_counter()
    every = max(1, args.iters // 12)
    for it in range(1, args.iters):
        u, opt_state, loss, terms = update(u, opt_state)
        losses.append(float(loss))
        if it % every == 0 or it == args.iters - 1:
            print(f"  iter {it:4d}  loss {float(loss):10.4f}  " +
                  "  ".join(f"{k} {float(v):.3g}" for k, v in terms.items()))
    t_opt = time.perf_counter() - t0
    print(f"loss {losses[0]:.4f} at the start, {losses[-1]:.4f} after {len(losses)} Adam steps")

    tau, final, traj = jax.jit(simulate)(u)
    tip_y = float(final.x[-1, 1])
    theta = np.asarray(dc.joint_angles(final))
    pos_err, _ = jax.vmap(lambda s: dc.constraint_violation(chain, s))(traj)
    E = 0.5 * jnp.sum(chain.m * jnp.sum(traj.v**2, -1), -1) + chain.g * jnp.sum(chain.m * traj.x[..., 1], -1)
    print(f"compile {t_compile:.1f} s, {args.iters - 1} iterations in {t_opt:.1f} s "
          f"({1e3 * t_opt / max(args.iters - 1, 1):.1f} ms/iter)")
    print(f"final tip height {tip_y:.4f} m (max possible 2.0 above the pivot; start -2.0); "
          f"final theta = [{theta[0]:.3f}, {theta[1]:.3f}] rad (target [{np.pi / 2:.3f}, 0]); "
          f"final |theta_dot| = {float(jnp.linalg.norm(dc.joint_velocities(final)[:2])):.3f} rad/s")
    print(f"max |tau| = {float(jnp.max(jnp.abs(tau))):.2f} N m; max rod-length error along the motion "
          f"{float(jnp.max(pos_err)):.2e} m")

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig = plt.figure(figsize=(12, 5.2), constrained_layout=True)
    gs = fig.add_gridspec(2, 2, width_ratios=[1.1, 1])
    ax = fig.add_subplot(gs[:, 0])
    viz.plot_trajectory(chain, traj, ax=ax, every=max(1, int(round(0.1 / args.dt))), colorbar=True)
    ax.axhline(2.0, color="0.6", lw=0.8, ls=":")
    ax.set_title(f"{args.actuation} swing-up in {args.horizon:g} s (poses every 0.1 s)\n"
                 f"final tip height {tip_y:.3f} m of 2")
    ax1 = fig.add_subplot(gs[0, 1])
    tt = np.asarray(t_steps)
    for j in range(n_act):
        ax1.plot(tt, np.asarray(tau[:, j]), lw=1.5, label=[r"$\tau_1$ (shoulder)", r"$\tau_2$ (elbow)"][j])
    ax1.set_xlabel("time [s]")
    ax1.set_ylabel("torque [N m]")
    ax1.set_title("optimised open-loop torque")
    ax1.legend(fontsize=8)
    ax1.grid(alpha=0.3)
    ax1r = ax1.twinx()
    ax1r.plot(tt, np.asarray(E), color="0.5", lw=0.8, ls="--")
    ax1r.set_ylabel("energy [J] (dashed)", color="0.4")
    ax2 = fig.add_subplot(gs[1, 1])
    ax2.semilogy(np.arange(len(losses)), losses, color="#2b4c7e")
    ax2.set_xlabel("Adam iteration")
    ax2.set_ylabel("loss")
    ax2.set_title("loss")
    ax2.grid(alpha=0.3, which="both")
    fig.savefig(args.out, dpi=110)
    print(args.out)


if __name__ == "__main__":
    main()
