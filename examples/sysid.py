"""System identification: masses, lengths, a centre of mass and joint damping recovered from noisy measured angles.

Two systems, their "measurements" simulated with diffchain at known parameters, 1 % noise added:

    double pendulum  ``dc.pendulum(2)``: point masses m_1 = 1 kg (known: from angles alone only mass ratios are
                     observable) and m_2, massless rods l_1, l_2, joint dampers k_1, k_2 (``k_omega``); released from
                     a large angle, a chaotic motion. Identified: m_2, l_1, l_2, k_1, k_2.
    four-bar         ``diffchain.systems.four_bar()`` (crank, coupler, rocker; rigid bodies) with a viscous damper
                     at the crank's ground pivot; released at rest, it swings under gravity. Identified: the
                     coupler's mass, its centre of mass (a along A -> B) and the damper's c; the crank and the
                     rocker are known.

The measured angles (the pendulum's two joint angles, the four-bar's crank angle, 100 samples per second) carry
Gaussian noise of 1 % of each signal's scale (its standard deviation over the run). They are written to a CSV file
(time, angles; ``dc.save_angles_csv``) and read back with ``dc.load_angles_csv``, as a user's logged data would be.

The fit is Gauss-Newton with Levenberg-Marquardt damping on log-parameters (positive by construction), by multiple
shooting (Bock & Plitt 1984): the record is cut into K segments, each simulated from its own unknown start state
z_k = (angles, rates), estimated with the parameters; the residuals are the whitened angle errors
(y_model - y_measured) / sigma along every segment and the continuity defects W (z_k(end) - z_{k+1}) between segments
(a penalty weight W = 1e4, raised from 1 over the first iterations, stands in for the constraint). A chaotic
motion's single-shooting error surface is rugged (a small change of a parameter changes the whole trajectory); short
segments keep it nearly quadratic. The Jacobian of each segment (with respect to the parameters and its own start)
is ``jax.jacfwd`` of diffchain's rollout, vmapped over the segments; the block-sparse Jacobian is assembled densely
(a few dozen unknowns).

The noise-consistent error of each parameter is its Gauss-Newton standard error at the optimum, the square root of
the diagonal of sigma_hat^2 (J^T J)^-1 (sigma_hat^2 the whitened residuals' mean square: 1 when the noise model is
right); an unbiased fit has its errors within a few standard errors, and the errors' spread over seeds equals the
standard error. The fit runs for 8 noise seeds at once (``vmap``: one compiled program per system) and prints, per
parameter, the truth, the mean +- standard deviation of the estimates over the seeds, the mean standard error and the
largest |error| / standard error. It checks the Jacobian once against central differences, and writes
docs/sysid.png (measured and fitted angles, the errors over seeds against their standard errors; ``--out``).

    python examples/sysid.py [--system pendulum|fourbar|both] [--seeds 8] [--data DIR] [--quick]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import jax

jax.config.update("jax_enable_x64", True)  # Gauss-Newton's normal equations and the derivative check: float64

import jax.numpy as jnp  # noqa: E402
import equinox as eqx  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

import diffchain as dc  # noqa: E402

dc.set_xla_cpu_flags()  # optional: diffchain's recommended XLA CPU flags, before any computation

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")
NOISE = 0.01          # measurement noise: 1 % of each angle signal's standard deviation
W_CONTINUITY = 1e4    # weight of the multiple-shooting continuity defects
DT = 0.01             # the model's step and the sampling interval [s]
TRUTH_SUBSTEPS = 2    # the true motion is simulated with steps of DT / 2
LM_ITERS = 30         # Levenberg-Marquardt iterations
CONTINUATION = 16     # the continuity weight grows from 1 to W_CONTINUITY over the first iterations


def wrap(a):
    return jnp.arctan2(jnp.sin(a), jnp.cos(a))


# ---------------------------------------------------------------------------------------------------------------------
# The two systems: a model from its parameters p, and the simulation of one segment from a start state z.

def pendulum_problem(quick):
    names = ["m_2 [kg]", "l_1 [m]", "l_2 [m]", "k_1 [N m s]", "k_2 [N m s]"]
    truth = np.array([0.8, 1.0, 0.7, 0.05, 0.03])
    guess = truth * np.array([1.3, 0.85, 1.2, 2.0, 0.5])

    def model(p):
        return dc.pendulum(2, mass=jnp.stack([jnp.ones_like(p[0]), p[0]]), length=p[1:3],
                           k_omega=jnp.stack([p[3], p[4], jnp.zeros_like(p[0])]), check=False)

    def segment(p, z, n_steps, dt):
        """The joint angles at the start and after each of n_steps - 1 steps (n_steps, 2), and the end state z."""
        chain = model(p)
        state = dc.from_joint_angles(chain, z[:2], z[2:])
        _, traj = dc.rollout(chain, state, None, dt, n_steps=n_steps, check=False)
        angles = jax.vmap(lambda x: dc.link_angles(x))(traj.x)            # (T, 2): phi_1, phi_2
        theta = jnp.stack([angles[:, 0], angles[:, 1] - angles[:, 0]], -1)
        rates = dc.joint_velocities(jax.tree.map(lambda a: a[-1], traj))[:-1]
        return jnp.concatenate([z[None, :2], theta[:-1]]), jnp.concatenate([theta[-1], rates])

    z0 = np.array([1.9, 2.4, 0.0, 0.0])     # released at rest from a large angle: chaotic
    K, S = (6, 50) if quick else (16, 50)    # segments x samples per segment
    return dict(name="double pendulum", key="pendulum", names=names, truth=truth, guess=guess, segment=segment,
                z0=z0, K=K, S=S, columns=["theta_1", "theta_2"])


def fourbar_problem(quick):
    names = ["coupler mass [kg]", "coupler c.o.m. a [m]", "crank damper c [N m s]"]
    truth = np.array([2.0, 1.1, 0.4])
    guess = np.array([1.5, 0.9, 0.2])
    b = dc.MechanismBuilder()                       # diffchain.systems.four_bar() with a damper at the crank
    b.ground("A0", (0.0, 0.0)), b.ground("B0", (2.0, 0.0))
    b.point("A", (0.6, 0.8)), b.point("B", (2.3, 1.4))
    b.body("crank", "A0", "A", mass=1.0, inertia=0.1)
    b.body("coupler", "A", "B", mass=2.0, inertia=0.5)
    b.body("rocker", "B0", "B", mass=1.0, inertia=0.2)
    b.motor("drive", "ground", "crank")             # no torque: it defines the minimal coordinate, the crank angle
    b.damper("crank damper", "ground", "crank", c=0.4)
    b_mech, drawn = b.build()

    def model(p):
        bodies = b_mech.bodies
        return eqx.tree_at(lambda m: (m.bodies.mass, m.bodies.com, m.damper_c), b_mech,
                           (bodies.mass.at[1].set(p[0]), bodies.com.at[1, 0].set(p[1]), p[2:3]))

    def segment(p, z, n_steps, dt):
        mech = model(p)
        # the configuration from the crank angle by Newton steps from the drawn pose (the record starts near it);
        # kinematics only: the masses do not enter
        state = dc.from_minimal_coordinates(b_mech, z, drawn, n_newton=6)
        _, traj = dc.rollout(mech, state, None, dt, n_steps=n_steps, integrator=dc.RK4(), check=False)
        zs = jax.vmap(lambda s: dc.minimal_coordinates(b_mech, s))(traj)
        return jnp.concatenate([z[None, :1], zs[:-1, :1]]), zs[-1]

    z0 = np.array([float(dc.minimal_coordinates(b_mech, drawn)[0]), 0.0])   # released at rest at the drawn pose
    K, S = (1, 200) if quick else (1, 400)   # not chaotic: a single shooting segment
    return dict(name="four-bar", key="fourbar", names=names, truth=truth, guess=guess, segment=segment,
                z0=z0, K=K, S=S, columns=["crank"])


# ---------------------------------------------------------------------------------------------------------------------
# Measurements: the true motion, sampled, with noise; written to and read back from CSV files.

def measure(prob, seeds, folder):
    """The true angles (N, k) at t = 0, DT, ..., K S DT (simulated at DT / 2, every other step kept), the noise level
    sigma (k,), and per seed the measured angles as read back from the CSV file this writes: (seeds, N, k)."""
    K, S = prob["K"], prob["S"]
    n = K * S + 1
    sub = TRUTH_SUBSTEPS
    fine, _ = jax.jit(prob["segment"], static_argnums=2)(jnp.asarray(prob["truth"]), jnp.asarray(prob["z0"]),
                                                         sub * (n - 1) + 1, DT / sub)
    true = np.unwrap(np.asarray(fine[::sub]), axis=0)
    t = DT * np.arange(n)
    sigma = NOISE * true.std(axis=0)
    measured = []
    for seed in seeds:
        noisy = true + sigma * np.random.default_rng(seed).standard_normal(true.shape)
        path = os.path.join(folder, f"sysid_{prob['key']}_seed{seed}.csv")
        dc.save_angles_csv(path, t, noisy, prob["columns"],
                           comment=f"{prob['name']}: simulated angles [rad] with 1 % noise, seed {seed}")
        t_read, angles = dc.load_angles_csv(path)
        assert np.array_equal(t_read, t) and np.array_equal(angles, noisy)
        measured.append(angles)
    return t, true, sigma, np.stack(measured)


def start_guess(prob, y):
    """Each segment's start state from the measured angles y (N, k): the angles and rates of a local cubic fit over
    +-12 samples (one-sided at the start of the record)."""
    K, S, k = prob["K"], prob["S"], y.shape[1]
    z = []
    for i in range(K):
        c = i * S
        window = np.arange(max(0, c - 12), min(len(y), c + 13))
        fits = [np.polyfit(DT * (window - c), y[window, j], 3) for j in range(k)]
        z.append(np.concatenate([[f[3] for f in fits], [f[2] for f in fits]]))
    return np.stack(z)


# ---------------------------------------------------------------------------------------------------------------------
# Multiple shooting and Levenberg-Marquardt.

def fitter(prob, sigma):
    """``linearised``: the residuals and their Jacobian for a batch of seeds, one compiled program; ``fit``:
    Levenberg-Marquardt from starts x0s for measured angles ys. x = (log p (P,), z_1..z_K (K d,))."""
    segment, K, S, P = prob["segment"], prob["K"], prob["S"], len(prob["truth"])
    k = len(sigma)
    d = 2 * k if prob["key"] == "pendulum" else 2
    n_meas = K * S * k + k
    sigma = jnp.asarray(sigma)

    def one(u, zk):                          # one segment, from the log-parameters; its value twice (jacfwd's aux)
        out = segment(jnp.exp(u), zk, S, DT)
        return out, out

    def single(x, y):
        """The residuals (whitened angle errors, then the continuity defects with weight 1) and their Jacobian,
        assembled from each segment's jacfwd with respect to (log p, its own start)."""
        u, z = x[:P], x[P:].reshape(K, d)
        ((pu, pz), (eu, ez)), (pred, end) = jax.vmap(jax.jacfwd(one, argnums=(0, 1), has_aux=True),
                                                     in_axes=(None, 0))(u, z)
        # pred (K, S, k), end (K, d); pu (K, S, k, P), pz (K, S, k, d), eu (K, d, P), ez (K, d, d)
        meas = wrap(pred - y[:-1].reshape(K, S, k)) / sigma
        last = wrap(end[-1, :k] - y[-1]) / sigma
        jump = end[:-1] - z[1:]
        r = jnp.concatenate([meas.ravel(), last, jnp.concatenate([wrap(jump[:, :k]), jump[:, k:]], -1).ravel()])
        eye = jnp.eye(K)
        J_meas = jnp.concatenate([(pu / sigma[:, None]).reshape(K * S * k, P),
                                  (eye[:, None, :, None] * (pz / sigma[:, None]).reshape(K, S * k, 1, d))
                                  .reshape(K * S * k, K * d)], 1)
        J_last = jnp.concatenate([eu[-1, :k] / sigma[:, None], jnp.zeros((k, (K - 1) * d)),
                                  ez[-1, :k] / sigma[:, None]], 1)
        J_jump = jnp.concatenate([eu[:-1].reshape((K - 1) * d, P),
                                  (eye[:-1, None, :, None] * ez[:-1, :, None, :]
                                   - jnp.eye(K, k=1)[:-1, None, :, None] * jnp.eye(d)[None, :, None, :])
                                  .reshape((K - 1) * d, K * d)], 1)
        return r, jnp.concatenate([J_meas, J_last, J_jump]), pred

    batch = jax.jit(jax.vmap(single))

    def linearised(xs, ys):
        return [np.asarray(a) for a in batch(jnp.asarray(xs), jnp.asarray(ys))]

    def fit(x0s, ys):
        """Levenberg-Marquardt on every seed at once (the seeds a batch of the compiled program; the small normal
        equations in numpy): x, the standard errors of the log-parameters, sigma_hat (whitened: 1 expected), and
        the fitted segments' angles."""
        x, (r, J, pred), lam = x0s, linearised(x0s, ys), np.full(len(x0s), 1.0)
        for i in range(LM_ITERS + 1):
            w = W_CONTINUITY * min(1.0, 10.0 ** ((i - CONTINUATION) / 4))   # the continuity weight: 1 -> W
            wv = np.concatenate([np.ones(n_meas), np.full(r.shape[1] - n_meas, w)])
            Jw, rw = J * wv[:, None], r * wv
            H, g = np.einsum("sri,srj->sij", Jw, Jw), np.einsum("sri,sr->si", Jw, rw)
            if i == LM_ITERS:
                break
            D = H * np.eye(H.shape[1])
            step = -np.linalg.solve(H + lam[:, None, None] * D, g[..., None])[..., 0]
            step[:, :P] = np.clip(step[:, :P], -0.3, 0.3)   # a parameter changes by at most 35 % in a step
            cand = x + step
            rc, Jc, pc = linearised(cand, ys)
            better = np.sum((rc * wv) ** 2, 1) < np.sum(rw ** 2, 1)
            x, r, J, pred = (np.where(better.reshape(-1, *([1] * (a.ndim - 1))), b, a)
                             for a, b in ((x, cand), (r, rc), (J, Jc), (pred, pc)))
            lam = np.where(better, lam / 3, lam * 3)
        s2 = np.sum(r[:, :n_meas] ** 2, 1) / (n_meas - x.shape[1])      # sigma_hat^2 of the whitened residuals
        cov = s2[:, None, None] * np.linalg.inv(H)
        return x, np.sqrt(np.diagonal(cov, axis1=1, axis2=2)[:, :P]), np.sqrt(s2), pred.reshape(len(x), -1, k)

    return linearised, fit


def check_jacobian(linearised, x0s, ys):
    """The largest relative difference between J v and central differences of the residuals along a random v, at
    the first seed's start (with the same compiled program: its batch is x0, x0 + h v, x0 - h v, ...)."""
    v = np.random.default_rng(1).standard_normal(x0s.shape[1])
    h = 1e-6
    xs = np.concatenate([x0s[:1], x0s[:1] + h * v, x0s[:1] - h * v, x0s[3:]])[:len(x0s)]
    r, J, _ = linearised(xs, np.broadcast_to(ys[:1], ys.shape))
    fd = (r[1] - r[2]) / (2 * h)
    return float(np.max(np.abs(J[0] @ v - fd)) / np.max(np.abs(fd)))


def identify(prob, seeds, folder):
    t, true, sigma, ys = measure(prob, seeds, folder)
    linearised, fit = fitter(prob, sigma)
    P = len(prob["truth"])
    x0s = np.stack([np.concatenate([np.log(prob["guess"]), start_guess(prob, y).ravel()]) for y in ys])
    name = prob["key"]
    start = time.perf_counter()
    rel = check_jacobian(linearised, x0s, ys)
    print(f"{name}: Jacobian along a random direction against central differences, largest relative difference "
          f"{rel:.1e}")
    x, se, s_hat, fitted = fit(x0s, ys)
    print(f"{name}: {len(seeds)} seeds x {prob['K']} segments x {prob['S']} samples, {LM_ITERS} LM iterations in "
          f"{time.perf_counter() - start:.1f} s (compiling included); sigma_hat / sigma = "
          f"{s_hat.min():.3f} .. {s_hat.max():.3f}")
    est = np.exp(x[:, :P])
    err = np.log(est / prob["truth"])             # relative error (of the log-parameter)
    z = err / se
    print(f"{name}: {'parameter':<24} {'truth':>8} {'mean':>9} {'+- std':>8} {'std. error':>10} "
          f"{'max |err|/se':>12}")
    for i, label in enumerate(prob["names"]):
        print(f"{name}: {label:<24} {prob['truth'][i]:8.4f} {est[:, i].mean():9.4f} {est[:, i].std(ddof=1):8.4f} "
              f"{(prob['truth'][i] * se[:, i]).mean():10.4f} {np.abs(z[:, i]).max():12.2f}")
    print(f"{name}: largest |error| / standard error over {len(seeds)} seeds and {P} parameters = "
          f"{np.abs(z).max():.2f}; mean (error / standard error)^2 = {np.mean(z ** 2):.2f}")
    return dict(t=t, true=true, y=ys[0], fitted=fitted[0], z=z, names=prob["names"], title=prob["name"])


def draw(results, out):
    fig, axes = plt.subplots(2, len(results), figsize=(6.5 * len(results), 7.5), squeeze=False)
    for c, res in enumerate(results):
        ax = axes[0, c]
        t, y, fit = res["t"], res["y"], res["fitted"]
        for j in range(y.shape[1]):
            ax.plot(t, np.unwrap(y[:, j]), ".", ms=2, color=f"C{j}", label=f"measured angle {j + 1}")
            ax.plot(t[:-1], np.unwrap(fit[:, j]), "-", lw=1, color="k", label="fitted" if j == 0 else None)
        ax.set(title=f"{res['title']}: measured (1 % noise) and fitted, seed 0", xlabel="t [s]", ylabel="angle [rad]")
        ax.legend(fontsize=8)
        ax = axes[1, c]
        z = res["z"]
        for i in range(z.shape[1]):
            ax.plot(np.full(z.shape[0], i) + np.linspace(-0.2, 0.2, z.shape[0]), z[:, i], "o", color=f"C{i}")
        ax.axhspan(-3, 3, color="0.9", zorder=0, label="within 3 standard errors")
        ax.axhline(0, color="k", lw=0.5)
        ax.set_xticks(range(z.shape[1]), res["names"], rotation=20, fontsize=8)
        ax.set(ylabel="error / standard error", title=f"{res['title']}: errors over {z.shape[0]} noise seeds")
        ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", choices=("pendulum", "fourbar", "both"), default="both")
    ap.add_argument("--seeds", type=int, default=8, help="noise seeds (default 8)")
    ap.add_argument("--quick", action="store_true", help="a smoke test: shorter records (3 s and 2 s)")
    ap.add_argument("--out", default=os.path.join(DOCS, "sysid.png"), help="the picture (default docs/sysid.png)")
    ap.add_argument("--data", default=None, help="folder for the CSV files (default: a temporary folder)")
    args = ap.parse_args()
    if args.seeds < 3:
        ap.error(f"--seeds must be at least 3 (the derivative check's batch), got {args.seeds}")
    problems = {"pendulum": pendulum_problem, "fourbar": fourbar_problem}
    keys = list(problems) if args.system == "both" else [args.system]
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.data or tmp
        os.makedirs(folder, exist_ok=True)
        results = [identify(problems[key](args.quick), list(range(args.seeds)), folder) for key in keys]
    draw(results, args.out)


if __name__ == "__main__":
    main()
