"""The seed's benchmark objects (seed 000 Part III, §13-14) simulated by diffchain against their printed equations of
motion integrated by scipy: the same motion, converging at the integrator's order.

Each object is a chain of ``diffchain.systems`` (the single pendulum, the acrobot, the weightlifting arm, the
cart-pole, the double and the triple cart pendulum), started from rest away from equilibrium with no input, without
the friction terms that enter as inputs (the cart-pole's Coulomb friction, the triple cart pendulum's cart and
Coulomb friction; its viscous joint friction, a property of the chain, stays). diffchain runs the chain in point
coordinates with its default integrator at fixed steps; the reference is the seed's closed form in its own
coordinates (``systems.<object>_closed_form``, with the corrections the test suite found: ``printed=False``), solved
by scipy's DOP853 at tolerances of 1e-12. The error of a run is the largest difference of the seed's coordinates
(angles wrapped, the cart in metres) over the output times.

    python experiments/seed_objects.py [--quick] [--out experiments/results/seed_objects.png]

writes the picture and, beside it, the table (seed_objects.md). ``--quick``: 2 s instead of 5 s, two step sizes.
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
from scipy import integrate  # noqa: E402

import diffchain as dc  # noqa: E402
from diffchain import systems  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "seed_objects.png")
NO_FRICTION = dict(mu_x=0.0, mu1=0.0, mu2=0.0, mu3=0.0, Cc=0.0)
# name: (section, benchmark, closed form, q0); every start at rest
OBJECTS = {
    "single pendulum": ("13.1", systems.single_pendulum(), systems.single_pendulum_closed_form, [2.5]),
    "acrobot": ("13.2", systems.acrobot(), systems.acrobot_closed_form, [-0.4, 1.0]),
    "weightlifting arm": ("13.3", systems.weightlifting_arm(), systems.weightlifting_arm_closed_form,
                          [-1.0, 0.6, 0.4]),
    "cart-pole": ("14.1", systems.cartpole(friction="none", mu_p=0.0),
                  lambda q, qd, u: systems.cartpole_closed_form(q, qd, u, printed=False, mu_c=0.0, mu_p=0.0),
                  [0.0, 0.4]),
    "double cart pendulum": ("14.2", systems.double_cart_pendulum(), systems.double_cart_pendulum_closed_form,
                             [0.0, 0.3, -0.2]),
    "triple cart pendulum": ("14.3", systems.triple_cart_pendulum(**NO_FRICTION),
                             lambda q, qd, u: systems.triple_cart_pendulum_closed_form(
                                 q, qd, u, printed=False, coulomb="velocity", **NO_FRICTION), [0.0, 0.2, -0.1, 0.1]),
}


def wrap(a):
    return (a + np.pi) % (2 * np.pi) - np.pi


def wrapped(name, q):
    """The seed's coordinates ``q`` (..., n) with the angles wrapped to [-pi, pi) (not a cart's position)."""
    angles = np.ones(q.shape[-1], bool)
    angles[0] = not name.startswith(("cart", "double", "triple"))
    return np.where(angles, wrap(q), q)


def reference(closed, q0, t_out):
    """The seed's coordinates at ``t_out`` by DOP853 on the closed form (no input)."""
    n = len(q0)
    f = jax.jit(lambda y: jnp.concatenate([y[n:], closed(y[:n], y[n:], 0.0)]))
    sol = integrate.solve_ivp(lambda t, y: np.asarray(f(y)), (0.0, t_out[-1]), np.concatenate([q0, np.zeros(n)]),
                              method="DOP853", rtol=1e-12, atol=1e-12, t_eval=t_out)
    return sol.y[:n].T


def diffchain_run(bench, q0, dt, t_out):
    """The seed's coordinates at ``t_out`` of the chain run with the default integrator, and the wall time."""
    every = int(round((t_out[1] - t_out[0]) / dt))
    assert abs(every * dt - (t_out[1] - t_out[0])) < 1e-12, "dt must divide the output interval"

    @jax.jit
    def run(state):
        def segment(s, _):
            s, _ = dc.rollout(bench.chain, s, None, dt, n_steps=every, check=False)
            return s, bench.to_q(s)[0]
        return jax.lax.scan(segment, state, None, length=len(t_out))[1]

    start = bench.to_state(jnp.asarray(q0, float), jnp.zeros(len(q0)))
    jax.block_until_ready(run(start))
    t0 = time.perf_counter()
    q = jax.block_until_ready(run(start))
    return np.asarray(q), time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 s instead of 5 s, two step sizes")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    duration, outputs = (2.0, 40) if args.quick else (5.0, 100)
    t_out = duration / outputs * np.arange(1, outputs + 1)
    dts = [2.5e-3, 1.25e-3] if args.quick else [5e-3, 2.5e-3, 1.25e-3]
    rows, traces = [], {}
    for name, (section, bench, closed, q0) in OBJECTS.items():
        ref = reference(closed, np.asarray(q0, float), t_out)
        for dt in dts:
            q, sec = diffchain_run(bench, q0, dt, t_out)
            err = float(np.max(np.abs(wrapped(name, q - ref))))
            rows.append((f"§{section} {name}", f"dt = {dt:g}", err, sec))
            traces[name] = (ref, q)
            print(f"§{section} {name:22s} dt = {dt:g}: largest difference {err:.2e}, {sec:.2f} s", flush=True)

    out = os.path.abspath(args.out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    fig, axes = plt.subplots(2, 3, figsize=(12, 6.5), constrained_layout=True)
    for ax, (name, (ref, q)) in zip(axes.flat, traces.items()):
        q = ref + wrapped(name, q - ref)  # diffchain's angles on the reference's turn (they are wrapped)
        for k in range(ref.shape[1]):
            ax.plot(t_out, ref[:, k], color="0.6", lw=3, alpha=0.6, label="closed form (DOP853)" if k == 0 else None)
            ax.plot(t_out, q[:, k], lw=1, ls="--", label=f"diffchain, dt = {dts[-1]:g}" if k == 0 else None)
        ax.set_title(f"§{OBJECTS[name][0]} {name}", fontsize=10)
        ax.set_xlabel("t [s]")
    axes.flat[0].set_ylabel("the seed's coordinates")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"The seed's benchmark objects over {duration:g} s: diffchain against their printed equations")
    fig.savefig(out, dpi=90)
    table = os.path.splitext(out)[0] + ".md"
    with open(table, "w") as f:
        f.write(f"# The seed's benchmark objects over {duration:g} s, {outputs} outputs: diffchain's default integrator "
                "against the closed forms (scipy DOP853, tolerance 1e-12)\n\n| object | setting | largest difference of "
                "the coordinates | wall time [s] |\n|---|---|---|---|\n")
        f.writelines(f"| {m} | {s} | {e:.2e} | {t:.3g} |\n" for m, s, e, t in rows)
    print(table)
    print(out)


if __name__ == "__main__":
    main()
