"""A flexible cantilever as rigid finite elements, against Euler–Bernoulli beam theory.

A steel ruler (``--length`` 0.3 m, 25 mm x 1 mm, E = 210 GPa, 7850 kg/m^3) clamped at one end, as
``dc.systems.flexible_cantilever``: n torsional springs k = E I / h at the middles of n equal segments, rigid
uniform bars between them (half-length ones at the ends). Two things:

* Convergence. For n = 2, 4, ..., 32 the first natural frequency (``dc.natural_frequencies``) and the static tip
  deflection under a small tip load (by modal superposition), against Euler–Bernoulli's 1.8751^2 sqrt(E I / (rho A
  L^4)) / (2 pi) and P L^3 / (3 E I); the observed orders log2(e_n / e_2n). The same with the springs at the joints of
  n equal elements (the first at the clamp), first order: what the half-length end elements buy.
* Vibration. The ruler of ``--n`` springs bent into its first mode shape (the tip 1 mm up) and released:
  ``dc.rollout`` (RK4) over ``--periods`` periods; its tip's oscillation frequency (from its zero crossings)
  against the model's first natural frequency, and the energy drift.

Prints the errors, orders and frequencies; writes examples/out/flexible_beam.png (``--out`` to change).

    python examples/flexible_beam.py [--n 16] [--periods 3] [--quick]
"""
from __future__ import annotations

import argparse
import os
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import matplotlib  # noqa: E402
import matplotlib.ticker  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import diffchain as dc  # noqa: E402
from diffchain import systems  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")
BETA1 = 1.87510406871196  # first root of 1 + cos(b) cosh(b) = 0, the clamped-free beam


def equal_elements(n, L, E, I, rho_A):
    """The cantilever cut into n equal rigid elements with the springs at their joints, the first at the clamp (a
    one-sided rule: first order): pinned point 1 at x = 0, springs k = E I / h at joints 1..n."""
    h = L / n
    mass = np.full(n, rho_A * h)
    chain = dc.Chain(np.zeros(n + 1), np.full(n, h), guided=[True] + [False] * n, g=0.0, link_mass=mass,
                     link_inertia=mass * h**2 / 12, torsion_k=np.r_[np.full(n, E * I / h), 0.0])
    return chain, dc.from_joint_angles(chain, np.zeros(n))


def frequency_and_deflection(chain, state, load):
    """(f1 in Hz, the linear static tip deflection under ``load``, the first mode's joint angles with the tip 1 mm
    up, all frequencies in rad/s): K^-1 = V Omega^-2 V^T from the M-orthonormal modes V of
    dc.natural_frequencies."""
    omega, modes = dc.natural_frequencies(chain, state)
    n = chain.n - 1
    tip_y = jax.jacfwd(lambda th: dc.from_joint_angles(chain, th, base=state.x[0]).x[-1, 1])(jnp.zeros(n))
    deflection = load * jnp.sum((tip_y @ modes) ** 2 / omega**2)
    mode = 1e-3 * modes[:, 0] / (tip_y @ modes[:, 0])
    return float(omega[0]) / (2 * np.pi), float(deflection), mode, np.asarray(omega)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--length", type=float, default=0.3, help="the ruler's free length (m)")
    ap.add_argument("--n", type=int, default=16, help="springs of the vibrating ruler")
    ap.add_argument("--periods", type=float, default=3.0)
    ap.add_argument("--out", default=os.path.join(OUT, "flexible_beam.png"))
    ap.add_argument("--quick", action="store_true", help="n = 2, 4, 8 for the convergence, 8 springs vibrating")
    args = ap.parse_args()
    L, E, width, thick, rho = args.length, 210e9, 0.025, 0.001, 7850.0
    I, rho_A = width * thick**3 / 12, rho * width * thick
    f_eb = BETA1**2 * np.sqrt(E * I / (rho_A * L**4)) / (2 * np.pi)
    P = 1e-3 * E * I / L**2  # a small tip load (N): a tip deflection of L / 3000
    d_eb = P * L**3 / (3 * E * I)
    print(f"Euler-Bernoulli: f1 = {f_eb:.4f} Hz, tip deflection {d_eb * 1e3:.4f} mm under {P * 1e3:.2f} mN")

    ns = (2, 4, 8) if args.quick else (2, 4, 8, 16, 32)
    err = {}
    t0 = time.perf_counter()
    for name, build in (("rfe", lambda n: systems.flexible_cantilever(n, length=L, E=E, I=I, rho_A=rho_A)),
                        ("equal", lambda n: equal_elements(n, L, E, I, rho_A))):
        f, d = np.array([frequency_and_deflection(*build(n), P)[:2] for n in ns]).T
        err[name] = (f / f_eb - 1, d / d_eb - 1)
        for what, e in zip(("frequency", "deflection"), err[name]):
            orders = np.log2(np.abs(e[:-1] / e[1:]))
            print(f"{name} {what}: errors " + " ".join(f"{v:+.3e}" for v in e) + "; orders "
                  + " ".join(f"{o:.2f}" for o in orders))
    print(f"n = {', '.join(map(str, ns))}: {time.perf_counter() - t0:.1f} s (compiling included)")

    n = 8 if args.quick else args.n
    chain, rest = systems.flexible_cantilever(n, length=L, E=E, I=I, rho_A=rho_A)
    f1, _, theta, omega = frequency_and_deflection(chain, rest, P)  # bent into its first mode, released at rest
    dt = 0.2 / omega[-1]  # RK4 resolves the stiffest mode
    steps = int(np.ceil(args.periods / f1 / dt))
    start = dc.from_joint_angles(chain, theta, base=rest.x[0])
    t0 = time.perf_counter()
    _, path = jax.block_until_ready(dc.rollout(chain, start, None, dt, n_steps=steps, integrator=dc.RK4()))
    print(f"{steps} RK4 steps of {dt:.2e} s in {time.perf_counter() - t0:.1f} s (compiling included)")
    x, t = np.asarray(path.x), np.asarray(path.t)
    tip = x[:, -1, 1]
    up = np.flatnonzero((tip[:-1] < 0) & (tip[1:] >= 0))  # upward zero crossings, interpolated
    crossings = t[up] - tip[up] / (tip[up + 1] - tip[up]) * dt
    f_tip = (len(crossings) - 1) / (crossings[-1] - crossings[0])
    energy = np.asarray(dc.energy(chain, path))
    print(f"n = {n}: the tip oscillates at {f_tip:.4f} Hz, the model's first natural frequency {f1:.4f} Hz "
          f"(relative difference {f_tip / f1 - 1:+.1e}; Euler-Bernoulli {f_eb:.4f} Hz); relative energy drift "
          f"{np.max(np.abs(energy / energy[0] - 1)):.1e}")

    fig, (ax_b, ax_t, ax_c) = plt.subplots(1, 3, figsize=(15, 4.4))
    half = int(round(0.5 / f1 / dt))
    cmap = plt.get_cmap("coolwarm")
    for k in np.linspace(0, half, 7).astype(int):
        ax_b.plot(np.r_[0, x[k, :, 0]] * 1e3, np.r_[0, x[k, :, 1]] * 1e3, "-o", color=cmap(k / half), ms=2.5, lw=1.2)
    ax_b.axvline(0, color="k", lw=3)
    ax_b.set(title=f"{n} springs, half a period (y magnified)", xlabel="x [mm]", ylabel="y [mm]")
    ax_t.plot(t * 1e3, tip * 1e3, "C0")
    ax_t.set(title=f"tip: {f_tip:.3f} Hz (model f1 {f1:.3f} Hz, Euler-Bernoulli {f_eb:.3f} Hz)", xlabel="t [ms]",
             ylabel="tip y [mm]")
    for name, style, label in (("rfe", "-o", "half-length end elements"), ("equal", "--s", "equal elements")):
        for e, color, what in zip(err[name], ("C0", "C3"), ("f1", "tip deflection")):
            ax_c.loglog(ns, np.abs(e), style, color=color, label=f"{what}, {label}")
    nn = np.array([ns[0], ns[-1]], float)
    ax_c.loglog(nn, 0.5 * (nn / nn[0]) ** -1.0, ":", color="0.5", label="order 1")
    ax_c.loglog(nn, 0.03 * (nn / nn[0]) ** -2.0, "-.", color="0.5", label="order 2")
    ax_c.set(title="relative error against Euler-Bernoulli", xlabel="springs n", ylabel="|error|")
    ax_c.set_xticks(ns, [str(k) for k in ns])
    ax_c.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax_c.legend(fontsize=7)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out, dpi=90)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
