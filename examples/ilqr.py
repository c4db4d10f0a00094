"""iLQR and DDP on diffchain's per-step linearisations: the acrobot swing-up and a cart-pole brought upright from rest.

Both systems start hanging straight down at rest and must be upright and at rest at the end of the horizon:

    acrobot   the seed's Acrobot (``diffchain.systems.acrobot()``, seed 000 §13.2: two links with distributed mass,
              l = 1 m, m = 1 kg, I = 1 kg m^2), a motor at the elbow only (the shoulder is passive);
              4 s = 80 RK4 steps of 0.05 s
    cartpole  the seed's cart-pole (``diffchain.systems.cartpole()``, seed 000 §14.1, Barto, Sutton & Anderson, without
              friction), the input a horizontal force on the cart; 3 s = 60 RK4 steps of 0.05 s

The state is each system's minimal coordinates (``dc.minimal_coordinates``: the acrobot's joint angles and rates; the
cart's position along its rail, the pole's angle and their rates). One step in those coordinates is
z+ = f(z, u) = minimal_coordinates(step(from_minimal_coordinates(z), u)); its linearisation (A_t, B_t) at every step of
the current trajectory is ``dc.linearize(..., coords="minimal")`` under ``jax.vmap``, one compiled program per
iteration with the backward pass and the line search. The cost is (1/2) sum_t u_t^T R u_t + (1/2) e_T^T Q_f e_T,
e_T = z_T - z*: the controls' effort and the distance from the upright goal at rest at the end. iLQR (Li & Todorov
2004): a backward Riccati pass on the quadratic model gives feedforward terms k_t and gains K_t; the forward pass
u_t = u_t + alpha k_t + K_t (z_t - z_t_old) runs for 10 step sizes alpha = 1, 1/2, ..., 1/512 at once (vmap) and
keeps the best that lowers the cost; a Levenberg-Marquardt term mu I on Q_uu grows when none does.

The script first checks the linearisation at the first step of the first trajectory against central differences of
f, then runs iLQR until the cost stops falling (relative change below 1e-10) or ``--iters``, and reports the final
distance from the goal. With ``--ddp``, DDP (the same with the steps' second-order terms, ``dc.step_hessians``,
regularised in the state space) continues from iLQR's iterate that first came within 1e-2 of the goal, and the
script reports the iterations both take from there to the optimum. It writes examples/out/ilqr.png (the motions,
the controls, the cost per iteration; ``--out`` to change).

    python examples/ilqr.py [--system acrobot|cartpole|both] [--ddp acrobot|cartpole|both|none] [--iters 100]
                            [--quick]
"""
from __future__ import annotations

import argparse
import os
import time

import jax

jax.config.update("jax_enable_x64", True)  # iLQR's goal 1e-2 from upright and the derivative check: float64

import jax.numpy as jnp  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import diffchain as dc  # noqa: E402
from diffchain import systems, viz  # noqa: E402

dc.set_xla_cpu_flags()  # optional: diffchain's recommended XLA CPU flags, before any computation

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")
ALPHAS = 2.0 ** -np.arange(10)  # the line search's step sizes, all tried at once


def problem(name):
    """A system's chain, start state, goal (minimal coordinates), control map u -> Control, which columns of B are the
    inputs, dt, number of steps, cost weights R, Q_f, and the name of its input."""
    if name == "acrobot":
        chain = systems.acrobot().chain
        start = dc.from_joint_angles(chain, jnp.array([-jnp.pi / 2, 0.0]))          # hanging down, at rest
        goal = jnp.array([jnp.pi / 2, 0.0, 0.0, 0.0])                                # upright, at rest
        return dict(chain=chain, start=start, goal=goal, inputs="tau", columns=[1], dt=0.05, steps=80,
                    to_control=lambda u: dc.Control(tau=jnp.stack([0.0 * u[0], u[0], 0.0 * u[0]])),
                    R=1e-2, Qf=1e4, input="elbow torque [N m]")
    chain = systems.cartpole(friction="none", mu_p=0.0).chain
    start = dc.from_joint_angles(chain, jnp.array([-jnp.pi / 2]))                  # cart at x = 0, pole down
    goal = jnp.array([0.0, jnp.pi / 2, 0.0, 0.0])                                     # cart back at 0, pole up
    return dict(chain=chain, start=start, goal=goal, inputs="F", columns=[0], dt=0.05, steps=60,
                to_control=lambda u: dc.Control(tau=jnp.zeros(2), F=jnp.zeros((2, 2)).at[0, 0].set(u[0])),
                R=1e-2, Qf=1e4, input="force on the cart [N]")


def solver(p, method="ilqr"):
    """The compiled pieces of iLQR (``method="ilqr"``) or DDP (``"ddp"``) for problem ``p``: the rollout of controls
    U (T, nu) from the start, and one iteration (linearise, backward pass, line search)."""
    chain, start, goal, to_control, dt = p["chain"], p["start"], p["goal"], p["to_control"], p["dt"]
    integrator = dc.RK4()
    z0 = dc.minimal_coordinates(chain, start)
    nu = len(p["columns"])
    R, Qf = p["R"] * jnp.eye(nu), p["Qf"] * jnp.eye(z0.shape[0])

    def f(z, u):
        """One step in minimal coordinates (the angles kept on the branch of z's)."""
        new = dc.step(chain, dc.from_minimal_coordinates(chain, z, start), to_control(u), dt, integrator=integrator,
                      check=False)
        return dc.minimal_coordinates(chain, new, ref=z)

    def hessians(z, u, Vx):
        """DDP's second-order terms of the step: the Hessians of Vx . f(z, u) (``dc.step_hessians``)."""
        fxx, fux, fuu = dc.step_hessians(chain, dc.from_minimal_coordinates(chain, z, start), to_control(u), dt, Vx,
                                         coords="minimal", inputs=p["inputs"], integrator=integrator)
        cols = jnp.asarray(p["columns"])
        return fxx, fux[cols], fuu[cols][:, cols]

    def linearization(z, u):
        A, B = dc.linearize(chain, dc.from_minimal_coordinates(chain, z, start), to_control(u), dt, coords="minimal",
                            inputs=p["inputs"], integrator=integrator)
        return A, B[:, p["columns"]]

    def rollout(U):
        _, Z = jax.lax.scan(lambda z, u: (f(z, u),) * 2, z0, U)
        return jnp.concatenate([z0[None], Z])

    def cost(Z, U):
        e = Z[-1] - goal
        return 0.5 * jnp.sum((U @ R) * U) + 0.5 * e @ Qf @ e

    @jax.jit
    def iteration(Z, U, mu):
        A, B = jax.vmap(linearization)(Z[:-1], U)                 # (T, nx, nx), (T, nx, nu): one program

        def backward(V, step):
            Vx, Vxx, ok = V
            A, B, z, u = step
            Qx, Qu = A.T @ Vx, R @ u + B.T @ Vx
            Qxx, Quu, Qux = A.T @ Vxx @ A, R + B.T @ Vxx @ B, B.T @ Vxx @ A
            if method == "ddp":  # the step's curvature along the value's gradient (Mayne 1966; iLQR drops it),
                # regularised in the state space, mu I on Vxx (Tassa, Erez & Todorov 2012)
                fxx, fux, fuu = hessians(z, u, Vx)
                Qxx, Qux, Quu = Qxx + fxx, Qux + fux, Quu + fuu
                reg, reg_ux = Quu + mu * B.T @ B, Qux + mu * B.T @ A
            else:
                reg, reg_ux = Quu + mu * jnp.eye(nu), Qux
            ok = ok & jnp.all(jnp.linalg.eigvalsh(reg) > 0)  # else no descent: the caller raises mu
            k, K = -jnp.linalg.solve(reg, Qu), -jnp.linalg.solve(reg, reg_ux)
            Vx = Qx + K.T @ Quu @ k + K.T @ Qu + Qux.T @ k
            Vxx = Qxx + K.T @ Quu @ K + K.T @ Qux + Qux.T @ K
            return (Vx, 0.5 * (Vxx + Vxx.T), ok), (k, K)

        (_, _, ok), (k, K) = jax.lax.scan(backward, (Qf @ (Z[-1] - goal), Qf, jnp.ones((), bool)),
                                          (A, B, Z[:-1], U), reverse=True)

        def forward(alpha):
            def body(z, step):
                z_old, u, k, K = step
                u = u + alpha * k + K @ (z - z_old)
                return f(z, u), u

            _, Un = jax.lax.scan(body, z0, (Z[:-1], U, k, K))
            Zn = rollout(Un)
            return Zn, Un, cost(Zn, Un)

        Zs, Us, Js = jax.vmap(forward)(jnp.asarray(ALPHAS))
        i = jnp.argmin(jnp.where(jnp.isfinite(Js), Js, jnp.inf))
        return Zs[i], Us[i], jnp.where(ok, Js[i], jnp.inf), A[0], B[0]

    return f, jax.jit(rollout), jax.jit(cost), iteration, z0


def check_linearization(f, z, u, A, B, h=1e-6):
    """The largest difference between (A, B) and central differences of f at (z, u), relative to max |A|, |B|."""
    fd_A = np.stack([(f(z.at[i].add(h), u) - f(z.at[i].add(-h), u)) / (2 * h) for i in range(z.shape[0])], -1)
    fd_B = np.stack([(f(z, u.at[i].add(h)) - f(z, u.at[i].add(-h))) / (2 * h) for i in range(u.shape[0])], -1)
    return max(float(np.max(np.abs(A - fd_A))) / float(np.max(np.abs(A))),
               float(np.max(np.abs(B - fd_B))) / float(np.max(np.abs(B))))


def run(name, iters, seed, method="ilqr", U=None):
    p = problem(name)
    f, rollout, cost, iteration, z0 = solver(p, method)
    label, name = name, name if method == "ilqr" else f"{name} (DDP)"
    T, nu = p["steps"], len(p["columns"])
    if U is None:  # hanging at rest is an equilibrium: perturb it
        U = 0.1 * jax.random.normal(jax.random.PRNGKey(seed), (T, nu))
    Z = rollout(U)
    J, mu = float(cost(Z, U)), 1e-3
    print(f"{name}: {T} RK4 steps of {p['dt']:g} s, input: {p['input']}, cost weights R = {p['R']:g}, "
          f"Q_f = {p['Qf']:g}")
    t0 = time.perf_counter()
    Zn, Un, Jn, A0, B0 = jax.block_until_ready(iteration(Z, U, mu))
    t_compile = time.perf_counter() - t0
    rel = check_linearization(jax.jit(f), Z[0], U[0], np.asarray(A0), np.asarray(B0))
    print(f"{name}: linearisation at step 0 against central differences of the step: largest relative difference "
          f"{rel:.2e}")
    history, t0 = [J], time.perf_counter()
    goal = np.asarray(p["goal"])
    reached = None
    for it in range(1, iters + 1):
        if it > 1:
            Zn, Un, Jn, _, _ = iteration(Z, U, mu)
        Jn = float(Jn)
        if Jn < J:
            change = (J - Jn) / J
            Z, U, J, mu = Zn, Un, Jn, max(mu / 3, 1e-8)
        else:
            change, mu = 0.0, mu * 10
        history.append(J)
        err = float(np.max(np.abs(np.asarray(Z[-1]) - goal)))
        if reached is None and err <= 1e-2:
            reached, U_reached = it, U
        if it % 5 == 0 or it == 1 or change < 1e-10:
            print(f"{name} iter {it:3d}  cost {J:12.6g}  max|z_T - z*| {err:.3e}  mu {mu:.0e}")
        if change < 1e-10 and mu > 1e3:
            break
    t_run = time.perf_counter() - t0
    z_T = np.asarray(Z[-1])
    angles = slice(0, 2) if label == "acrobot" else slice(1, 2)
    print(f"{name}: compile {t_compile:.1f} s, {it} iterations in {t_run:.1f} s")
    print(f"{name}: final max |theta - theta*| = {np.max(np.abs(z_T[angles] - goal[angles])):.2e} rad, "
          f"max |z_T - z*| = {np.max(np.abs(z_T - goal)):.2e}, first within 1e-2 at iteration "
          f"{reached if reached is not None else 'never'}; max |u| = {float(jnp.max(jnp.abs(U))):.2f}")
    states = jax.vmap(lambda z: dc.from_minimal_coordinates(p["chain"], z, p["start"]))(Z)
    states = dc.State(states.x, states.v, jnp.arange(T + 1) * p["dt"])
    return dict(p=p, states=states, U=np.asarray(U), history=history, reached=reached,
                U_reached=U_reached if reached else None)


def _iterations(history, best):
    """The first iteration whose cost is within 1e-9 (relative) of ``best`` (None: never)."""
    return next((i for i, J in enumerate(history) if J - best <= 1e-9 * best), None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", choices=["acrobot", "cartpole", "both"], default="both")
    ap.add_argument("--iters", type=int, default=100, help="at most this many iLQR iterations")
    ap.add_argument("--seed", type=int, default=0, help="of the small random first controls")
    ap.add_argument("--out", default=os.path.join(OUT, "ilqr.png"))
    ap.add_argument("--ddp", choices=["acrobot", "cartpole", "both", "none"], default="acrobot",
                    help="also solve these systems with DDP (the step's second-order terms) to compare")
    ap.add_argument("--quick", action="store_true", help="a smoke test: at most 40 iterations")
    args = ap.parse_args()
    if args.quick:
        args.iters = min(args.iters, 40)
    names = ["acrobot", "cartpole"] if args.system == "both" else [args.system]
    results = [run(name, args.iters, args.seed) for name in names]
    # DDP from where iLQR first came within 1e-2 of the goal (far from it, DDP's curvature terms are indefinite and
    # its steps no descent): from there, how many more iterations each takes to the optimum
    for name, r in zip(names, results):
        if name not in {"both": names, "none": []}.get(args.ddp, [args.ddp]) or r["reached"] is None:
            continue
        d = run(name, args.iters - r["reached"], args.seed, "ddp", r["U_reached"])
        best = min(min(r["history"]), min(d["history"]))
        print(f"{name}: from iLQR's iteration {r['reached']}, iterations to the lowest cost {best:.10g} (within 1e-9): "
              f"iLQR {_iterations(r['history'][r['reached']:], best)} (its cost {min(r['history']):.10g}), DDP "
              f"{_iterations(d['history'], best)} (its cost {min(d['history']):.10g})")
        r["ddp"] = d["history"]

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig, axes = plt.subplots(len(results), 3, figsize=(14, 4.6 * len(results)), squeeze=False,
                             constrained_layout=True, gridspec_kw=dict(width_ratios=[1.2, 1, 1]))
    for (ax0, ax1, ax2), r in zip(axes, results):
        p, name = r["p"], "acrobot" if r["p"]["inputs"] == "tau" else "cart-pole"
        viz.plot_trajectory(p["chain"], r["states"], ax=ax0, n_poses=20, colorbar=True)
        ax0.set_title(f"{name}: from hanging at rest to upright in {p['steps'] * p['dt']:g} s")
        t = np.arange(p["steps"]) * p["dt"]
        ax1.step(t, r["U"][:, 0], where="post", color="#2b4c7e")
        ax1.set_xlabel("time [s]")
        ax1.set_ylabel(p["input"])
        ax1.set_title("iLQR's controls")
        ax1.grid(alpha=0.3)
        ax2.semilogy(np.arange(len(r["history"])), r["history"], marker=".", color="#7e2b4c", label="iLQR")
        if "ddp" in r:
            ax2.semilogy(r["reached"] + np.arange(len(r["ddp"])), r["ddp"], marker=".", color="#2b7e4c",
                         label=f"DDP from iteration {r['reached']}")
            ax2.legend()
        ax2.set_xlabel("iLQR iteration")
        ax2.set_ylabel("cost")
        ax2.set_title("cost per iteration")
        ax2.grid(alpha=0.3, which="both")
    fig.savefig(args.out, dpi=100)
    print(args.out)


if __name__ == "__main__":
    main()
