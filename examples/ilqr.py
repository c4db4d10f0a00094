"""iLQR and DDP on diffchain's per-step linearisations: the acrobot swing-up and a cart-pole brought upright from rest,
and an arm whose tip must land on the floor at a target, with and without the impact's saltation term.

The acrobot and the cart-pole start hanging straight down at rest and must be upright and at rest at the end:

    acrobot   the seed's Acrobot (``diffchain.systems.acrobot()``, seed 000 §13.2: two links with distributed mass,
              l = 1 m, m = 1 kg, I = 1 kg m^2), a motor at the elbow only (the shoulder is passive);
              4 s = 80 RK4 steps of 0.05 s
    cartpole  the seed's cart-pole (``diffchain.systems.cartpole()``, seed 000 §14.1, Barto, Sutton & Anderson, without
              friction), the input a horizontal force on the cart; 3 s = 60 RK4 steps of 0.05 s
    arm       a two-link arm (point masses of 1 kg, rods of 1 m, a motor at each joint) released horizontal at rest
              above the floor y = -1.5; its tip must land on the floor at (0.6, -1.5) (let go, it lands at x = 1.20)
              and the arm be at rest at 1 s = 50 event steps of 0.02 s (``dc.event_step``: the tip sticks where it
              lands, a plastic impact, and the arm, held at both ends, stops)

The state is each system's minimal coordinates z (``dc.minimal_coordinates``: joint angles and rates; the cart's
position along its rail, the pole's angle and their rates); the arm's iterate also carries its event state (what is
stuck). The linearisation (A_t, B_t) of every step of the current trajectory, ``dc.linearize(..., coords="minimal")``
(``dc.event_linearize`` for the arm) under ``jax.vmap``, the backward pass and the line search are one compiled
program per iteration. The cost is (1/2) sum_t u_t^T R u_t + phi(z_T): the controls' effort and a terminal cost,
(1/2) e^T Q_f e with e = z_T - z* (upright at rest), for the arm (Q/2) |tip - target|^2 + |rates|^2 / 2. iLQR (Li &
Todorov 2004): a backward Riccati pass on the quadratic model gives feedforward terms k_t and gains K_t; the forward
pass u_t = u_t + alpha k_t + K_t (z_t - z_t_old) runs for 10 step sizes alpha = 1, 1/2, ..., 1/512 at once (vmap) and
keeps the best that lowers the cost; a Levenberg-Marquardt term mu I on Q_uu grows when none does.

The step that contains the arm's impact has a linearisation with the saltation term (how the impact time moves with
the state and the controls; the default) and one without it (``saltation=False``: the impact time held, what a
method blind to event times uses). The script checks both against central differences of that step, then runs iLQR
with each from the same start, one compiled program for both (the choice is a traced flag), and reports the lowest
cost and the miss at the target.

The script checks the smooth systems' linearisations at the first step against central differences of the step,
runs iLQR until the cost stops falling (relative change below 1e-10) or ``--iters``, and reports the final distance
from the goal. With ``--ddp``, DDP (the same with the steps' second-order terms, ``dc.step_hessians``, regularised in
the state space) continues from iLQR's iterate that first came within 1e-2 of the goal, and the script reports the
iterations both take from there to the optimum. It writes examples/out/ilqr.png (the motions, the controls, the cost
per iteration; ``--out`` to change).

    python examples/ilqr.py [--system acrobot|cartpole|arm|all] [--ddp acrobot|cartpole|both|none] [--iters 100]
                            [--quick]
"""
from __future__ import annotations

import argparse
import functools
import os
import time

import equinox as eqx
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
    """A system: its model, the start of the carried state ``s0`` (minimal coordinates z; for the arm against the floor
    the event state, which also carries what is stuck), one step ``step(s, u)``, the minimal coordinates ``coords(s)``,
    the linearisation ``linearization(s, u, saltation) -> (A, B)`` in them, DDP's ``hessians(s, u, Vx)`` (smooth
    systems), the terminal cost ``terminal(z)``, its distance from the goal ``miss(z)``, the effort weight R, dt,
    the number of steps, the number and name of the inputs."""
    if name == "arm":
        return _arm()
    if name == "acrobot":
        chain = systems.acrobot().chain
        start = dc.from_joint_angles(chain, jnp.array([-jnp.pi / 2, 0.0]))          # hanging down, at rest
        goal = jnp.array([jnp.pi / 2, 0.0, 0.0, 0.0])                                # upright, at rest
        p = dict(chain=chain, start=start, goal=goal, inputs="tau", columns=[1], dt=0.05, steps=80,
                 to_control=lambda u: dc.Control(tau=jnp.stack([0.0 * u[0], u[0], 0.0 * u[0]])),
                 R=1e-2, Qf=1e4, input="elbow torque [N m]")
    else:
        chain = systems.cartpole(friction="none", mu_p=0.0).chain
        start = dc.from_joint_angles(chain, jnp.array([-jnp.pi / 2]))              # cart at x = 0, pole down
        goal = jnp.array([0.0, jnp.pi / 2, 0.0, 0.0])                                 # cart back at 0, pole up
        p = dict(chain=chain, start=start, goal=goal, inputs="F", columns=[0], dt=0.05, steps=60,
                 to_control=lambda u: dc.Control(tau=jnp.zeros(2), F=jnp.zeros((2, 2)).at[0, 0].set(u[0])),
                 R=1e-2, Qf=1e4, input="force on the cart [N]")
    chain, start, goal, to_control, dt, cols = p["chain"], p["start"], p["goal"], p["to_control"], p["dt"], p["columns"]
    integrator = dc.RK4()

    def step(z, u):
        """One step in minimal coordinates (the angles kept on the branch of z's)."""
        new = dc.step(chain, dc.from_minimal_coordinates(chain, z, start), to_control(u), dt, integrator=integrator,
                      check=False)
        return dc.minimal_coordinates(chain, new, ref=z)

    def linearization(z, u, saltation):  # (no events: saltation plays no part)
        A, B = dc.linearize(chain, dc.from_minimal_coordinates(chain, z, start), to_control(u), dt, coords="minimal",
                            inputs=p["inputs"], integrator=integrator)
        return A, B[:, cols]

    def hessians(z, u, Vx):
        """DDP's second-order terms of the step: the Hessians of Vx . f(z, u) (``dc.step_hessians``)."""
        fxx, fux, fuu = dc.step_hessians(chain, dc.from_minimal_coordinates(chain, z, start), to_control(u), dt, Vx,
                                         coords="minimal", inputs=p["inputs"], integrator=integrator)
        c = jnp.asarray(cols)
        return fxx, fux[c], fuu[c][:, c]

    Qf = p["Qf"] * jnp.eye(4)
    return dict(p, s0=dc.minimal_coordinates(chain, start), step=step, coords=lambda z: z, linearization=linearization,
                hessians=hessians, terminal=lambda z: 0.5 * (z - goal) @ Qf @ (z - goal),
                miss=lambda z: jnp.max(jnp.abs(z - goal)), nu=len(cols),
                states=lambda Z: jax.vmap(lambda z: dc.from_minimal_coordinates(chain, z, start))(Z))


ARM_TARGET = (0.6, -1.5)  # where the arm's tip must land: on the floor y = -1.5, inside the tip's natural landing


def _arm():
    """The arm against the floor (the module's docstring). Its iterate carries the event state and the number of
    steps whose solver budget ran out (``StepReport.exhausted``: reported, it must stay 0)."""
    arm = dc.pendulum(2, mass=1.0, length=1.0)
    floor = dc.Events(arm, ground=-1.5, contact=jnp.array([False, False, True]))
    start = (dc.EventState(dc.from_joint_angles(arm, jnp.array([0.0, 0.0]))), jnp.zeros((), int))
    target, dt = jnp.asarray(ARM_TARGET), 0.02

    def to_control(u):
        return dc.Control(tau=jnp.concatenate([u, jnp.zeros(1)]))

    def tip(z):  # the tip (point 3) of the state with minimal coordinates z
        return dc.from_minimal_coordinates(arm, z, start[0].state).x[2]

    def coords(s):
        return dc.minimal_coordinates(arm, s[0].state)

    def step(s, u):
        es, report = dc.event_step(arm, floor, s[0], to_control(u), dt)
        return es, s[1] + report.exhausted

    def linearization(s, u, saltation):
        A, B = dc.event_linearize(arm, floor, s[0], to_control(u), dt, coords="minimal", saltation=saltation)
        return A, B[:, :2]

    def terminal(z):  # the tip on the target, the arm at rest
        e = tip(z) - target
        return 0.5 * 1e3 * e @ e + 0.5 * z[2:] @ z[2:]

    return dict(chain=arm, s0=start, step=step, coords=coords, linearization=linearization, hessians=None,
                terminal=terminal, miss=lambda z: jnp.linalg.norm(tip(z) - target), nu=2, dt=dt, steps=50, R=1e-3,
                input="joint torques [N m]", states=lambda S: S[0].state)


def solver(p, method="ilqr"):
    """The compiled pieces of iLQR (``method="ilqr"``) or DDP (``"ddp"``) for problem ``p``: the rollout of controls
    U (T, nu) from the start, the cost, and one iteration (linearise, backward pass, line search)."""
    step, coords, terminal, s0, nu = p["step"], p["coords"], p["terminal"], p["s0"], p["nu"]
    R = p["R"] * jnp.eye(nu)

    def rollout(U):
        _, S = jax.lax.scan(lambda s, u: (step(s, u),) * 2, s0, U)
        return jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), s0, S)

    def cost(S, U):
        return 0.5 * jnp.sum((U @ R) * U) + terminal(coords(jax.tree_util.tree_map(lambda a: a[-1], S)))

    @jax.jit
    def iteration(S, U, mu, saltation=True):
        """One iteration from the states S (T + 1) and controls U (T, nu); ``saltation`` (traced): the event steps'
        linearisation with or without the saltation term."""
        A, B = jax.vmap(lambda s, u: p["linearization"](s, u, saltation))(
            jax.tree_util.tree_map(lambda a: a[:-1], S), U)                       # (T, nx, nx), (T, nx, nu)
        Z = jax.vmap(coords)(S)

        def backward(V, step):
            Vx, Vxx, ok = V
            A, B, z, u = step
            Qx, Qu = A.T @ Vx, R @ u + B.T @ Vx
            Qxx, Quu, Qux = A.T @ Vxx @ A, R + B.T @ Vxx @ B, B.T @ Vxx @ A
            if method == "ddp":  # the step's curvature along the value's gradient (Mayne 1966; iLQR drops it),
                # regularised in the state space, mu I on Vxx (Tassa, Erez & Todorov 2012)
                fxx, fux, fuu = p["hessians"](z, u, Vx)
                Qxx, Qux, Quu = Qxx + fxx, Qux + fux, Quu + fuu
                reg, reg_ux = Quu + mu * B.T @ B, Qux + mu * B.T @ A
            else:
                reg, reg_ux = Quu + mu * jnp.eye(nu), Qux
            ok = ok & jnp.all(jnp.linalg.eigvalsh(reg) > 0)  # else no descent: the caller raises mu
            k, K = -jnp.linalg.solve(reg, Qu), -jnp.linalg.solve(reg, reg_ux)
            Vx = Qx + K.T @ Quu @ k + K.T @ Qu + Qux.T @ k
            Vxx = Qxx + K.T @ Quu @ K + K.T @ Qux + Qux.T @ K
            return (Vx, 0.5 * (Vxx + Vxx.T), ok), (k, K)

        V_T = (jax.grad(terminal)(Z[-1]), jax.hessian(terminal)(Z[-1]), jnp.ones((), bool))
        (_, _, ok), (k, K) = jax.lax.scan(backward, V_T, (A, B, Z[:-1], U), reverse=True)

        def forward(alpha):
            def body(s, step_):
                z_old, u, k, K = step_
                u = u + alpha * k + K @ (coords(s) - z_old)
                s = step(s, u)
                return s, (s, u)

            _, (Sn, Un) = jax.lax.scan(body, s0, (Z[:-1], U, k, K))
            Sn = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b]), s0, Sn)
            return Sn, Un, cost(Sn, Un)

        Ss, Us, Js = jax.vmap(forward)(jnp.asarray(ALPHAS))
        i = jnp.argmin(jnp.where(jnp.isfinite(Js), Js, jnp.inf))
        return jax.tree_util.tree_map(lambda a: a[i], Ss), Us[i], jnp.where(ok, Js[i], jnp.inf), A, B

    return jax.jit(rollout), jax.jit(cost), iteration


def check_linearization(f, z, u, A, B, h=1e-6, joint=False):
    """The largest difference between (A, B) and central differences of f at (z, u), relative to max |A| and max |B|
    (``joint``: both relative to the largest entry of [A B], for a B far smaller than A, whose central differences
    carry round-off at A's scale)."""
    fd_A = np.stack([(f(z.at[i].add(h), u) - f(z.at[i].add(-h), u)) / (2 * h) for i in range(z.shape[0])], -1)
    fd_B = np.stack([(f(z, u.at[i].add(h)) - f(z, u.at[i].add(-h))) / (2 * h) for i in range(u.shape[0])], -1)
    a, b = float(np.max(np.abs(A))), float(np.max(np.abs(B)))
    a, b = (max(a, b),) * 2 if joint else (a, b)
    return max(float(np.max(np.abs(A - fd_A))) / a, float(np.max(np.abs(B - fd_B))) / b)


def _at(S, k):
    return jax.tree_util.tree_map(lambda a: a[k], S)


@functools.lru_cache
def pieces(name, method):
    """The problem and its compiled pieces, built once: the runs with and without the saltation term share them."""
    p = problem(name)
    return (p, *solver(p, method))


def run(name, iters, seed, method="ilqr", U=None, saltation=True):
    p, rollout, cost, iteration = pieces(name, method)
    label = name
    name = name if method == "ilqr" else f"{name} (DDP)"
    name = name if saltation else f"{name} (no saltation)"
    T, nu = p["steps"], p["nu"]
    if U is None:  # hanging at rest is an equilibrium: perturb it
        U = 0.1 * jax.random.normal(jax.random.PRNGKey(seed), (T, nu))
    S = rollout(U)
    J, mu, flag = float(cost(S, U)), 1e-3, jnp.asarray(saltation)
    print(f"{name}: {T} steps of {p['dt']:g} s, input: {p['input']}, effort weight R = {p['R']:g}")
    t0 = time.perf_counter()
    Sn, Un, Jn, A, B = jax.block_until_ready(iteration(S, U, mu, flag))
    t_compile = time.perf_counter() - t0
    if label != "arm":  # the linearisation at the first step against central differences of the step
        rel = check_linearization(jax.jit(p["step"]), S[0], U[0], np.asarray(A[0]), np.asarray(B[0]))
        print(f"{name}: linearisation at step 0 against central differences of the step: largest relative "
              f"difference {rel:.2e}")
    history, t0 = [J], time.perf_counter()
    reached = None
    for it in range(1, iters + 1):
        if it > 1:
            Sn, Un, Jn, _, _ = iteration(S, U, mu, flag)
        Jn = float(Jn)
        if Jn < J:
            change = (J - Jn) / J
            S, U, J, mu = Sn, Un, Jn, max(mu / 3, 1e-8)
        else:
            change, mu = 0.0, mu * 10
        history.append(J)
        err = float(p["miss"](p["coords"](_at(S, -1))))
        if reached is None and err <= 1e-2:
            reached, U_reached = it, U
        if it % 5 == 0 or it == 1 or change < 1e-10:
            print(f"{name} iter {it:3d}  cost {J:12.6g}  miss {err:.3e}  mu {mu:.0e}")
        if change < 1e-10 and mu > 1e3:
            break
    t_run = time.perf_counter() - t0
    z_T = np.asarray(p["coords"](_at(S, -1)))
    print(f"{name}: compile {t_compile:.1f} s, {it} iterations in {t_run:.1f} s")
    if label == "arm":
        landed = np.asarray(S[0].stuck[:, 2])
        k = int(np.argmax(landed)) if landed.any() else None  # the first state with the tip stuck
        tip = np.asarray(S[0].state.x[-1, 2])
        print(f"{name}: final cost {J:.8g}, tip at ({tip[0]:.4f}, {tip[1]:.4f}), {err:.2e} m from the target, "
              f"landed in the step to t = {k * p['dt'] if k else float('nan'):.2f} s; max |u| = "
              f"{float(jnp.max(jnp.abs(U))):.2f}; steps whose solver budget ran out: {int(S[1][-1])}")
    else:
        goal = np.asarray(p["goal"])
        angles = slice(0, 2) if label == "acrobot" else slice(1, 2)
        print(f"{name}: final max |theta - theta*| = {np.max(np.abs(z_T[angles] - goal[angles])):.2e} rad, "
              f"max |z_T - z*| = {np.max(np.abs(z_T - goal)):.2e}, first within 1e-2 at iteration "
              f"{reached if reached is not None else 'never'}; max |u| = {float(jnp.max(jnp.abs(U))):.2f}")
    states = p["states"](S)
    states = dc.State(states.x, states.v, jnp.arange(T + 1) * p["dt"])
    return dict(p=p, states=states, S=S, U=np.asarray(U), history=history, reached=reached,
                U_reached=U_reached if reached else None, iteration=iteration, landed=k if label == "arm" else None)


def _iterations(history, best, rtol=1e-9):
    """The first iteration whose cost is within ``rtol`` (relative) of ``best`` (None: never)."""
    return next((i for i, J in enumerate(history) if J - best <= rtol * best), None)


def impact_check(r):
    """The arm's linearisation across its impact (the step that contains it, on iLQR's last trajectory), with and
    without the saltation term, against central differences of that event step in minimal coordinates."""
    p, S, U, k = r["p"], r["S"], jnp.asarray(r["U"]), r["landed"] - 1
    es = eqx.tree_at(lambda e: e.fresh, _at(S[0], k), jnp.zeros_like(S[0].fresh[k]))  # (no cached accelerations)
    z = p["coords"]((es, 0))

    def f(z, u):
        return p["coords"](p["step"]((eqx.tree_at(lambda e: e.state, es, dc.from_minimal_coordinates(
            p["chain"], z, es.state)), 0), u))

    f = jax.jit(f)
    _, _, _, A, B = r["iteration"](S, U, 1e-3, jnp.asarray(True))
    # (B is small: after the impact, early in the step, the arm stops)
    rel = check_linearization(f, z, U[k], np.asarray(A[k]), np.asarray(B[k]), h=1e-5, joint=True)
    _, _, _, A0, B0 = r["iteration"](S, U, 1e-3, jnp.asarray(False))
    rel0 = check_linearization(f, z, U[k], np.asarray(A0[k]), np.asarray(B0[k]), h=1e-5, joint=True)
    print(f"arm: linearisation of the step with the impact (t = {k * p['dt']:.2f} s) against central differences of "
          f"the step: largest difference relative to max |[A B]| {rel:.2e} with the saltation term, {rel0:.2e} without")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", choices=["acrobot", "cartpole", "arm", "all"], default="all")
    ap.add_argument("--iters", type=int, default=100, help="at most this many iLQR iterations")
    ap.add_argument("--seed", type=int, default=0, help="of the small random first controls")
    ap.add_argument("--out", default=os.path.join(OUT, "ilqr.png"))
    ap.add_argument("--ddp", choices=["acrobot", "cartpole", "both", "none"], default="acrobot",
                    help="also solve these systems with DDP (the step's second-order terms) to compare")
    ap.add_argument("--quick", action="store_true", help="a smoke test: at most 40 iterations")
    args = ap.parse_args()
    if args.quick:
        args.iters = min(args.iters, 40)
    names = ["acrobot", "cartpole", "arm"] if args.system == "all" else [args.system]
    results = [run(name, args.iters, args.seed) for name in names]
    # DDP from where iLQR first came within 1e-2 of the goal (far from it, DDP's curvature terms are indefinite and
    # its steps no descent): from there, how many more iterations each takes to the optimum
    ddp = {"both": ["acrobot", "cartpole"], "none": []}.get(args.ddp, [args.ddp])
    for name, r in zip(names, results):
        if name == "arm":  # the impact: iLQR again without the saltation term, from the same start
            impact_check(r)
            r["blind"] = run(name, args.iters, args.seed, saltation=False)
            best, blind = min(r["history"]), min(r["blind"]["history"])
            print(f"arm: lowest cost {best:.8g} with the saltation term (reached within 1e-6 at iteration "
                  f"{_iterations(r['history'], best, 1e-6)}), {blind:.8g} without "
                  f"({(blind - best) / best:.1%} higher, reached within 1e-6 at iteration "
                  f"{_iterations(r['blind']['history'], blind, 1e-6)}; both stop where no step lowers the cost)")
        if name not in ddp or r["reached"] is None:
            continue
        d = run(name, args.iters - r["reached"], args.seed, "ddp", r["U_reached"])
        best = min(min(r["history"]), min(d["history"]))
        print(f"{name}: from iLQR's iteration {r['reached']}, iterations to the lowest cost {best:.10g} (within 1e-9): "
              f"iLQR {_iterations(r['history'][r['reached']:], best)} (its cost {min(r['history']):.10g}), DDP "
              f"{_iterations(d['history'], best)} (its cost {min(d['history']):.10g})")
        r["ddp"] = d["history"]
    draw(names, results, args.out)


TITLES = {"acrobot": "acrobot: from hanging at rest to upright in 4 s",
          "cartpole": "cart-pole: from hanging at rest to upright in 3 s",
          "arm": "arm: its tip to land on the floor at the target"}


def draw(names, results, out):
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig, axes = plt.subplots(len(results), 3, figsize=(14, 4.6 * len(results)), squeeze=False,
                             constrained_layout=True, gridspec_kw=dict(width_ratios=[1.2, 1, 1]))
    for (ax0, ax1, ax2), name, r in zip(axes, names, results):
        p = r["p"]
        viz.plot_trajectory(p["chain"], r["states"], ax=ax0, n_poses=20, colorbar=True)
        ax0.set_title(TITLES[name])
        t = np.arange(p["steps"]) * p["dt"]
        for j, color in zip(range(p["nu"]), ("#2b4c7e", "#c47a2b")):
            ax1.step(t, r["U"][:, j], where="post", color=color, label=f"joint {j + 1}" if p["nu"] > 1 else None)
        ax1.set_xlabel("time [s]")
        ax1.set_ylabel(p["input"])
        ax1.set_title("iLQR's controls")
        ax1.grid(alpha=0.3)
        ax2.semilogy(np.arange(len(r["history"])), r["history"], marker=".", color="#7e2b4c",
                     label="iLQR" + (" with the saltation term" if name == "arm" else ""))
        if "ddp" in r:
            ax2.semilogy(r["reached"] + np.arange(len(r["ddp"])), r["ddp"], marker=".", color="#2b7e4c",
                         label=f"DDP from iteration {r['reached']}")
        if name == "arm":
            ax0.axhline(-1.5, color="0.3", lw=2)
            ax0.plot(*ARM_TARGET, "x", color="#c42b2b", ms=12, mew=3, label="target")
            ax0.legend(loc="upper left")
            ax1.legend()
            ax2.semilogy(np.arange(len(r["blind"]["history"])), r["blind"]["history"], marker=".", color="#2b7e4c",
                         label="iLQR without it")
        if "ddp" in r or name == "arm":
            ax2.legend()
        ax2.set_xlabel("iLQR iteration")
        ax2.set_ylabel("cost")
        ax2.set_title("cost per iteration")
        ax2.grid(alpha=0.3, which="both")
    fig.savefig(out, dpi=100)
    print(out)


if __name__ == "__main__":
    main()
