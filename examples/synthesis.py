"""Four-bar linkage synthesis by batched gradient-based optimisation, then sized against its dynamics.

A four-bar is the design vector d = (x_A0, y_A0, x_B0, y_B0, r2, r3, r4, p, q): ground pivots A0 and B0, crank
A0-A (r2), coupler A-B (r3), rocker B0-B (r4), and the coupler point C = A + p e + q e_perp (e the unit vector
A -> B, e_perp it turned by +90 degrees). At crank angle theta, A = A0 + r2 (cos theta, sin theta) and B is where
the circles |B - A| = r3 and |B - B0| = r4 meet (loop closure):

    B = A + a u + sigma h u_perp,  u = (B0 - A) / D,  a = (r3^2 - r4^2 + D^2) / (2 D),  h = sqrt(r3^2 - a^2),

D = |B0 - A|, sigma = +-1 the assembly branch. Three problems:

1. Path generation through 18 precision points (the case of Kunjur & Krishnamurty 1997, also solved by Cabrera et
   al. 2002), without prescribed timing: the unknowns are d, the first point's crank angle and the crank's advances
   between the points (a softmax: they keep the points' order and sum to one turn). Least squares on the 36
   coordinate errors, with penalty rows that keep the crank fully rotatable (r1 + r2 <= r3 + r4 and
   |r1 - r2| >= |r3 - r4|, r1 = |B0 - A0|: the loop closes at every crank angle, so one branch sigma traces the
   whole curve) and the link lengths in [0.05, 5]. Levenberg-Marquardt from thousands of random starts at once: the
   residuals and their Jacobian (``jax.jacfwd``) of every start are one ``jax.vmap``-ed compiled program; the small
   normal equations are solved in numpy.
2. The nine-point problem (Wampler, Morgan & Sommese 1992; 1442 solutions over the complex numbers, modulo the
   relabelling of the two dyads and Roberts cognates): the unknowns are the ground pivots A0, B0, the moving pivots
   relative to C in the first pose, a = A_1 - P_1 and b = B_1 - P_1, and the coupler's rotations phi_j from pose 1
   to pose j; the equations |P_j + R(phi_j) a - A0|^2 = |P_1 + a - A0|^2 and the same for b, B0 (j = 2..9): 16
   equations in 16 unknowns. The nine points come from a known four-bar (``diffchain.systems.four_bar``); Newton
   (Gauss-Newton with Levenberg-Marquardt damping) from random starts; a solution counts when its residual is
   <= 1e-10 and its Jacobian is regular; it is checked by the closed-form coupler point, which must pass through
   all nine points. Distinct solutions are counted modulo relabelling, and grouped into Roberts cognate triples.
3. Sizing against the dynamics, the step the synthesis tools leave out: the best 18-point linkage made of uniform
   bars (2 kg/m; the coupler a triangle of three bars) is built with ``dc.MechanismBuilder``, its crank driven at
   constant speed; the motor torque over a cycle is ``dc.mechanism_inverse_dynamics`` at 64 crank angles, the
   positions, velocities and accelerations those of the closed form (theta_dot = omega, theta_ddot = 0). The
   objective, path error plus a weight times a smooth peak of the torque (its 16-norm over the cycle), is
   differentiated through diffchain's inverse dynamics with respect to the design (checked against central
   differences) and lowered by Adam (optax).

Prints the best errors, the solution counts, the gradient check and the torques before and after; writes
docs/synthesis.png (``--out``).

    python examples/synthesis.py [--starts 4096] [--nine-starts 4096] [--steps 400] [--weight 4] [--quick]
"""
from __future__ import annotations

import argparse
import os
import time

import jax

jax.config.update("jax_enable_x64", True)  # the nine-point residuals <= 1e-10 and the derivative check: float64

import equinox as eqx  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import diffchain as dc  # noqa: E402
from diffchain import systems  # noqa: E402

dc.set_xla_cpu_flags()  # optional: diffchain's recommended XLA CPU flags, before any computation

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")

# The 18 target points of Kunjur & Krishnamurty (1997), as quoted by Cabrera et al. (2002) and later comparisons.
POINTS_18 = np.array([(0.5, 1.1), (0.4, 1.1), (0.3, 1.1), (0.2, 1.0), (0.1, 0.9), (0.05, 0.75), (0.02, 0.6),
                      (0.0, 0.5), (0.0, 0.4), (0.03, 0.3), (0.1, 0.25), (0.15, 0.2), (0.2, 0.3), (0.3, 0.4),
                      (0.4, 0.5), (0.5, 0.7), (0.6, 0.9), (0.6, 1.0)])
LENGTHS = (0.05, 5.0)     # the links' bounds in the 18-point problem
RHO, OMEGA = 2.0, 2 * np.pi   # the bars' mass per length (kg/m) and the crank's speed (rad/s; one turn a second)
N_ANGLES, PEAK_P = 64, 16     # the torque's crank-angle grid and the p-norm that stands for its peak


# ---- the closed-form four-bar ---------------------------------------------------------------------------------------
def perp(u):
    return jnp.stack([-u[..., 1], u[..., 0]], -1)


def four_bar_points(d, theta, sigma):
    """The moving points A, B, C of the four-bar ``d`` at crank angle ``theta`` on assembly branch ``sigma`` (+-1),
    and h^2 (negative where the loop does not close; h is then taken 0)."""
    A0, B0, r2, r3, r4, p, q = d[0:2], d[2:4], d[4], d[5], d[6], d[7], d[8]
    A = A0 + r2 * jnp.stack([jnp.cos(theta), jnp.sin(theta)])
    D = jnp.sqrt(jnp.sum((B0 - A) ** 2))
    u = (B0 - A) / D
    a = (r3**2 - r4**2 + D**2) / (2 * D)
    h2 = r3**2 - a**2
    B = A + a * u + sigma * jnp.sqrt(jnp.maximum(h2, 1e-300)) * perp(u)
    e = (B - A) / r3
    return A, B, A + p * e + q * perp(e), h2


def coupler_curve(d, sigma, n=400):
    return jax.vmap(lambda t: four_bar_points(d, t, sigma)[2])(jnp.linspace(0, 2 * jnp.pi, n))


def rotatable(d, margin=0.0):
    """Penalty rows, zero when the crank turns fully: the loop closes at every crank angle, |r3 - r4| + margin <=
    |B0 - A| <= r3 + r4 - margin, whose extremes are |r1 - r2| and r1 + r2."""
    r1, r2, r3, r4 = jnp.linalg.norm(d[2:4] - d[0:2]), d[4], d[5], d[6]
    return jnp.stack([jax.nn.relu(r1 + r2 - (r3 + r4) + margin), jax.nn.relu(jnp.abs(r3 - r4) - jnp.abs(r1 - r2)
                                                                               + margin)])


# ---- 1. path generation through precision points --------------------------------------------------------------------
def timing(z, direction):
    """The crank angles of the points: the first, then advances that are a softmax of one turn (order kept)."""
    n = z.shape[0] - 10
    steps = 2 * jnp.pi * jax.nn.softmax(z[10:])
    return z[9] + direction * jnp.concatenate([jnp.zeros(1), jnp.cumsum(steps)[:n - 1]])


def path_residuals(z, sigma, direction, points):
    """The coordinate errors C(theta_i) - P_i and the penalty rows (rotatability, link-length bounds)."""
    d = z[:9]
    C = jax.vmap(lambda t: four_bar_points(d, t, sigma)[2])(timing(z, direction))
    lengths = d[4:7]
    bounds = jnp.concatenate([jax.nn.relu(LENGTHS[0] - lengths), jax.nn.relu(lengths - LENGTHS[1])])
    return jnp.concatenate([(C - points).ravel(), 10.0 * rotatable(d, 0.02), 10.0 * bounds])


def levenberg_marquardt(linearised, z, n_iter, lam=1e-2):
    """Levenberg-Marquardt on a batch: ``linearised(z)`` gives the residuals (B, m) and the Jacobians (B, m, n) of all
    starts (one compiled program); the normal equations (J^T J + lam diag(J^T J)) dz = -J^T r are solved in numpy;
    a step is kept where it lowers |r|^2, lam falls by 3 then, else rises by 4."""
    r, J = (np.asarray(v) for v in linearised(z))
    lam = np.full(len(z), lam)
    for _ in range(n_iter):
        H, g = np.einsum("bri,brj->bij", J, J), np.einsum("bri,br->bi", J, r)
        diag = np.einsum("bii->bi", H) + 1e-12
        with np.errstate(all="ignore"):
            damped = H + lam[:, None, None] * np.eye(H.shape[1]) * diag[:, None, :]
            step = -np.linalg.solve(damped, g[..., None])[..., 0]
        step = np.where(np.isfinite(step), step, 0.0)
        rc, Jc = (np.asarray(v) for v in linearised(z + step))
        better = np.sum(rc**2, 1) < np.sum(r**2, 1)
        z, r, J = (np.where(better.reshape(-1, *([1] * (a.ndim - 1))), b, a) for a, b in ((z, z + step), (r, rc),
                                                                                            (J, Jc)))
        lam = np.clip(np.where(better, lam / 3, lam * 4), 1e-12, 1e8)
    return z, r, J


def precision_points(n_starts, n_iter, seed=0):
    """The 18-point problem from ``n_starts`` random starts (a quarter on each branch and direction)."""
    rng = np.random.default_rng(seed)
    n = len(POINTS_18)
    z0 = np.concatenate([rng.uniform(-1.5, 2.0, (n_starts, 4)), rng.uniform(0.1, 2.0, (n_starts, 3)),
                         rng.uniform(-1.5, 1.5, (n_starts, 2)), rng.uniform(-np.pi, np.pi, (n_starts, 1)),
                         0.3 * rng.standard_normal((n_starts, n))], 1)
    sigma = np.where(np.arange(n_starts) % 2 == 0, 1.0, -1.0)
    direction = np.where(np.arange(n_starts) % 4 < 2, 1.0, -1.0)
    points = jnp.asarray(POINTS_18)

    @jax.jit
    def batch(z):
        f = jax.vmap(lambda zz, s, w: (path_residuals(zz, s, w, points),
                                       jax.jacfwd(path_residuals)(zz, s, w, points)))
        return f(z, sigma, direction)

    z, r, _ = levenberg_marquardt(batch, z0, n_iter)
    error = np.sum(r[:, :2 * n] ** 2, 1)                     # the sum of squared distances
    feasible = np.all(np.abs(r[:, 2 * n:]) < 1e-12, 1)
    return z, sigma, direction, np.where(feasible, error, np.inf)


# ---- 2. the nine-point problem --------------------------------------------------------------------------------------
def rot(phi):
    c, s = jnp.cos(phi), jnp.sin(phi)
    return jnp.array([[c, -s], [s, c]])


def nine_point_residuals(z, P):
    """16 equations: each dyad's crank length is the same in poses 2..9 as in pose 1 (Wampler, Morgan & Sommese)."""
    A0, a, B0, b, phi = z[0:2], z[2:4], z[4:6], z[6:8], z[8:16]
    R = jax.vmap(rot)(phi)

    def dyad(G, m):
        moved = P[1:] + jnp.einsum("jik,k->ji", R, m) - G
        return jnp.sum(moved**2, 1) - jnp.sum((P[0] + m - G) ** 2)

    return jnp.concatenate([dyad(A0, a), dyad(B0, b)])


def design_of(z, P):
    """The four-bar d of a nine-point solution z (its pose 1: A = P_1 + a, B = P_1 + b, C = P_1)."""
    A0, A, B0, B = z[0:2], P[0] + z[2:4], z[4:6], P[0] + z[6:8]
    r3 = jnp.linalg.norm(B - A)
    e = (B - A) / r3
    c = P[0] - A
    return jnp.concatenate([A0, B0, jnp.stack([jnp.linalg.norm(A - A0), r3, jnp.linalg.norm(B - B0), c @ e,
                                               c @ perp(e)])])


def canonical(z):
    """A solution's pivots (A0, a, B0, b), the dyads in lexicographic order: one key for both labellings."""
    u, v = tuple(z[0:4]), tuple(z[4:8])
    return np.array(min(u, v) + max(u, v))


def cognates(z, P):
    """The two Roberts cognates of the nine-point solution z, as (A0, a, B0, b) (complex numbers at pose 1, k the
    coupler triangle's ratio (C - A) / (B - A); C0 = A0 + k (B0 - A0) the third ground pivot)."""
    cx = lambda v: v[0] + 1j * v[1]  # noqa: E731
    A0, B0, A, B, C = cx(z[0:2]), cx(z[4:6]), cx(P[0] + z[2:4]), cx(P[0] + z[6:8]), cx(P[0])
    k = (C - A) / (B - A)
    C0 = A0 + k * (B0 - A0)
    first = (A0, A0 + C - A, C0, C0 + k * (B - B0))               # rotates with the crank A0-A
    second = (B0, B0 + C - B, C0, C0 + (1 - k) * (A - A0))        # rotates with the rocker B0-B
    return [np.array([G.real, G.imag, (M - C).real, (M - C).imag, H.real, H.imag, (N - C).real, (N - C).imag])
            for G, M, H, N in (first, second)]


def through_points(z, P):
    """A nine-point solution checked by the closed form: at the crank angle of each pose (that of A_j = P_j +
    R(phi_j) a about A0), the distance of the coupler point C from P_j on each branch (9, 2)."""
    d = design_of(z, P)
    A = P + jnp.einsum("jik,k->ji", jax.vmap(rot)(jnp.concatenate([jnp.zeros(1), z[8:16]])), z[2:4])
    theta = jnp.arctan2(A[:, 1] - z[1], A[:, 0] - z[0])
    C = jax.vmap(lambda t: jnp.stack([four_bar_points(d, t, s)[2] for s in (1.0, -1.0)]))(theta)
    return jnp.linalg.norm(C - P[:, None], axis=-1)


def nine_point(n_starts, n_iter, seed=1):
    """The nine points of ``systems.four_bar()`` and every solution Newton finds from ``n_starts`` random starts."""
    mech, guess = systems.four_bar()
    state, _ = dc.assemble(mech, guess)
    names = mech.point_names
    Pt = np.asarray(mech.points(state.x.reshape(-1)))
    A0, B0, A, B, C = (Pt[names.index(n)] for n in ("A0", "B0", "A", "B", "C"))
    e = (B - A) / np.linalg.norm(B - A)
    known = np.array([*A0, *B0, np.linalg.norm(A - A0), np.linalg.norm(B - A), np.linalg.norm(B - B0),
                      (C - A) @ e, (C - A) @ np.array(perp(e))])
    sigma = float(np.sign(np.cross(np.append(B0 - A, 0), np.append(B - A, 0))[2]))             # the drawn branch
    theta0 = np.arctan2(*(A - A0)[::-1])
    thetas = theta0 + np.array([0.0, 0.5, 1.1, 1.8, 2.4, 3.1, 3.9, 4.6, 5.4])
    P = np.asarray(jax.vmap(lambda t: four_bar_points(jnp.asarray(known), t, sigma)[2])(thetas))
    Pj = jnp.asarray(P)

    rng = np.random.default_rng(seed)
    z0 = np.concatenate([rng.uniform(-2, 4, (n_starts, 2)), rng.uniform(-2, 2, (n_starts, 2)),
                         rng.uniform(-2, 4, (n_starts, 2)), rng.uniform(-2, 2, (n_starts, 2)),
                         rng.uniform(-np.pi, np.pi, (n_starts, 8))], 1)
    batch = jax.jit(jax.vmap(lambda z: (nine_point_residuals(z, Pj), jax.jacfwd(nine_point_residuals)(z, Pj))))
    z, r, J = levenberg_marquardt(batch, z0, n_iter, lam=1e-3)
    residual = np.max(np.abs(r), 1)
    s = np.linalg.svd(J, compute_uv=False)
    regular = s[:, -1] > 1e-8 * s[:, 0]                         # isolated: not on a degenerate family
    solved = (residual <= 1e-10) & regular
    distinct = []                                               # (key, solution), modulo relabelling
    for zz in z[solved]:
        if not any(np.max(np.abs(canonical(zz) - k)) < 1e-6 for k, _ in distinct):
            distinct.append((canonical(zz), zz))
    keys = np.array([k for k, _ in distinct]).reshape(-1, 8)
    sols = np.array([zz for _, zz in distinct]).reshape(-1, 16)
    miss = np.asarray(jax.jit(jax.vmap(lambda zz: through_points(zz, Pj)))(sols)).reshape(-1, 9, 2)

    def index(z_key):
        """The position of a solution among the distinct ones (-1: not found)."""
        return next((i for i, k in enumerate(keys) if np.max(np.abs(canonical(z_key) - k)) < 1e-6), -1)

    triples = {tuple(sorted({i, *(index(c) for c in cognates(zz, P))})) for i, zz in enumerate(sols)}
    truth = np.concatenate([A0, A - C, B0, B - C])
    return dict(P=P, known=known, sigma=sigma, theta1=thetas[0], n_starts=n_starts, n_solved=int(solved.sum()),
                sols=sols, residual=residual[solved], miss=miss, triples=triples, truth=index(truth),
                truth_cognates=[index(c) for c in cognates(truth, P)])


# ---- 3. sizing against the dynamics --------------------------------------------------------------------------------
def template():
    """A four-bar drawn with the builder (crank A0-A with a motor, coupler A-B, rocker B0-B): the structure; its
    dimensions and masses are replaced by those of a design (:func:`mechanism_of`)."""
    mb = dc.MechanismBuilder(g=9.81)
    mb.ground("A0", (0.0, 0.0)), mb.ground("B0", (2.0, 0.0))
    mb.point("A", (0.6, 0.8)), mb.point("B", (2.3, 1.4))
    mb.body("crank", "A0", "A", mass=1.0, inertia=0.1)
    mb.body("coupler", "A", "B", mass=1.0, inertia=0.1)
    mb.body("rocker", "B0", "B", mass=1.0, inertia=0.1)
    mb.motor("drive", "ground", "crank")
    return mb.build()[0]


def mechanism_of(mech, d):
    """``mech`` with the ground pivots, the link lengths and the masses of design d: uniform bars of RHO kg/m, the
    coupler a triangle of three bars A-B, B-C, C-A (its mass, centre of mass and inertia about it summed over the
    bars). Traced arrays: the mechanism is differentiable in d."""
    r2, r3, r4 = d[4], d[5], d[6]
    corners = jnp.stack([jnp.zeros(2), jnp.stack([r3, 0.0]), d[7:9]])  # A, B, C in the coupler's frame
    a, b = corners, jnp.roll(corners, -1, axis=0)
    ell = jnp.linalg.norm(b - a, axis=1)
    m = RHO * ell
    com = (m[:, None] * (a + b) / 2).sum(0) / m.sum()
    inertia = jnp.sum(m * ell**2 / 12 + m * jnp.sum(((a + b) / 2 - com) ** 2, 1))
    mass = RHO * jnp.stack([r2, ell.sum(), r4])
    coms = jnp.stack([jnp.stack([r2 / 2, 0.0]), com, jnp.stack([r4 / 2, 0.0])])
    inertias = jnp.stack([RHO * r2**3 / 12, inertia, RHO * r4**3 / 12])
    L = jnp.stack([r2, r3, r4])
    offset = mech.offset.at[0:4].set(d[0:4])                  # the ground points A0, B0
    return eqx.tree_at(lambda mm: (mm.offset, mm.dist.L, mm.bodies.L, mm.bodies.mass, mm.bodies.com,
                                   mm.bodies.inertia), mech, (offset, L, L, mass, coms, inertias))


def motor_torque(mech, d, theta, sigma, omega):
    """The crank motor's torque at crank angle theta, turning at constant speed omega: diffchain's closed-loop
    inverse dynamics at the closed form's positions, velocities (theta_dot = omega) and accelerations."""
    q = lambda t: jnp.concatenate(four_bar_points(d, t, sigma)[:2])  # noqa: E731  (A, B): the coordinates
    x, dx = jax.jvp(q, (theta,), (jnp.ones_like(theta),))
    ddx = jax.jvp(lambda t: jax.jvp(q, (t,), (jnp.ones_like(t),))[1], (theta,), (jnp.ones_like(theta),))[1]
    state = dc.State(x.reshape(2, 2), omega * dx.reshape(2, 2))
    return dc.mechanism_inverse_dynamics(mech, state, omega**2 * ddx.reshape(2, 2)).u[0]


def cycle_torques(mech, d, sigma, direction):
    """The motor torque at N_ANGLES crank angles over one turn (``lax.map``: one unbatched solve at a time)."""
    grid = jnp.linspace(0.0, 2 * jnp.pi, N_ANGLES, endpoint=False)
    return jax.lax.map(lambda t: motor_torque(mechanism_of(mech, d), d, t, sigma, direction * OMEGA), grid)


def sizing_terms(z, mech, sigma, direction):
    """(path error sum |C_i - P_i|^2, penalty, smooth peak torque (mean |tau|^p)^(1/p), the torques)."""
    r = path_residuals(z, sigma, direction, jnp.asarray(POINTS_18))
    n = 2 * len(POINTS_18)
    tau = cycle_torques(mech, z[:9], sigma, direction)
    return jnp.sum(r[:n] ** 2), jnp.sum(r[n:] ** 2), jnp.mean(jnp.abs(tau) ** PEAK_P) ** (1 / PEAK_P), tau


def size(z0, sigma, direction, steps, weight=4.0, lr=1e-3):
    """Adam on the design (and timing): path error / its start + weight (smooth peak / its start)^2 + penalty."""
    mech = template()
    e0, _, peak0, _ = sizing_terms(z0, mech, sigma, direction)

    def objective(z):
        e, pen, peak, _ = sizing_terms(z, mech, sigma, direction)
        return e / e0 + weight * (peak / peak0) ** 2 + pen / e0

    value_and_grad = jax.jit(jax.value_and_grad(objective))
    value = jax.jit(objective)
    v = np.random.default_rng(2).standard_normal(z0.shape)
    v /= np.linalg.norm(v)
    h = 1e-6
    f0, g0 = value_and_grad(z0)
    central = (value(z0 + h * v) - value(z0 - h * v)) / (2 * h)
    grad_check = (float(g0 @ v), float(central))
    opt = optax.adam(lr)
    state, z = opt.init(z0), jnp.asarray(z0)
    history = [float(f0)]
    for _ in range(steps):
        f, g = value_and_grad(z)
        updates, state = opt.update(g, state)
        z = optax.apply_updates(z, updates)
        history.append(float(f))
    return np.asarray(z), grad_check, history, jax.jit(lambda z: sizing_terms(z, mech, sigma, direction))


def draw_linkage(ax, d, theta, sigma, color):
    A, B, C, _ = (np.asarray(v) for v in four_bar_points(jnp.asarray(d), theta, sigma))
    A0, B0 = d[0:2], d[2:4]
    ax.plot(*np.stack([A0, A, B, B0]).T, "-o", color=color, lw=1.5, ms=3)
    ax.fill(*np.stack([A, B, C]).T, color=color, alpha=0.2)
    ax.plot(*np.stack([A0, B0]).T, "s", color="k", ms=5)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--starts", type=int, default=4096, help="random starts of the 18-point problem")
    ap.add_argument("--iters", type=int, default=200, help="Levenberg-Marquardt iterations of the 18-point problem")
    ap.add_argument("--nine-starts", type=int, default=4096, help="random starts of the nine-point problem")
    ap.add_argument("--steps", type=int, default=400, help="Adam steps of the dynamic sizing")
    ap.add_argument("--weight", type=float, default=4.0, help="the peak torque's weight in the sizing objective")
    ap.add_argument("--out", default=os.path.join(DOCS, "synthesis.png"))
    ap.add_argument("--quick", action="store_true", help="fewer starts, iterations and steps")
    args = ap.parse_args()
    if args.quick:
        args.starts, args.iters, args.nine_starts, args.steps = 256, 60, 2048, 10

    t0 = time.perf_counter()
    z, sigma, direction, error = precision_points(args.starts, args.iters)
    order = np.argsort(error)
    best = order[0]
    print(f"18 points: {args.starts} starts x {args.iters} LM iterations in {time.perf_counter() - t0:.1f} s; "
          f"{int(np.isfinite(error).sum())} end fully rotatable; best sum of squared distances {error[best]:.6f}")
    print("18 points: best design (x_A0, y_A0, x_B0, y_B0, r2, r3, r4, p, q) = "
          + " ".join(f"{v:.4f}" for v in z[best, :9])
          + f"; branch {sigma[best]:+.0f}, direction {direction[best]:+.0f}")
    shown = [best]                                             # the best distinct solutions, for the picture
    for i in order[1:]:
        if np.isfinite(error[i]) and len(shown) < 3 and all(np.max(np.abs(z[i, :9] - z[j, :9])) > 1e-2 for j in shown):
            shown.append(i)

    t0 = time.perf_counter()
    nine = nine_point(args.nine_starts, 80)
    miss = nine["miss"].min(-1)
    one_branch = int(np.sum(np.any(np.all(nine["miss"] < 1e-8, axis=1), axis=-1)))
    triples = nine["triples"]
    print(f"nine points: {args.nine_starts} starts in {time.perf_counter() - t0:.1f} s; {nine['n_solved']} converged "
          f"(residual <= 1e-10, regular Jacobian; largest residual {nine['residual'].max():.1e}); "
          f"{len(nine['sols'])} distinct modulo relabelling")
    print(f"nine points: every distinct solution passes through all nine points: largest distance {miss.max():.1e}; "
          f"{one_branch} with all nine on one assembly branch")
    print(f"nine points: {len(triples)} cognate classes, {sum(-1 not in t for t in triples)} complete triples")
    print(f"nine points: the known four-bar found: {nine['truth'] >= 0}; its two Roberts cognates found: "
          f"{all(i >= 0 for i in nine['truth_cognates'])}")

    t0 = time.perf_counter()
    sized, (grad_v, central_v), history, terms = size(z[best], sigma[best], direction[best], args.steps, args.weight)
    print(f"sizing: gradient along a random direction {grad_v:.10e}, central difference {central_v:.10e}, "
          f"relative difference {abs(grad_v - central_v) / abs(central_v):.1e}")
    (e0, _, _, tau0), (e1, pen1, _, tau1) = terms(jnp.asarray(z[best])), terms(jnp.asarray(sized))
    tau0, tau1 = np.asarray(tau0), np.asarray(tau1)
    print(f"sizing: {args.steps} Adam steps in {time.perf_counter() - t0:.1f} s; objective {history[0]:.4f} -> "
          f"{history[-1]:.4f}")
    for what, e, tau in (("before", e0, tau0), ("after", e1, tau1)):
        print(f"sizing {what}: path error {float(e):.6f}, peak torque {np.abs(tau).max():.3f} N m, "
              f"RMS torque {np.sqrt(np.mean(tau**2)):.3f} N m")

    fig, (ax_p, ax_n, ax_t) = plt.subplots(1, 3, figsize=(15, 4.8), gridspec_kw=dict(width_ratios=[1.2, 1.2, 1]))
    for k, i in enumerate(reversed(shown)):
        color = f"C{len(shown) - 1 - k}"
        ax_p.plot(*np.asarray(coupler_curve(jnp.asarray(z[i, :9]), sigma[i])).T, color=color, lw=1.2,
                  label=f"error {error[i]:.5f}")
    draw_linkage(ax_p, z[best, :9], timing(jnp.asarray(z[best]), direction[best])[0], sigma[best], "C0")
    ax_p.plot(*np.asarray(coupler_curve(jnp.asarray(sized[:9]), sigma[best])).T, "k--", lw=1, label="sized")
    ax_p.plot(*POINTS_18.T, "kx", ms=6, label="18 targets")
    ax_p.set(aspect="equal", title="18 precision points: the best coupler curves", xlabel="x", ylabel="y")
    ax_p.legend(fontsize=8, loc="lower right")
    P = nine["P"]
    for i, zz in enumerate(nine["sols"][:12]):
        d = np.asarray(design_of(jnp.asarray(zz), jnp.asarray(P)))
        branch = 1.0 if np.all(nine["miss"][i, :, 0] < 1e-8) else -1.0
        ax_n.plot(*np.asarray(coupler_curve(jnp.asarray(d), branch)).T, lw=0.8, alpha=0.6)
    draw_linkage(ax_n, nine["known"], nine["theta1"], nine["sigma"], "C0")
    ax_n.plot(*P.T, "k*", ms=9, label="nine points")
    span = np.ptp(P, 0).max()
    ax_n.set(aspect="equal", xlim=(P[:, 0].min() - span, P[:, 0].max() + span),
             ylim=(P[:, 1].min() - span, P[:, 1].max() + span),
             title=f"nine points: {len(nine['sols'])} four-bars through all nine (12 drawn)", xlabel="x")
    ax_n.legend(fontsize=8, loc="upper right")
    grid = np.linspace(0, 360, N_ANGLES, endpoint=False)
    ax_t.plot(grid, tau0, "C0", label="best path")
    ax_t.plot(grid, tau1, "C3", label="sized for torque")
    ax_t.set(title=f"motor torque at {OMEGA / (2 * np.pi):g} rev/s", xlabel="crank angle [deg]", ylabel="N m")
    ax_t.legend(fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig.savefig(args.out, dpi=90)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
