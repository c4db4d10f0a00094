"""Why the batched sweeps cost what they cost on XLA CPU: a loop over the points against the same arithmetic written
out, on a toy sweep and on the library's batched rollout (README, "What limited the batched throughput").

    python benchmarks/xla_cpu_loops.py          # ~1 min, one core

1. *Toy sweep*: 6 points, 5 carries, one division per point, a batch of B chains as (B,) rows (the layout of the
   library's sweeps under ``vmap``): ``lax.scan`` over the points against the loop written out. Per chain and sweep.
2. *optimization_barrier*: whether XLA CPU keeps ``lax.optimization_barrier`` in the compiled program (it does not:
   the barrier cannot stop fusion there, so it cannot keep a written-out sweep from being fused into its consumers).
3. *Library*: the batched rollout of the 5-link pendulum (float32, 4096 copies) with the Part I sweeps as the library
   runs them under ``vmap`` (a scan) and written out point by point (``recursive._abcd_sweeps_c(..., unrolled=True)``
   patched in for this run), the backward coefficients either as quotients (as the library computes them on one
   chain of 6-8 points) or multiplied by 1/D_i and left to XLA's fusion, which then fuses the sweeps into the kernel
   that stacks the accelerations and recomputes them per output element.
4. *Point by point*: a rollout of the same pendulum (a pinned chain of point masses; masses, lengths and g passed in
   at run time, as the library's chain is) written for a batch: the state as 4n separate (B,) buffers, the rod
   tensions by the Thomas algorithm on the tridiagonal system J M^-1 J^T, everything written out point by point. With
   the Thomas coefficients computed as quotients XLA CPU computes each once (it does not duplicate a division into
   several consumers); multiplied by the reciprocal pivot instead, every later quantity recomputes the whole sweep.
5. *The library's step point by point*: the same layout (4n (B,) buffers in the time scan) for the library's whole
   Part I step -- unit rod directions, the rods' PD terms, torques, damping, drag, sliders and guided points (the
   chain's masks and coefficients are run-time values), the seed's A, b, C, d sweeps -- from the library's per-point
   kernels (``rod_geometry``, ``rod_rhs``, ``point_forces``, ``slider_rhs``, ``projector``), against the library's
   batched rollout: left to XLA's fusion, and with each point's values materialised by a product with the identity;
   and the lambda-first form of the same step (rod tensions by the Thomas algorithm, as in section 4).
Since ``diffchain._xla.point_major`` the library's ``vmap``-ed rollout of a pendulum is the lean form of section 4 made exact;
sections 3-5 measure against the array form (the ``vmap`` of the one-chain program), and show the lean form too.
"""
from __future__ import annotations

import os
import re
import statistics
import time

os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})  # one core: the numbers do not depend on the load
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import diffchain as dc  # noqa: E402
from diffchain._solvers import recursive  # noqa: E402
from diffchain._constraints.chain import projector, rod_rhs, slider_rhs  # noqa: E402
from diffchain._model.forces import point_forces  # noqa: E402
from diffchain._model.geometry import link_omega_c, rod_geometry  # noqa: E402

dc.set_xla_cpu_flags()  # the flags diffchain recommends, as its users would set them


def per_call(f, *args, repeats=7):
    jax.block_until_ready(f(*args))
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(f(*args))
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def toy_step(c, x):
    c1, c2, c3, c4, c5 = c
    d = 1.0 / (x + c1)
    n = (c2 * d, c3 * d + x, c4 - d, c5 + d * x, c1 * x)
    return n, n


def toy_sweep(m, written_out):
    init = (jnp.zeros(m.shape[1:], m.dtype),) * 5
    if written_out:
        c, ys = init, []
        for i in range(m.shape[0]):
            c, y = toy_step(c, m[i])
            ys.append(y)
        ys = tuple(jnp.stack(v) for v in zip(*ys))
    else:
        _, ys = jax.lax.scan(toy_step, init, m)
    return sum(ys) * 0.2 + m * 0.5


def array_form(T, dt):
    """``jit`` of the ``vmap`` of the library's one-chain rollout (the array form, which ``diffchain.rollout`` runs
    under ``vmap`` for chains that ``diffchain._xla.point_major`` does not take): final positions of a batch."""
    from diffchain._simulate.rollout import _rollout

    return jax.jit(lambda c, s: jax.vmap(
        lambda si: _rollout(c, si, None, dt, T, dc.Recursive(), dc.SeedQuantum(), None)[0].x)(s))


def lean_form(T, dt):
    """``jit`` of the ``vmap`` of ``diffchain.rollout`` with the point-major backend (``diffchain._xla.point_major``)."""
    return jax.jit(lambda c, s: jax.vmap(lambda si: dc.rollout(c, si, None, dt, n_steps=T,
                                                               backend=dc.PointMajor())[0].x)(s))


def compare(runs, chain, s0, B, T, base):
    """Time the ``runs`` (jitted f(chain, states)) in turn, three rounds; print the rates against ``base``."""
    outs = {k: f(chain, s0) for k, f in runs.items()}
    rates = {k: [] for k in runs}
    for _ in range(3):  # alternated: the machine's speed drifts
        for k, f in runs.items():
            rates[k].append(B * T / per_call(f, chain, s0, repeats=3))
    for k in runs:
        r = statistics.median(rates[k])
        print(f"   {k:36s} {r:10.3g} copy-steps/s ({r / statistics.median(rates[base]):4.2f}x), "
              f"max |x - x_base| = {float(jnp.max(jnp.abs(outs[k] - outs[base]))):.1e} m")


def section_toy():
    print("1. toy sweep (6 points, 5 carries), float32, per chain and sweep")
    print(f"{'B':>6} {'scan':>10} {'written out':>12} {'ratio':>6}")
    for B in (64, 256, 1024, 4096):
        m = jnp.asarray(np.random.default_rng(0).uniform(1, 2, (6, B)), jnp.float32)
        L = max(50, 100_000 // B)
        t = {}
        for w in (False, True):
            f = jax.jit(lambda m, w=w: jax.lax.scan(lambda c, _: (toy_sweep(c, w), None), m, None, length=L)[0])
            t[w] = per_call(f, m) / L / B
        print(f"{B:6d} {t[False] * 1e9:8.1f} ns {t[True] * 1e9:10.1f} ns {t[False] / t[True]:5.1f}x")


def section_barrier():
    f = jax.jit(lambda x: jax.lax.optimization_barrier(jnp.sin(x)) * 2.0)
    jaxpr = str(jax.make_jaxpr(f)(jnp.ones(8)))
    hlo = f.lower(jnp.ones(8)).compile().as_text()
    print(f"\n2. optimization_barrier: in the jaxpr {jaxpr.count('optimization_barrier')}, "
          f"in the compiled XLA CPU program {len(re.findall('opt-barrier', hlo))}")


def pendulum_batch(B):
    """The benchmark's 5-link pendulum in float32 and B starts, joint angles uniform in [-pi, pi]."""
    chain = dc.pendulum(5, mass=1.0, length=1.0)
    chain = jax.tree_util.tree_map(lambda a: a.astype(jnp.float32) if jnp.issubdtype(a.dtype, jnp.floating) else a,
                                   chain)
    th = jnp.asarray(np.random.default_rng(0).uniform(-np.pi, np.pi, (B, 5)), jnp.float32)
    return chain, jax.vmap(lambda t: dc.from_joint_angles(chain, t))(th)


def section_library(B=4096, T=200):
    chain, s0 = pendulum_batch(B)
    print(f"\n3. library: batched rollout, 5-link pendulum, float32, B = {B}, T = {T}")
    scan_form, fused_max = recursive.abcd_sweeps_c, recursive.FUSED_MAX
    written_out = lambda *a: recursive._abcd_sweeps_c(*a, unrolled=True)  # noqa: E731
    rows = []
    for name, sweeps, fused in (("scan (the library under vmap)", scan_form, fused_max),
                                ("written out, quotients", written_out, 0),
                                ("written out, left to fusion", written_out, 99)):
        recursive.abcd_sweeps_c, recursive.FUSED_MAX = sweeps, fused
        try:
            f = array_form(T, 1e-3)
            out = f(chain, s0)
            t = per_call(f, chain, s0, repeats=5)
        finally:
            recursive.abcd_sweeps_c, recursive.FUSED_MAX = scan_form, fused_max
        rows.append((name, B * T / t, out))
    for name, rate, _ in rows:
        print(f"   {name:32s} {rate:10.3g} copy-steps/s")
    dx = max(float(jnp.max(jnp.abs(r[2] - rows[0][2]))) for r in rows)
    print(f"   same final states: max |dx| = {dx:.1e} m")


def scan_points_state(accel, x, v, T, dt):
    """T quanta of the seed's constant-acceleration scheme for a batch, x, v (B, n, 2), with the state carried as 4n
    separate (B,) buffers; ``accel(X, Y, U, V)`` maps the per-point buffers to the lists a_x, a_y. Returns x."""
    n = x.shape[1]

    def step(c, _):
        X, Y, U, V = c
        ax, ay = accel(X, Y, U, V)
        j = range(n)
        return (tuple(X[i] + dt * U[i] + 0.5 * dt * dt * ax[i] for i in j),
                tuple(Y[i] + dt * V[i] + 0.5 * dt * dt * ay[i] for i in j),
                tuple(U[i] + dt * ax[i] for i in j), tuple(V[i] + dt * ay[i] for i in j)), None

    init = tuple(tuple(a[:, i, k] for i in range(n)) for a, k in ((x, 0), (x, 1), (v, 0), (v, 1)))
    (X, Y, U, V), _ = jax.lax.scan(step, init, None, length=T)
    return jnp.stack([jnp.stack(X, -1), jnp.stack(Y, -1)], -1)


def pointwise_rollout(m, l, g, x, v, T, dt, quotients=True):
    """T quanta of the seed's scheme (PD drift correction, delta_eps = 5 dt) for a batch of pinned chains of point
    masses, point 0 fixed: ``x``, ``v`` (B, n, 2) with n = len(m) + 1; ``m`` (n-1,) the moving points' masses."""
    N, w = m.shape[0], 1.0 / (5.0 * dt)

    def accel(X, Y, U, V):
        rx, ry = [X[i + 1] - X[i] for i in range(N)], [Y[i + 1] - Y[i] for i in range(N)]
        du, dv = [U[i + 1] - U[i] for i in range(N)], [V[i + 1] - V[i] for i in range(N)]
        # rod i: r_i^T (a_{i+1} - a_i) = -|dv_i|^2 - 2 w r_i^T dv_i - w^2 (|r_i|^2 - l_i^2) / 2, with
        # a_j = (F_j - phi_{j-1} r_{j-1} + phi_j r_j) / m_j and a_0 = 0: tridiagonal in the tensions phi
        rhs = [-(du[i] ** 2 + dv[i] ** 2) - 2 * w * (rx[i] * du[i] + ry[i] * dv[i])
               - 0.5 * w * w * (rx[i] ** 2 + ry[i] ** 2 - l[i] ** 2) for i in range(N)]
        rhs[0] = rhs[0] + g * ry[0]  # gravity: F_j / m_j = -g on every moving point, cancels in the other rows
        diag = [-(rx[i] ** 2 + ry[i] ** 2) * (1 / m[i] + (1 / m[i - 1] if i else 0.0)) for i in range(N)]
        off = [(rx[i] * rx[i + 1] + ry[i] * ry[i + 1]) / m[i] for i in range(N - 1)]  # rows i, i+1
        cp, dp = [None] * N, [None] * N
        for i in range(N):  # Thomas: forward elimination
            den = diag[i] - (off[i - 1] * cp[i - 1] if i else 0.0)
            num = rhs[i] - (off[i - 1] * dp[i - 1] if i else 0.0)
            if quotients:
                cp[i], dp[i] = (off[i] / den if i < N - 1 else None), num / den
            else:
                inv = 1.0 / den
                cp[i], dp[i] = (off[i] * inv if i < N - 1 else None), num * inv
        phi = [None] * N
        for i in reversed(range(N)):  # back substitution
            phi[i] = dp[i] - (cp[i] * phi[i + 1] if i < N - 1 else 0.0)
        fx = [-phi[j - 1] * rx[j - 1] + (phi[j] * rx[j] if j < N else 0.0) for j in range(1, N + 1)]
        fy = [-phi[j - 1] * ry[j - 1] + (phi[j] * ry[j] if j < N else 0.0) for j in range(1, N + 1)]
        zero = jnp.zeros_like(X[0])
        return [zero] + [f / m[j] for j, f in enumerate(fx)], [zero] + [f / m[j] - g for j, f in enumerate(fy)]

    m, l = [m[i] for i in range(N)], [l[i] for i in range(N)]
    return scan_points_state(accel, x, v, T, dt)


def section_pointwise(B=4096, T=200, dt=1e-3):
    chain, s0 = pendulum_batch(B)
    print(f"\n4. point by point: 5-link pendulum, float32, B = {B}, T = {T}, the chain a run-time argument")
    lib = "library, array form (vmap)"
    runs = {lib: array_form(T, dt)}
    for q in (True, False):
        runs[f"point by point, {'quotients' if q else 'reciprocal pivots'}"] = jax.jit(
            lambda c, s, q=q: pointwise_rollout(c.m[1:], c.l, c.g, s.x, s.v, T, dt, quotients=q))
    runs["library, lean form (diffchain._xla.point_major)"] = lean_form(T, dt)
    compare(runs, chain, s0, B, T, lib)


def keep(*vals):
    """The values, each materialised: a product with the identity matrix, which XLA CPU does not fuse."""
    vals = jnp.broadcast_arrays(*vals)
    out = jnp.dot(jnp.eye(len(vals), dtype=vals[0].dtype), jnp.stack(vals))
    return tuple(out[j] for j in range(len(vals)))


def library_step_pointwise(chain, x, v, T, dt, materialise=True):
    """T quanta of the seed's scheme (PD drift correction, delta_eps = 5 dt, no input) of the library's Part I step for
    a batch of chains of point masses, point by point: x, v (B, n, 2); the chain's arrays per point as run-time
    values. The sweeps in their point-by-point form: the quotients u_i = F^e_i / m_i, 1/D_i and
    k_i = m_i (c_i^T u_i + mu_i / D_i) are computed once, and the forward sweep carries only the rod tension,
    phi_i = alpha_i phi_{i-1} + k_i with alpha_i = c_i^T r_{i-1};
    m_i a_i = P_i (F^d_i + F^e_i - r_i phi_i) + m_i a0_i."""
    n, w = chain.n, 1.0 / (5.0 * dt)
    kept = keep if materialise else (lambda *a: a)
    tol = 64 * jnp.finfo(x.dtype).eps
    m = [chain.m[i] for i in range(n)]

    def accel(X, Y, U, V):
        rods = range(n - 1)
        rho, inv_rho, rx, ry = zip(*(kept(*rod_geometry(X[k + 1] - X[k], Y[k + 1] - Y[k])) for k in rods))
        dU, dV = [U[k + 1] - U[k] for k in rods], [V[k + 1] - V[k] for k in rods]
        e = [jnp.where(chain.rod_on[k], rod_rhs(rx[k], ry[k], rho[k], inv_rho[k], dU[k], dV[k], chain.l[k], w), 0.0)
             for k in rods]
        omega = [0.0] + [link_omega_c(rx[k], ry[k], inv_rho[k], dU[k], dV[k]) for k in rods] + [0.0]
        tau = [-chain.k_omega[i] * (omega[i + 1] - omega[i]) for i in range(n)]  # damping (seed §4.3)
        dtau = [(tau[k + 1] - tau[k]) * inv_rho[k] for k in rods]
        tx = [0.0] + [-ry[k] * dtau[k] for k in rods] + [0.0]
        ty = [0.0] + [rx[k] * dtau[k] for k in rods] + [0.0]
        u = [kept(*(f / m[i] for f in point_forces(tx[i + 1] - tx[i], ty[i + 1] - ty[i], U[i], V[i], m[i],
                                                     chain.k_v[i], chain.g, 0.0, 0.0))) for i in range(n)]
        s = [(chain.s[i, 0], chain.s[i, 1]) for i in range(n)]
        sl = chain.slider_mask
        P = [kept(*projector(chain.guided[i], sl[i], *s[i], slider_rhs(*s[i], chain.c[i], X[i], Y[i], U[i], V[i], w),
                             0.0, 0.0)) for i in range(n)]
        e = list(kept(*e)) + [0.0]
        r = list(zip(rx, ry)) + [(0.0, 0.0)]  # the terminal point: r_n = 0, e_n = 0
        A, b, k, alpha = (0.0, 0.0, 0.0), (0.0, 0.0), [None] * n, [None] * n
        for i in reversed(range(n)):
            (x_, y_), (q11, q12, q22, wx, wy), (ux, uy) = r[i], P[i], u[i]
            Prx, Pry = q11 * x_ + q12 * y_, q12 * x_ + q22 * y_
            D = x_ * Prx + y_ * Pry + m[i] * (A[0] * x_ * x_ + 2.0 * A[1] * x_ * y_ + A[2] * y_ * y_)
            ok = D > tol * (x_ * x_ + y_ * y_ + m[i] * (A[0] + A[2]))
            mu = x_ * (wx - b[0]) + y_ * (wy - b[1]) - e[i]
            D = jnp.where(ok, D, 1.0)
            inv_D = jnp.where(ok, 1.0, 0.0) / D
            k_i = jnp.where(ok, m[i] * (Prx * ux + Pry * uy + mu), 0.0) / D
            rx0, ry0 = r[i - 1] if i else (0.0, 0.0)
            cx, cy, alpha_i = Prx * inv_D, Pry * inv_D, (Prx * rx0 + Pry * ry0) * inv_D
            A = ((q11 - cx * Prx) / m[i], (q12 - cx * Pry) / m[i], (q22 - cy * Pry) / m[i])
            b = (q11 * ux + q12 * uy - Prx * k_i / m[i] + wx, q12 * ux + q22 * uy - Pry * k_i / m[i] + wy)
            k[i], alpha[i], *A, b0, b1 = kept(k_i, alpha_i, *A, *b)
            A, b = tuple(A), (b0, b1)
        phi, ax, ay = 0.0, [None] * n, [None] * n
        for i in range(n):
            (x_, y_), (q11, q12, q22, wx, wy) = r[i], P[i]
            rx0, ry0 = r[i - 1] if i else (0.0, 0.0)
            fx, fy = rx0 * phi, ry0 * phi
            phi = kept(alpha[i] * phi + k[i])[0]
            fx, fy = fx + m[i] * u[i][0] - x_ * phi, fy + m[i] * u[i][1] - y_ * phi
            ax[i], ay[i] = (q11 * fx + q12 * fy) / m[i] + wx, (q12 * fx + q22 * fy) / m[i] + wy
        return ax, ay

    return scan_points_state(accel, x, v, T, dt)


def lambda_first_pointwise(chain, x, v, T, dt):
    """:func:`library_step_pointwise` with the rod tensions from the tridiagonal system J M^-1 J^T phi = rhs (the
    lambda-first form of seeds 001-004 for an open chain: the point constraints eliminated by
    a_i = P_i G_i / m_i + a0_i, G_i = F^e_i + r_{i-1} phi_{i-1} - r_i phi_i the force on point i) solved by the Thomas
    algorithm, as section 4's lean step does. Rod k, r_k^T (a_k - a_{k+1}) = e_k, gives
        -(r_k^T P_k r_k / m_k + r_k^T P_{k+1} r_k / m_{k+1}) phi_k + (r_k^T P_k r_{k-1} / m_k) phi_{k-1}
        + (r_k^T P_{k+1} r_{k+1} / m_{k+1}) phi_{k+1} = e_k - r_k^T (P_k u_k + a0_k - P_{k+1} u_{k+1} - a0_{k+1}),
    u_i = F^e_i / m_i; a rod switched off, or a vanishing pivot (the seed's f_i = 0), gives phi_k = 0."""
    n, w = chain.n, 1.0 / (5.0 * dt)
    tol = 64 * jnp.finfo(x.dtype).eps
    m = [chain.m[i] for i in range(n)]

    def accel(X, Y, U, V):
        rods = range(n - 1)
        rho, inv_rho, rx, ry = zip(*(rod_geometry(X[k + 1] - X[k], Y[k + 1] - Y[k]) for k in rods))
        dU, dV = [U[k + 1] - U[k] for k in rods], [V[k + 1] - V[k] for k in rods]
        e = [rod_rhs(rx[k], ry[k], rho[k], inv_rho[k], dU[k], dV[k], chain.l[k], w) for k in rods]
        omega = [0.0] + [link_omega_c(rx[k], ry[k], inv_rho[k], dU[k], dV[k]) for k in rods] + [0.0]
        tau = [-chain.k_omega[i] * (omega[i + 1] - omega[i]) for i in range(n)]  # damping (seed §4.3)
        dtau = [(tau[k + 1] - tau[k]) * inv_rho[k] for k in rods]
        tx = [0.0] + [-ry[k] * dtau[k] for k in rods] + [0.0]
        ty = [0.0] + [rx[k] * dtau[k] for k in rods] + [0.0]
        F = [point_forces(tx[i + 1] - tx[i], ty[i + 1] - ty[i], U[i], V[i], m[i], chain.k_v[i], chain.g, 0.0, 0.0)
             for i in range(n)]
        s = [(chain.s[i, 0], chain.s[i, 1]) for i in range(n)]
        sl = chain.slider_mask
        P = [projector(chain.guided[i], sl[i], *s[i], slider_rhs(*s[i], chain.c[i], X[i], Y[i], U[i], V[i], w),
                       0.0, 0.0) for i in range(n)]
        u = [(F[i][0] / m[i], F[i][1] / m[i]) for i in range(n)]
        ut = [(q11 * ux + q12 * uy + wx, q12 * ux + q22 * uy + wy) for (q11, q12, q22, wx, wy), (ux, uy) in zip(P, u)]

        def rPr(i, k, j):  # r_k^T P_i r_j / m_i
            q11, q12, q22 = P[i][:3]
            return (rx[k] * (q11 * rx[j] + q12 * ry[j]) + ry[k] * (q12 * rx[j] + q22 * ry[j])) / m[i]

        cp, dp = [None] * (n - 1), [None] * (n - 1)
        for k in rods:  # Thomas: forward elimination
            diag = -(rPr(k, k, k) + rPr(k + 1, k, k))
            rhs = e[k] - (rx[k] * (ut[k][0] - ut[k + 1][0]) + ry[k] * (ut[k][1] - ut[k + 1][1]))
            sub = rPr(k, k, k - 1) if k else 0.0
            den = diag - (sub * cp[k - 1] if k else 0.0)
            num = rhs - (sub * dp[k - 1] if k else 0.0)
            ok = chain.rod_on[k] & (-den > tol * (rPr(k, k, k) + rPr(k + 1, k, k) + 1e-30))
            den = jnp.where(ok, den, 1.0)
            sup = rPr(k + 1, k, k + 1) if k < n - 2 else 0.0
            cp[k] = jnp.where(ok, sup, 0.0) / den
            dp[k] = jnp.where(ok, num, 0.0) / den
        phi = [None] * (n - 1)
        for k in reversed(rods):  # back substitution
            phi[k] = dp[k] - (cp[k] * phi[k + 1] if k < n - 2 else 0.0)
        phi = [0.0] + phi + [0.0]  # no rod before the first point or after the last
        r = [(0.0, 0.0)] + list(zip(rx, ry)) + [(0.0, 0.0)]
        Gx = [F[i][0] + r[i][0] * phi[i] - r[i + 1][0] * phi[i + 1] for i in range(n)]
        Gy = [F[i][1] + r[i][1] * phi[i] - r[i + 1][1] * phi[i + 1] for i in range(n)]
        ax = [(P[i][0] * Gx[i] + P[i][1] * Gy[i]) / m[i] + P[i][3] for i in range(n)]
        ay = [(P[i][1] * Gx[i] + P[i][2] * Gy[i]) / m[i] + P[i][4] for i in range(n)]
        return ax, ay

    return scan_points_state(accel, x, v, T, dt)


def section_library_pointwise(B=4096, T=200, dt=1e-3):
    print(f"\n5. the library's step point by point: float32, B = {B}, T = {T}, the chain a run-time argument")
    for n_links in (5, 8):
        chain = dc.pendulum(n_links, mass=1.0, length=1.0)
        chain = jax.tree_util.tree_map(
            lambda a: a.astype(jnp.float32) if jnp.issubdtype(a.dtype, jnp.floating) else a, chain)
        th = jnp.asarray(np.random.default_rng(0).uniform(-np.pi, np.pi, (B, n_links)), jnp.float32)
        s0 = jax.vmap(lambda t: dc.from_joint_angles(chain, t))(th)
        lib = "library, array form (vmap)"
        runs = {lib: array_form(T, dt)}
        for mat in (False, True):
            runs[f"point by point, {'materialised' if mat else 'left to fusion'}"] = jax.jit(
                lambda c, s, mat=mat: library_step_pointwise(c, s.x, s.v, T, dt, materialise=mat))
        runs["lambda-first, Thomas, quotients"] = jax.jit(lambda c, s: lambda_first_pointwise(c, s.x, s.v, T, dt))
        runs["library, lean form (diffchain._xla.point_major)"] = lean_form(T, dt)
        print(f"   {n_links}-link pendulum")
        compare(runs, chain, s0, B, T, lib)


if __name__ == "__main__":
    print(f"jax {jax.__version__}, XLA_FLAGS = {os.environ.get('XLA_FLAGS', '')}\n")
    section_toy()
    section_barrier()
    section_library()
    section_pointwise()
    section_library_pointwise()
