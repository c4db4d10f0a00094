"""Batched rollouts of plain point-mass chains, written point by point in the lambda-first form (seeds 001–004).

Under ``vmap``, :func:`diffchain.rollout` of a chain of point masses whose points are free, guided or on a line -- no
joint damping, no drag -- runs this program instead of the ``vmap`` of the one-chain program, with open-loop
controls, none, or a policy (its closed-over values made explicit inputs, so that they may be batched and
differentiated). It is the same
mechanics as the recursion of seed 000, in the form that XLA CPU runs fastest on a batch
(``experiments/xla_cpu_loops.py``, sections 4 and 5):

* the state is carried point-major, (n, B) arrays whose rows are the points: every term is written out point by
  point on rows, and the accelerations are stacked back so that the state is updated in a few large kernels (as
  4n separate (B,) buffers each was one small kernel: 4.6e7 against 7.8e7 copy-steps/s on the pendulum below);
* the rod tensions solve the tridiagonal system J M^-1 J^T psi = rhs by the Thomas algorithm -- one scalar carried
  from rod to rod where the seed's recursion carries A_i and b_i -- eliminated from the terminal end as the seed's
  backward sweep is (§3), with the seed's rule for a vanishing pivot: that rod's tension is 0 (§6.1);
* every value that later rods or points read is a quotient (the Thomas coefficients, the accelerations), which XLA
  CPU computes once instead of in each of its consumers;
* the rod rows are scaled by the rod length rho_k, so that they use the rod vectors d_k = x_{k+1} - x_k themselves
  and not the unit directions r_k = d_k / rho_k: d_k^T (a_k - a_{k+1}) = rho_k e_k (e_k of
  :func:`~diffchain.constraints.rod_terms_c`). The force of rod k on point k+1 is d_k psi_k, psi_k = phi_k / rho_k.

With the point constraints as a_i = P_i a + a0_i (P = I free, 0 guided, I - s s^T on a line; a0 = a^w guided, s beta
on a line: :func:`~diffchain.constraints.projector`), a_i = P_i G_i / m_i + a0_i with
G_i = F^e_i + d_{i-1} psi_{i-1} - d_i psi_i, and rod k's row reads (<k, j>_i = d_k^T P_i d_j / m_i)
    <k, k-1>_k psi_{k-1} - (<k, k>_k + <k, k>_{k+1}) psi_k + <k, k+1>_{k+1} psi_{k+1}
        = rho_k e_k - d_k^T (u_k - u_{k+1}),        u_i = P_i F^e_i / m_i + a0_i.
A rod between two guided points has a zero row, so a vanishing pivot: its tension is 0, as the seed's recursion
gives it. Without sliders P_i / m_i = beta_i I, beta_i = 1/m_i free and 0 guided.

The results are the recursion's to round-off (tests/test_lean.py) -- except near a singular pose (a stretched or folded
run between two guided points), where any two exact solvers drift apart and this one drifts further than the KKT form
(a whipping 9-point chain, 700 m/s after 40 steps: 4e-7 m from the recursion, the KKT form 2e-8 m; the Thomas
algorithm does not pivot). Measured on the 5-link pendulum (float32, 4096 copies, one core, the chain a ``jit``
argument): 6.5x the ``vmap`` of the array form (4-6.6x from 2 to 15 links, 256 or 4096 copies;
``experiments/bench.py``: 113-129x MJX). Derivatives of a rollout are the array form's
(:func:`diffchain.batching.batch_form`); a chain with damping or drag takes the array form, and the slider terms are
compiled in only where a chain has a slider (a ``lax.switch`` on the chains' values, :func:`lean_kind`: the choice is
made at run time, for the whole batch).
"""
from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from .constraints import projector, slider_rhs
from .model import Chain, Control, State

LEAN_MAX = 16  # vmap-ed rollouts of chains up to this many points may take the lean form


class Points(eqx.Module):
    """A 2-vector per point as two point-major arrays X, Y (n, B), with + and scalar *: what the integrators need of
    positions, velocities and accelerations."""

    X: jax.Array
    Y: jax.Array

    def __add__(self, other):
        return jax.tree.map(jnp.add, self, other)

    def __mul__(self, c):
        return jax.tree.map(lambda a: c * a, self)

    __rmul__ = __mul__

    def stacked(self):
        """The (B, n, 2) array of the points."""
        return jnp.stack([self.X.T, self.Y.T], -1)


class PointState(eqx.Module):
    """:class:`~diffchain.model.State` with positions and velocities as :class:`Points`."""

    x: Points
    v: Points
    t: jax.Array


def lean_accelerations(chain: Chain, X, Y, U, V, control, w, sliders=False):
    """Point accelerations (lists a_x, a_y) of a chain without damping or drag, point by point (module docstring):
    positions X, Y and velocities U, V indexed by point (lists, or point-major arrays), ``control`` None (no input) or
    the lists (tau, F_x, F_y, a^w_x, a^w_y) of joint torques, user forces and guided accelerations; w = 1/T of the PD
    drift correction (0: none). Without ``sliders`` the chain must have none (P_i = beta_i m_i I); with them a point
    on a line has P_i = I - s_i s_i^T and a0_i = s_i beta (the slider's PD right-hand side, seed §6.3). The chain's
    arrays may carry a leading batch axis."""
    n = len(X)  # (chain.n counts a batch axis of the chain's arrays)
    rods = range(n - 1)
    pt = lambda a, i: a[..., i]  # noqa: E731  point i of a per-point array, batched or not
    tol = 64 * jnp.finfo(jnp.result_type(X[0])).eps
    m = [pt(chain.m, i) for i in range(n)]
    free = [(~pt(chain.guided, i)).astype(m[i].dtype) for i in range(n)]
    beta = [free[i] / m[i] for i in range(n)]
    dx, dy = [X[k + 1] - X[k] for k in rods], [Y[k + 1] - Y[k] for k in rods]
    du, dv = [U[k + 1] - U[k] for k in rods], [V[k + 1] - V[k] for k in rods]
    sq = [dx[k] * dx[k] + dy[k] * dy[k] for k in rods]
    pos = [sq[k] > 0 for k in rods]
    inv_sq = [pos[k].astype(sq[k].dtype) / jnp.where(pos[k], sq[k], 1.0) for k in rods]  # 1 / rho_k^2 (0 at 0)
    rho = [jnp.where(pos[k], jnp.sqrt(jnp.where(pos[k], sq[k], 1.0)), 0.0) for k in rods]
    # rho_k e_k = |dv|^2 - (d.dv)^2 / rho^2 + (rho^2 - rho l) w^2 + 2 w d.dv  (constraints.rod_rhs times rho_k)
    ddv = [dx[k] * du[k] + dy[k] * dv[k] for k in rods]
    E = [du[k] * du[k] + dv[k] * dv[k] - ddv[k] * ddv[k] * inv_sq[k]
         + (sq[k] - rho[k] * pt(chain.l, k)) * w * w + 2.0 * w * ddv[k] for k in rods]
    F = [(0.0, -chain.g * m[i]) for i in range(n)]  # gravity (seed §4.1)
    aw = [(0.0, 0.0)] * n  # a^w at a guided point (the input), 0 elsewhere
    if control is not None:
        tau, Fx, Fy, awx, awy = control
        # joint torques as point forces (seed §4.2): rod k pushes point k by L_k dtau_k and point k+1 by -L_k dtau_k
        dtau = [(tau[k + 1] - tau[k]) * inv_sq[k] for k in rods]
        tx = [0.0] + [-dy[k] * dtau[k] for k in rods] + [0.0]
        ty = [0.0] + [dx[k] * dtau[k] for k in rods] + [0.0]
        F = [(tx[i + 1] - tx[i] + Fx[i], ty[i + 1] - ty[i] + F[i][1] + Fy[i]) for i in range(n)]
        aw = [(jnp.where(pt(chain.guided, i), awx[i], 0.0), jnp.where(pt(chain.guided, i), awy[i], 0.0))
              for i in range(n)]
    if sliders:  # P_i and a0_i of every point (constraints.projector): a0_i = s_i beta_i on a line
        P = []
        for i in range(n):
            s = chain.s[..., i, 0], chain.s[..., i, 1]
            beta_s = slider_rhs(*s, pt(chain.c, i), X[i], Y[i], U[i], V[i], w)
            *P_i, a0x, a0y = projector(pt(chain.guided, i), pt(chain.slider_mask, i), *s, beta_s, *aw[i])
            P.append(P_i)
            aw[i] = (a0x, a0y)

    def project(i, fx, fy, m_i=1.0):  # P_i f (/ m_i)
        if sliders:
            return (P[i][0] * fx + P[i][1] * fy) / m_i, (P[i][1] * fx + P[i][2] * fy) / m_i
        return free[i] * fx / m_i, free[i] * fy / m_i

    def dot(i, k, j):  # d_k^T P_i d_j / m_i
        if sliders:
            px, py = project(i, dx[j], dy[j])
            return (dx[k] * px + dy[k] * py) / m[i]
        return beta[i] * (sq[k] if k == j else dx[k] * dx[j] + dy[k] * dy[j])

    def weighted(i, fx, fy):  # P_i f / m_i (without sliders a product with beta_i: measured faster)
        return project(i, fx, fy, m[i]) if sliders else (beta[i] * fx, beta[i] * fy)

    u = [tuple(p + a for p, a in zip(weighted(i, *F[i]), aw[i])) for i in range(n)]

    c, z = [None] * (n - 1), [None] * (n - 1)
    for k in reversed(rods):  # Thomas, eliminating from the terminal end
        scale = dot(k, k, k) + dot(k + 1, k, k)
        diag = -scale
        sup = dot(k + 1, k, k + 1) if k < n - 2 else 0.0
        rhs = E[k] - (dx[k] * (u[k][0] - u[k + 1][0]) + dy[k] * (u[k][1] - u[k + 1][1]))
        den = diag - (sup * c[k + 1] if k < n - 2 else 0.0)
        num = rhs - (sup * z[k + 1] if k < n - 2 else 0.0)
        ok = -den > tol * scale
        den = jnp.where(ok, den, 1.0)
        sub = dot(k, k, k - 1) if k else 0.0
        c[k] = jnp.where(ok, sub, 0.0) / den
        z[k] = jnp.where(ok, num, 0.0) / den
    psi = [0.0] * (n + 1)  # psi[k + 1] is rod k's; none before the first point or after the last
    for k in rods:
        psi[k + 1] = z[k] - (c[k] * psi[k] if k else 0.0)
    d = [(0.0, 0.0)] + list(zip(dx, dy)) + [(0.0, 0.0)]
    G = [(F[i][0] + d[i][0] * psi[i] - d[i + 1][0] * psi[i + 1], F[i][1] + d[i][1] * psi[i] - d[i + 1][1] * psi[i + 1])
         for i in range(n)]
    a = [project(i, *G[i], m[i]) for i in range(n)]
    return [a[i][0] + aw[i][0] for i in range(n)], [a[i][1] + aw[i][1] for i in range(n)]


def applies(chain: Chain, controls, dt, n_steps, integrator) -> bool:
    """Whether a ``vmap``-ed :func:`diffchain.rollout` may take the lean form, as far as trace time can tell: point
    masses only, at most ``LEAN_MAX`` points, controls open-loop (``n_steps`` None or their length), a policy or None
    (``n_steps`` given), ``dt`` and the integrator known at trace time. The rest is decided at run time
    (:func:`lean_kind`). (Otherwise the array form runs, and reports bad arguments.)"""
    known = not any(isinstance(v, jax.core.Tracer) for v in jax.tree.leaves((dt, integrator)))
    if controls is None or (callable(controls) and not isinstance(controls, Control)):
        steps_ok = n_steps is not None
    else:
        steps_ok = isinstance(controls, Control) and n_steps in (None, controls.tau.shape[0])
    return not chain.has_links and chain.n <= LEAN_MAX and known and steps_ok


def lean_kind(chain: Chain):
    """Which program a batch of chains (``chain``'s arrays may carry a batch axis) takes under ``vmap``: 0 the lean form
    (no slider, damping or drag in any of them), 1 the lean form with sliders, 2 the array form (damping or drag)."""
    friction = jnp.any(chain.k_omega != 0) | jnp.any(chain.k_v != 0)
    return jnp.where(friction, 2, jnp.where(jnp.any(chain.slider_mask), 1, 0))


def lean_rollout(axis_size, in_batched, chain: Chain, state: State, controls, *, dt, n_steps, integrator,
                 policy=None, sliders=False):
    """:func:`diffchain.rollout` of a batch of ``axis_size`` lean chains (:func:`lean_kind`), point by point:
    ``chain``, ``state`` and ``controls`` (a :class:`~diffchain.model.Control` with a time axis, or None) carry a
    leading batch axis where ``in_batched`` (their pytrees of bools) says so, as in a ``custom_vmap`` rule. With a
    ``policy(controls, state) -> Control`` (one chain's), ``controls`` are its explicit arguments instead, and the
    policy acts on each chain's state at the start of every step. Returns (final state, trajectory), batch first, as
    the ``vmap`` of the array form does. ``sliders``: as in :func:`lean_accelerations`."""
    n, (_, b_state, b_controls) = state.x.shape[-2], in_batched
    batch = lambda v, b: v if b else jnp.broadcast_to(v, (axis_size,) + jnp.shape(v))  # noqa: E731
    x, v = batch(state.x, b_state.x), batch(state.v, b_state.v)
    init = PointState(Points(x[..., 0].T, x[..., 1].T), Points(v[..., 0].T, v[..., 1].T), batch(state.t, b_state.t))
    if controls is None or policy is not None:
        xs = None
    else:  # read in blocks of K steps, (B, K, n) where batched, each moved to (K, n, B) in cache: moving the time
        # axis of the whole (B, T, n) first, or reading (B, n) at every step, is slower (strided over all of memory)
        T = controls.tau.shape[-2]
        K = max(k for k in range(1, 17) if T % k == 0)
        xs = jnp.arange(T // K)

        def inputs(c):  # (tau, F_x, F_y, a^w_x, a^w_y) of K steps, (K, n, B) where batched, (K, n) otherwise
            def block(u, b):
                u = jax.lax.dynamic_slice_in_dim(u, c * K, K, axis=int(b))
                return jnp.moveaxis(u, 0, -1) if b else u
            tau, F, a_w = (block(u, b) for u, b in ((controls.tau, b_controls.tau), (controls.F, b_controls.F),
                                                    (controls.a_w, b_controls.a_w)))
            return tau, F[:, :, 0], F[:, :, 1], a_w[:, :, 0], a_w[:, :, 1]
    stab = integrator.stab(dt)
    w = 0.0 if stab is None else 1.0 / stab

    def body(s, u):
        if u is not None:  # per point: (B,) where batched, () otherwise
            u = tuple(tuple(q[i] for i in range(n)) for q in u)
        if policy is not None:  # the policy of each chain, then the inputs by point: (n, B) arrays
            axes = [0 if b else None for b in b_controls]
            c = jax.vmap(policy, in_axes=(axes, 0))(controls, State(s.x.stacked(), s.v.stacked(), s.t))
            u = (c.tau.T, c.F[..., 0].T, c.F[..., 1].T, c.a_w[..., 0].T, c.a_w[..., 1].T)

        def accel(p):
            return Points(*map(jnp.stack, lean_accelerations(chain, p.x.X, p.x.Y, p.v.X, p.v.Y, u, w, sliders)))

        s = integrator(accel, s, dt)
        return s, State(s.x.stacked(), s.v.stacked(), s.t)

    if xs is None:
        final, traj = jax.lax.scan(body, init, xs, length=n_steps)
    else:
        final, traj = jax.lax.scan(lambda s, c: jax.lax.scan(body, s, inputs(c)), init, xs)
        traj = jax.tree.map(lambda q: q.reshape((T,) + q.shape[2:]), traj)
    return State(final.x.stacked(), final.v.stacked(), final.t), jax.tree.map(lambda q: jnp.moveaxis(q, 0, 1), traj)
