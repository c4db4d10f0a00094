"""Batched rollouts of point-mass chains, point-major in the lambda-first form (seeds 001–004): the backend
:class:`PointMajor`, chosen explicitly with ``rollout(..., backend=PointMajor())``.

Under ``vmap`` such a rollout of chains of point masses (free, guided or on a line, with or without joint damping and
drag) runs this program instead of the ``vmap`` of the one-chain program, with open-loop controls, none, or a policy
(its closed-over values made explicit inputs, so that they may be batched and differentiated). It is the mechanics of
the seed-000 recursion in the form that XLA runs fastest on a batch:

* the state is carried point-major, (n, B) arrays whose rows are the points: every term is written out point by
  point on rows, and the accelerations are stacked back so that the state is updated in a few large kernels;
* the rod tensions solve the tridiagonal system J M^-1 J^T psi = rhs by the Thomas algorithm -- one scalar carried
  from rod to rod where the seed's recursion carries A_i and b_i -- eliminated from the terminal end as the seed's
  backward sweep is (§3), with the seed's rule for a vanishing pivot: that rod's tension is 0 (§6.1);
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

The results are the recursion's to round-off (tests/test_lean.py), except near a singular pose (a stretched or folded
run between two guided points), where any two exact solvers drift apart and this one, whose Thomas algorithm does not
pivot, drifts further than the KKT form. The slider terms, and damping and drag, are compiled in only where a chain
has them (a ``lax.switch`` on the chains' values, :func:`lean_kind`: the choice is made at run time, for the whole
batch).

Derivatives (:func:`diffchain.batching.batch_form`): forward mode is the array form's jvp. Reverse mode of a batch
with open-loop inputs, none or a policy, and an integrator of ``ADJOINT_ALPHA`` (SeedQuantum, SemiImplicitEuler,
RK4), is this module's adjoint, :func:`lean_rollout_vjp`: the tensions' solve differentiated implicitly -- its
transposed system is the same tridiagonal one, S being symmetric, so the adjoint multipliers cost one more Thomas
solve with the forward's factors --, the local terms' adjoint written by hand on point-major arrays, a policy's by
its own ``jax.vjp`` at each step, and the steps run backward block by block from recomputed states; it computes only
the cotangents that reverse mode asks for. Otherwise reverse mode is the array form's, ``vmap``-ed. Both give the
same gradients to round-off (tests/test_lean.py).
"""
from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp

from .batching import _explicit, batch_form
from .constraints import slider_rhs
from .forces import _speed
from .integrate import Backend
from .integrators import RK4, SeedQuantum, SemiImplicitEuler
from .model import Chain, Control, State
from .projection import ChainIntegrator
from .solvers import Recursive

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


def _pivot_tol(dtype):
    """The relative level below which a Thomas pivot counts as vanishing (:func:`_factor`): 64 eps."""
    return float(64 * jnp.finfo(dtype).eps)


def _input_rows(c: Control):
    """A batch's controls (B, n) and (B, n, 2) as the inputs by point (tau, F_x, F_y, a^w_x, a^w_y), (n, B) each."""
    return c.tau.T, c.F[..., 0].T, c.F[..., 1].T, c.a_w[..., 0].T, c.a_w[..., 1].T


def lean_accelerations(chain: Chain, X, Y, U, V, control, w):
    """Point accelerations (lists a_x, a_y) of a chain without sliders, damping or drag, point by point (module
    docstring): positions X, Y and velocities U, V indexed by point (lists, or point-major arrays), ``control`` None
    (no input) or the lists (tau, F_x, F_y, a^w_x, a^w_y) of joint torques, user forces and guided accelerations;
    w = 1/T of the PD drift correction (0: none). P_i = beta_i m_i I, beta_i = 1/m_i free and 0 guided. The chain's
    arrays may carry a leading batch axis. (With sliders, :func:`adjoint_terms` on point-major arrays is faster.)"""
    n = len(X)  # (chain.n counts a batch axis of the chain's arrays)
    rods = range(n - 1)
    pt = lambda a, i: a[..., i]  # noqa: E731  point i of a per-point array, batched or not
    tol = _pivot_tol(jnp.result_type(X[0]))
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

    def dot(i, k, j):  # d_k^T P_i d_j / m_i
        return beta[i] * (sq[k] if k == j else dx[k] * dx[j] + dy[k] * dy[j])

    u = [(beta[i] * F[i][0] + aw[i][0], beta[i] * F[i][1] + aw[i][1]) for i in range(n)]  # P_i F_i / m_i + a0_i

    diag = [-(dot(k, k, k) + dot(k + 1, k, k)) for k in rods]
    off = [dot(k + 1, k, k + 1) for k in rods[:-1]]  # = dot(k + 1, k + 1, k): S is symmetric
    rhs = [E[k] - (dx[k] * (u[k][0] - u[k + 1][0]) + dy[k] * (u[k][1] - u[k + 1][1])) for k in rods]
    psi = [0.0] + _solve(_factor(diag, off, tol), off, rhs) + [0.0]  # psi[k + 1] is rod k's
    d = [(0.0, 0.0)] + list(zip(dx, dy)) + [(0.0, 0.0)]
    G = [(F[i][0] + d[i][0] * psi[i] - d[i + 1][0] * psi[i + 1], F[i][1] + d[i][1] * psi[i] - d[i + 1][1] * psi[i + 1])
         for i in range(n)]
    return ([free[i] * G[i][0] / m[i] + aw[i][0] for i in range(n)],
            [free[i] * G[i][1] / m[i] + aw[i][1] for i in range(n)])


def _factor(diag, off, tol):
    """The Thomas algorithm's elimination of the rods' system (diagonal ``diag``, symmetric off-diagonal ``off``) from
    the terminal end, as the seed's backward sweep (§3), with its rule for a vanishing pivot: that rod's tension is 0
    (§6.1). Returns the multipliers c_k, the pivots (1 where one vanishes) and where they do not vanish."""
    m = len(diag)
    c, den, ok = [None] * m, [None] * m, [None] * m
    for k in reversed(range(m)):
        d = diag[k] - (off[k] * c[k + 1] if k < m - 1 else 0.0)
        ok[k] = -d > -tol * diag[k]
        den[k] = jnp.where(ok[k], d, 1.0)
        c[k] = jnp.where(ok[k], off[k - 1], 0.0) / den[k] if k else 0.0  # a quotient: computed once (docstring)
    return c, den, ok


def _solve(factors, off, rhs):
    """The solution (a list by rod) of the system factored by :func:`_factor` for the right-hand side ``rhs``."""
    c, den, ok = factors
    m = len(rhs)
    z = [None] * m
    for k in reversed(range(m)):
        z[k] = jnp.where(ok[k], rhs[k] - (off[k] * z[k + 1] if k < m - 1 else 0.0), 0.0) / den[k]
    x = [None] * m
    for k in range(m):
        x[k] = z[k] - (c[k] * x[k - 1] if k else 0.0)
    return x


def lean_kind(chain: Chain):
    """Which program a batch of chains (``chain``'s arrays may carry a batch axis) takes under ``vmap``: 0 the lean form
    point by point (no slider, damping or drag in any of them), 1 on point-major arrays with sliders, 2 with sliders,
    damping and drag (the ``kind`` of :func:`adjoint_terms`)."""
    friction = jnp.any(chain.k_omega != 0) | jnp.any(chain.k_v != 0)
    return jnp.where(friction, 2, jnp.where(jnp.any(chain.slider_mask), 1, 0))


def _runtime(chain: Chain) -> Chain:
    """``chain`` with its arrays as run-time values (an ``optimization_barrier``): a chain closed over by the caller's
    ``jit`` is a constant, and XLA folding its masses and lengths into the step's kernels made them slower."""
    arrays, rest = eqx.partition(chain, eqx.is_array)
    return eqx.combine(jax.lax.optimization_barrier(arrays), rest)


def _block(T):
    """The steps read at a time from batch-first sequences of T steps: the largest divisor of T up to 16."""
    return max(k for k in range(1, 17) if T % k == 0)


def _time_block(u, batched, c, K):
    """Steps cK .. cK+K-1 of a sequence, time first: (B, T, ...) -> (K, ..., B) where batched, (T, ...) -> (K, ...)."""
    u = jax.lax.dynamic_slice_in_dim(u, c * K, K, axis=int(batched))
    return jnp.moveaxis(u, 0, -1) if batched else u


def _input_block(controls, b_controls, c, K):
    """(tau, F_x, F_y, a^w_x, a^w_y) of steps cK .. cK+K-1: (K, n, B) where batched, (K, n) otherwise."""
    tau, F, a_w = (_time_block(u, b, c, K) for u, b in ((controls.tau, b_controls.tau), (controls.F, b_controls.F),
                                                         (controls.a_w, b_controls.a_w)))
    return tau, F[:, :, 0], F[:, :, 1], a_w[:, :, 0], a_w[:, :, 1]


def lean_rollout(axis_size, in_batched, chain: Chain, state: State, controls, *, dt, n_steps, integrator,
                 policy=None, kind=0, with_starts=False):
    """:func:`diffchain.rollout` of a batch of ``axis_size`` lean chains (:func:`lean_kind`), point by point:
    ``chain``, ``state`` and ``controls`` (a :class:`~diffchain.model.Control` with a time axis, or None) carry a
    leading batch axis where ``in_batched`` (their pytrees of bools) says so, as in a ``custom_vmap`` rule. With a
    ``policy(controls, state) -> Control`` (one chain's), ``controls`` are its explicit arguments instead, and the
    policy acts on each chain's state at the start of every step. Returns (final state, trajectory), batch first, as
    the ``vmap`` of the array form does. ``kind``: :func:`lean_kind`'s. ``with_starts``: also the
    positions, velocities and times at the start of each block of K steps (:func:`_block`), (B, T/K, n, 2),
    (B, T/K, n, 2) and (B, T/K), which :func:`lean_rollout_vjp` starts from."""
    n, (_, b_state, b_controls) = state.x.shape[-2], in_batched
    chain = _runtime(chain)
    batch = lambda v, b: v if b else jnp.broadcast_to(v, (axis_size,) + jnp.shape(v))  # noqa: E731
    x, v = batch(state.x, b_state.x), batch(state.v, b_state.v)
    init = PointState(Points(x[..., 0].T, x[..., 1].T), Points(v[..., 0].T, v[..., 1].T), batch(state.t, b_state.t))
    # open-loop inputs are read in blocks of K steps, (B, K, n) where batched, each moved to (K, n, B) in cache:
    # moving the time axis of the whole (B, T, n) first, or reading (B, n) at every step, is slower (strided reads)
    open_loop = controls is not None and policy is None
    T = controls.tau.shape[-2] if open_loop else n_steps
    K = _block(T)
    stab = integrator.stab(dt)
    w = 0.0 if stab is None else 1.0 / stab
    tol = _pivot_tol(init.x.X.dtype)

    def body(s, u):  # u: the inputs by point, (n, B) where batched, (n,) otherwise; None without input
        if policy is not None:  # the policy of each chain
            axes = [0 if b else None for b in b_controls]
            c = jax.vmap(policy, in_axes=(axes, 0))(controls, State(s.x.stacked(), s.v.stacked(), s.t))
            u = _input_rows(c)
        if kind:  # the adjoint's point-major arrays: with sliders faster than point by point
            u = (jnp.zeros((n,), init.x.X.dtype),) * 5 if u is None else u

            def accel(p):
                t = adjoint_terms(chain, p.x.X, p.x.Y, p.v.X, p.v.Y, u, w, tol, kind)
                return Points(t["ax"], t["ay"])
        else:
            u = None if u is None else tuple(tuple(q[i] for i in range(n)) for q in u)  # per point: (B,) or ()

            def accel(p):
                return Points(*map(jnp.stack, lean_accelerations(chain, p.x.X, p.x.Y, p.v.X, p.v.Y, u, w)))

        s = integrator(accel, s, dt)
        return s, State(s.x.stacked(), s.v.stacked(), s.t)

    def block(carry, c):  # K steps, their states written batch first (moving the time axis afterwards is slower)
        s, traj, starts = carry
        if with_starts:
            starts = tuple(jax.lax.dynamic_update_index_in_dim(q, y, c, 1)
                           for q, y in zip(starts, (s.x.stacked(), s.v.stacked(), s.t)))
        s, states = jax.lax.scan(body, s, _input_block(controls, b_controls, c, K) if open_loop else None, length=K)
        traj = jax.tree.map(lambda q, y: jax.lax.dynamic_update_slice_in_dim(q, jnp.moveaxis(y, 0, 1), c * K, 1),
                            traj, states)
        return (s, traj, starts), None

    x = init.x.X
    traj = State(jnp.zeros((axis_size, T, n, 2), x.dtype), jnp.zeros((axis_size, T, n, 2), x.dtype),
                 jnp.zeros((axis_size, T), x.dtype))
    starts = tuple(jnp.zeros((axis_size, T // K) + tail, x.dtype) for tail in ((n, 2), (n, 2), ())) if with_starts \
        else None
    (final, traj, starts), _ = jax.lax.scan(block, (init, traj, starts), jnp.arange(T // K))
    out = State(final.x.stacked(), final.v.stacked(), final.t), traj
    return (out, starts) if with_starts else out


# --------------------------------------------------------------------------------------------------- reverse mode
# The adjoint of a rollout, for the integrators whose step is
# x' = x + dt v + alpha a, v' = v + dt a (SeedQuantum: alpha = dt^2/2; SemiImplicitEuler: alpha = dt^2) and for RK4
# (four accelerations per step, each with its own adjoint), written by hand on point-major arrays (n, B): rods are
# rows 0..n-2, and a rod value q reaches the points as q_{i-1} - q_i through one zero-padded copy (:func:`_to_points`),
# so that every kernel is a plain loop over all points at once. (JAX's reverse mode of the point-by-point program,
# even with the implicit solve, was no faster than the array form's.)

ADJOINT_ALPHA = {SeedQuantum: 0.5, SemiImplicitEuler: 1.0, RK4: None}  # the integrators with an adjoint:
# alpha / dt^2 of the one-acceleration steps
CHAIN_FIELDS = ("m", "l", "g", "k_omega", "k_v", "s", "c")  # the chain's arrays with a cotangent (s, c: sliders)
INPUT_FIELDS = ("tau", "F", "a_w")


def _to_points(q):
    """q_{i-1} - q_i at the points i = 0..n-1 of per-rod rows q (n-1, B), zero beyond the ends."""
    p = jnp.pad(q, ((1, 1), (0, 0)))
    return p[:-1] - p[1:]


def _pm(a):
    """A per-point value point-major: the chain's (n,) -> (n, 1), (B, n) -> (n, B)."""
    return a[:, None] if jnp.ndim(a) == 1 else a.T


def adjoint_terms(chain: Chain, X, Y, U, V, u, w, tol, kind=0):
    """The forward quantities that the adjoint of one step reads, on point-major arrays (n, B): the accelerations of
    :func:`lean_accelerations` with the rod tensions psi and the tridiagonal factors. ``u`` = (tau, F_x, F_y, a^w_x,
    a^w_y), each (n, B), or (n,) where shared. ``kind`` (:func:`lean_kind`) 1: sliders, 2: sliders, damping and
    drag. With sliders, a point on a line has P = I - s s^T / |s|^2 and a0 = s beta / |s|^2 (the same values for a
    unit normal s, and the KKT form's derivatives with respect to s)."""
    tau, Fx, Fy, awx, awy = (c[:, None] if c.ndim == 1 else c for c in u)
    m, l, g, guided = _pm(chain.m), _pm(chain.l), chain.g, _pm(chain.guided)
    dx, dy, du, dv = (q[1:] - q[:-1] for q in (X, Y, U, V))
    sq = dx * dx + dy * dy
    pos = sq > 0
    inv_sq = jnp.where(pos, 1.0 / jnp.where(pos, sq, 1.0), 0.0)
    rho = jnp.where(pos, jnp.sqrt(jnp.where(pos, sq, 1.0)), 0.0)
    ddv = dx * du + dy * dv
    E = du * du + dv * dv - ddv * ddv * inv_sq + (sq - rho * l) * w * w + 2.0 * w * ddv
    t = {}
    if kind == 2:  # joint damping -k_omega omega^z and drag -k_v |v| v (seed §4.3), omega^z_i = w_i - w_{i-1}
        kw, kv = _pm(chain.k_omega), _pm(chain.k_v)
        omega_z = -_to_points((dx * dv - dy * du) * inv_sq)  # w_k = (d_k x dv_k) / rho_k^2, the links' rates
        tau = tau - kw * omega_z
        drag = kv * _speed(U, V)
        Fx, Fy = Fx - drag * U, Fy - drag * V
        t = dict(kw=kw, kv=kv)
    dtau = (tau[1:] - tau[:-1]) * inv_sq
    Fx = Fx - _to_points(-dy * dtau)
    Fy = Fy - _to_points(dx * dtau) - (g[None] if jnp.ndim(g) else g) * m
    a0x, a0y = jnp.where(guided, awx, 0.0), jnp.where(guided, awy, 0.0)
    if kind:
        on = _pm(chain.slider_mask) & ~guided
        sx, sy, c = _pm(chain.s[..., 0]), _pm(chain.s[..., 1]), _pm(chain.c)
        inv_q = jnp.where(on, 1.0 / jnp.where(on, sx * sx + sy * sy, 1.0), 0.0)  # 1 / |s|^2 on a line, else 0
        beta = slider_rhs(sx, sy, c, X, Y, U, V, w)
        free = (~guided).astype(m.dtype)
        P = (free - sx * sx * inv_q, -sx * sy * inv_q, free - sy * sy * inv_q)
        a0x, a0y = a0x + sx * beta * inv_q, a0y + sy * beta * inv_q
        t.update(sx=sx, sy=sy, inv_q=inv_q, beta=beta, on=on, X=X, Y=Y)

        def weighted(fx, fy, i=slice(None)):  # P_i f / m_i at the points i
            return ((P[0][i] * fx + P[1][i] * fy) / m[i], (P[1][i] * fx + P[2][i] * fy) / m[i])
    else:
        P = (~guided).astype(m.dtype)
        Q = P / m

        def weighted(fx, fy, i=slice(None)):
            return Q[i] * fx, Q[i] * fy
    # S: diagonal -(d_k^T P_k d_k / m_k + d_k^T P_{k+1} d_k / m_{k+1}), off-diagonal d_k^T P_{k+1} d_{k+1} / m_{k+1}
    below, above = weighted(dx, dy, slice(None, -1)), weighted(dx, dy, slice(1, None))
    diag = -(dx * (below[0] + above[0]) + dy * (below[1] + above[1]))
    off = dx[:-1] * below[0][1:] + dy[:-1] * below[1][1:]
    factors = _factor(list(diag), list(off), tol)
    ux, uy = weighted(Fx, Fy)
    ux, uy = ux + a0x, uy + a0y
    psi = jnp.stack(_solve(factors, list(off), list(E - (dx * (ux[:-1] - ux[1:]) + dy * (uy[:-1] - uy[1:])))))
    Gx, Gy = Fx + _to_points(dx * psi), Fy + _to_points(dy * psi)
    ax, ay = weighted(Gx, Gy)
    return dict(t, U=U, V=V, dx=dx, dy=dy, du=du, dv=dv, pos=pos, inv_sq=inv_sq, rho=rho, ddv=ddv, dtau=dtau,
                tau=tau, l=l, m=m, g=g, guided=guided, off=off, factors=factors, psi=psi, Gx=Gx, Gy=Gy,
                ax=ax + a0x, ay=ay + a0y, weighted=weighted)


def acceleration_adjoint(t, abx, aby, w):
    """The cotangents of (X, Y, U, V), of the inputs (tau, F_x, F_y, a^w_x, a^w_y) and of the chain's (m, l, g,
    k_omega, k_v; with sliders s and c too) for the cotangent abar of the accelerations, from :func:`adjoint_terms`
    ``t`` (implicit differentiation of the tensions' solve). The residuals R_i = P_i G_i / m_i + a0_i - a_i of the
    points and R_k = d_k^T (a_k - a_{k+1}) - E_k of the rods vanish; their transposed system has the same
    tridiagonal matrix (S is symmetric, and a rod with a vanishing pivot drops out alike), so nu is one more solve
    with the forward's factors, mu_i = -abar_i + d_i nu_i - d_{i-1} nu_{i-1}, and the inputs' cotangent is that of
    -(mu . R + nu . R_rods) at fixed (a, psi), through the local terms (E_k, the torques' point forces, gravity;
    P_i and a0_i of a point on a line) by hand."""
    dx, dy, du, dv, weighted = t["dx"], t["dy"], t["du"], t["dv"], t["weighted"]
    Qax, Qay = weighted(abx, aby)
    rhs = -(dx * (Qax[:-1] - Qax[1:]) + dy * (Qay[:-1] - Qay[1:]))
    nu = jnp.stack(_solve(t["factors"], list(t["off"]), list(rhs)))
    mux, muy = -abx - _to_points(dx * nu), -aby - _to_points(dy * nu)
    Fbx, Fby = weighted(mux, muy)
    Fbx, Fby = -Fbx, -Fby  # the applied forces' cotangent, -P mu / m
    fbx, fby = Fbx[:-1] - Fbx[1:], Fby[:-1] - Fby[1:]  # ... of the torques' force on each rod
    dtau_bar = -dy * fbx + dx * fby
    inv_sq, rho, ddv, dtau, psi, w2 = t["inv_sq"], t["rho"], t["ddv"], t["dtau"], t["psi"], w * w
    ddv_bar = nu * (2.0 * w - 2.0 * ddv * inv_sq)  # E_k's cotangent is nu_k
    inv_sq_bar = dtau_bar * (t["tau"][1:] - t["tau"][:-1]) - nu * ddv * ddv
    tau_bar = _to_points(dtau_bar * inv_sq)  # of the torques (the input's, and the damping torques')
    cross = dx * dv - dy * du  # w_k rho_k^2
    if "kw" in t:  # damping: -k_omega omega^z in the torques, omega^z_i = w_i - w_{i-1}, w_k = cross_k / rho_k^2
        oz_bar = -t["kw"] * tau_bar
        w_bar = oz_bar[:-1] - oz_bar[1:]
        inv_sq_bar = inv_sq_bar + w_bar * cross
    half_inv_rho = jnp.where(t["pos"], 0.5 / jnp.where(t["pos"], rho, 1.0), 0.0)
    sq_bar = nu * w2 - inv_sq * inv_sq * inv_sq_bar - nu * t["l"] * w2 * half_inv_rho
    Dx = psi * (Fbx[1:] - Fbx[:-1]) - nu * (t["ax"][:-1] - t["ax"][1:])
    Dy = psi * (Fby[1:] - Fby[:-1]) - nu * (t["ay"][:-1] - t["ay"][1:])
    Dx = Dx + dtau * fby + ddv_bar * du + 2.0 * dx * sq_bar
    Dy = Dy - dtau * fbx + ddv_bar * dv + 2.0 * dy * sq_bar
    Du, Dv = 2.0 * nu * du + ddv_bar * dx, 2.0 * nu * dv + ddv_bar * dy
    if "kw" in t:
        Dx, Dy = Dx + w_bar * dv * inv_sq, Dy - w_bar * du * inv_sq
        Du, Dv = Du - w_bar * dy * inv_sq, Dv + w_bar * dx * inv_sq
    rows = [_to_points(Dx), _to_points(Dy), _to_points(Du), _to_points(Dv)]
    inputs = (tau_bar, Fbx, Fby, jnp.where(t["guided"], -mux, 0.0), jnp.where(t["guided"], -muy, 0.0))
    # the chain: a_i = P_i G_i / m_i (-> mu . P G / m^2 = -Fbar . G / m), gravity -g m_i, rho_k l_k w^2 in E_k;
    # damping and drag (zero on the chains without them, not their derivatives): tau_i - k_omega_i omega^z_i,
    # F_i - k_v_i |v_i| v_i
    m_bar = -(Fbx * t["Gx"] + Fby * t["Gy"]) / t["m"] - t["g"] * Fby
    omega_z = -_to_points(cross * inv_sq)
    U, V = t["U"], t["V"]
    speed = _speed(U, V)
    chain = dict(m=m_bar, l=-nu * rho * w2, g=-t["m"] * Fby, k_omega=-omega_z * tau_bar,
                 k_v=-speed * (U * Fbx + V * Fby))
    if "kv" in t:  # drag: d(|v| v)/dv = |v| I + v v^T / |v| (0 at v = 0)
        vF = (U * Fbx + V * Fby) * jnp.where(speed > 0, 1.0 / jnp.where(speed > 0, speed, 1.0), 0.0)
        rows[2] = rows[2] - t["kv"] * (speed * Fbx + U * vF)
        rows[3] = rows[3] - t["kv"] * (speed * Fby + V * vF)
    if "sx" in t:  # a point on a line: P = I - s s^T / q and a0 = s beta / q (q = |s|^2), beta of (s, c, x, v)
        sx, sy, inv_q, beta, m = t["sx"], t["sy"], t["inv_q"], t["beta"], t["m"]
        mu_s = (mux * sx + muy * sy) * inv_q  # (mu . s) / q; the cotangent of a0 is -mu
        G_s = (t["Gx"] * sx + t["Gy"] * sy) * inv_q
        beta_bar = -mu_s
        # s through P (P_bar = -mu G^T / m), through a0 = s beta / q and through beta = -(s.x - c) w^2 - 2 (s.v) w
        k = 2.0 * mu_s * (beta * inv_q - G_s / m)  # the coefficient of s
        s_bar = [(mu * G_s + G * mu_s) / m - beta * mu * inv_q + k * s_ + beta_bar * (-w2 * x - 2.0 * w * v)
                 for mu, G, s_, x, v in ((mux, t["Gx"], sx, t["X"], U), (muy, t["Gy"], sy, t["Y"], V))]
        on = t["on"]
        chain.update(s=tuple(jnp.where(on, q, 0.0) for q in s_bar), c=jnp.where(on, beta_bar * w2, 0.0))
        rows[0] = rows[0] - jnp.where(on, beta_bar * w2 * sx, 0.0)
        rows[1] = rows[1] - jnp.where(on, beta_bar * w2 * sy, 0.0)
        rows[2] = rows[2] - jnp.where(on, beta_bar * 2.0 * w * sx, 0.0)
        rows[3] = rows[3] - jnp.where(on, beta_bar * 2.0 * w * sy, 0.0)
    return tuple(rows), inputs, chain


def lean_rollout_vjp(axis_size, in_batched, chain: Chain, state: State, controls, cotangents, *, dt, n_steps,
                     integrator, starts, policy=None, kind=0, chain_wanted=CHAIN_FIELDS,
                     inputs_wanted=INPUT_FIELDS):
    """The cotangents of (``chain``, ``state``, ``controls``) of :func:`lean_rollout` (``kind`` as there; an
    integrator of ``ADJOINT_ALPHA``) for the ``cotangents`` of its outputs, ((x, v, t) of the final state, (x, v, t)
    of the trajectory), None where zero. From the states at the start of each block of K steps (:func:`_block`;
    ``starts`` = their (x, v, t), (B, T/K, n, 2), (B, T/K, n, 2), (B, T/K), kept by :func:`lean_rollout`), block by
    block from the last, the K states are recomputed (in cache) and the steps run backward
    (:func:`acceleration_adjoint`): reading a stored trajectory moves more memory than recomputing it.

    ``controls`` are open-loop inputs (a :class:`~diffchain.model.Control` with a time axis) or None, or with a
    ``policy(controls, state) -> Control`` (one chain's, as in :func:`lean_rollout`) the policy's arguments (a list):
    each step then pulls the inputs' cotangent back through the policy (``jax.vjp`` of its ``vmap``) into the
    state's cotangent and those of its arguments.

    Returns each element's cotangents, batch first, also of inputs that the batch shares: the chain's as a dict by
    field (those of ``chain_wanted``, a subset of m, l, g, k_omega, k_v, and with sliders s, c), the state's (x, v,
    t) and the inputs' ((tau, F, a^w) open loop, a list by argument with a policy; None where not in
    ``inputs_wanted``, the field names or argument indices), None without inputs. What is not wanted is not
    computed (a gradient with respect to the open-loop inputs alone: 1/3 less work per reverse step than with
    everything)."""
    n, b_controls, dtype = state.x.shape[-2], in_batched[2], state.x.dtype  # (the state: its start is in starts)
    chain = _runtime(chain)
    rk4 = ADJOINT_ALPHA[type(integrator)] is None
    alpha = None if rk4 else ADJOINT_ALPHA[type(integrator)] * dt * dt
    stab = integrator.stab(dt)
    w = 0.0 if stab is None else 1.0 / stab
    tol = _pivot_tol(state.x.dtype)
    ct_final, ct_traj = cotangents
    T = controls.tau.shape[-2] if controls is not None and policy is None else n_steps
    K = _block(T)
    no_input = controls is None and policy is None
    if no_input:  # zero inputs, shared
        controls = Control(tau=jnp.zeros((T, n), dtype), F=jnp.zeros((T, n, 2), dtype),
                           a_w=jnp.zeros((T, n, 2), dtype))
        b_controls = jax.tree.map(lambda _: False, controls)
    rows = lambda q: (q[..., 0, :], q[..., 1, :])  # noqa: E731  (K, n, 2, B) -> x and y rows (K, n, B)
    pts = lambda X, Y: jnp.stack([X.T, Y.T], -1)  # noqa: E731  rows -> (B, n, 2)
    field = lambda q, name: None if q is None else q["xvt".index(name)]  # noqa: E731  (None: a zero cotangent)
    if policy is not None:  # its arguments for every element; those differentiated, by index
        consts = [c if b else jnp.broadcast_to(c, (axis_size,) + jnp.shape(c)) for c, b in zip(controls, b_controls)]
        diff = [i for i in range(len(consts)) if i in inputs_wanted]

    def policy_inputs(d, X, Y, U, V, t):  # the policy's inputs by point, (n, B) rows; d: the differentiated arguments
        args = list(consts)
        for i, q in zip(diff, d):
            args[i] = q
        c = jax.vmap(policy)(args, State(pts(X, Y), pts(U, V), t))
        return _input_rows(c)

    def inputs(c):  # the open-loop inputs of block c, (K, n, B) where batched; None with a policy
        return None if policy is not None else _input_block(controls, b_controls, c, K)

    def accel(X, Y, U, V, u):
        return adjoint_terms(chain, X, Y, U, V, u, w, tol, kind)

    def rk4_stages(X, Y, U, V, u):  # RK4's four stage states (x and v by components) and their terms
        h = 0.5 * dt
        stages = [((X, Y), (U, V))]
        terms = [accel(X, Y, U, V, u)]
        for c in (h, h, dt):
            Uq, Vq = stages[-1][1]  # the previous stage's velocity
            a = terms[-1]
            stages.append(((X + c * Uq, Y + c * Vq), (U + c * a["ax"], V + c * a["ay"])))
            terms.append(accel(*stages[-1][0], *stages[-1][1], u))
        return stages, terms

    def advance(s, u):  # one step forward, point-major
        X, Y, U, V, t = s
        u = policy_inputs([consts[i] for i in diff], X, Y, U, V, t) if policy is not None else u
        if rk4:
            stages, terms = rk4_stages(X, Y, U, V, u)
            wsum = lambda q: (q[0] + 2.0 * q[1] + 2.0 * q[2] + q[3]) * (dt / 6.0)  # noqa: E731
            return (X + wsum([q[1][0] for q in stages]), Y + wsum([q[1][1] for q in stages]),
                    U + wsum([a["ax"] for a in terms]), V + wsum([a["ay"] for a in terms]), t + dt), s
        terms = accel(X, Y, U, V, u)
        return (X + dt * U + alpha * terms["ax"], Y + dt * V + alpha * terms["ay"], U + dt * terms["ax"],
                V + dt * terms["ay"], t + dt), s

    def step_adjoint(X, Y, U, V, u, bar):  # the step's: (its start's bar, the inputs' bar, the chain's bar)
        xb, yb, ub, vb = bar
        if not rk4:
            (Xa, Ya, Ua, Va), u_bar, ch = acceleration_adjoint(accel(X, Y, U, V, u), alpha * xb + dt * ub,
                                                               alpha * yb + dt * vb, w)
            return (xb + Xa, yb + Ya, dt * xb + ub + Ua, dt * yb + vb + Va), u_bar, ch
        # x' = x + dt/6 (v1 + 2 v2 + 2 v3 + v4), v' = v + dt/6 (a1 + 2 a2 + 2 a3 + a4), stage q+1 at
        # (x + c_q v_q, v + c_q a_q), c = dt/2, dt/2, dt: backward from stage 4
        _, terms = rk4_stages(X, Y, U, V, u)
        weight, c = (1.0, 2.0, 2.0, 1.0), (0.5 * dt, 0.5 * dt, dt)
        start = [xb, yb, ub, vb]  # the cotangent of the step's start, summed over its uses
        vq_bar = [0.0, 0.0]  # of the stage velocity v_q (x and y)
        aq_bar = [0.0, 0.0]  # of the stage acceleration a_q, from the later stage's velocity
        u_bar, ch = None, None
        for q in reversed(range(4)):
            # v_q enters x' (weight w_q dt/6) and stage q+1's position (c_q); a_q: v' and stage q+1's velocity
            vbar = [weight[q] * dt / 6.0 * b + vq for b, vq in zip((xb, yb), vq_bar)]
            abar = [weight[q] * dt / 6.0 * b + aq for b, aq in zip((ub, vb), aq_bar)]
            (Xa, Ya, Ua, Va), uq, chq = acceleration_adjoint(terms[q], abar[0], abar[1], w)
            # stage q's state: x + c_{q-1} v_{q-1}, v + c_{q-1} a_{q-1} (stage 0: the start itself)
            xbar, vbar_state = (Xa, Ya), (Ua + vbar[0], Va + vbar[1])
            start = [start[0] + xbar[0], start[1] + xbar[1], start[2] + vbar_state[0], start[3] + vbar_state[1]]
            if q:
                vq_bar = [c[q - 1] * xbar[0], c[q - 1] * xbar[1]]
                aq_bar = [c[q - 1] * vbar_state[0], c[q - 1] * vbar_state[1]]
            u_bar = uq if u_bar is None else tuple(p + r for p, r in zip(u_bar, uq))
            ch = chq if ch is None else jax.tree.map(jnp.add, ch, chq)
        return tuple(start), u_bar, ch

    def block(carry, c):  # K steps backward, from the state at the block's start (recomputed: checkpointing)
        back, out = carry
        x0, v0, t0 = (jax.lax.dynamic_index_in_dim(q, c, 1, keepdims=False) for q in starts)
        start = (x0[..., 0].T, x0[..., 1].T, v0[..., 0].T, v0[..., 1].T, t0)
        cts = [None if q is None else rows(_time_block(q, True, c, K)) for q in (field(ct_traj, "x"),
                                                                                 field(ct_traj, "v"))]
        u = inputs(c)
        back, u_bar = jax.lax.scan(step, back, (jax.lax.scan(advance, start, u, length=K)[1], u, cts),
                                   reverse=True)
        if policy is None:
            # the inputs' cotangents written batch first block by block: (K, n, B) -> (B, K, n) in cache (moving
            # the time axis of the whole (T/K, K, n, B) afterwards is slower)
            tau, Fx, Fy, awx, awy = (None if q is None else jnp.moveaxis(q, -1, 0) for q in u_bar)
            new = dict(tau=tau, F=None if Fx is None else jnp.stack([Fx, Fy], -1),
                       a_w=None if awx is None else jnp.stack([awx, awy], -1))
            out = {k: jax.lax.dynamic_update_slice_in_dim(q, new[k], c * K, 1) for k, q in out.items()}
        return (back, out), None

    def step(carry, xs):
        (xb, yb, ub, vb), acc, pol = carry
        (X, Y, U, V, t), u, cts = xs
        if cts[0] is not None:
            xb, yb = xb + cts[0][0], yb + cts[0][1]
        if cts[1] is not None:
            ub, vb = ub + cts[1][0], vb + cts[1][1]
        if policy is not None:
            u, pull = jax.vjp(policy_inputs, [consts[i] for i in diff], X, Y, U, V, t)
        bar, u_bar, ch = step_adjoint(X, Y, U, V, u, (xb, yb, ub, vb))
        acc = {k: jax.tree.map(jnp.add, acc[k], ch[k]) for k in acc}
        if policy is None:
            return (bar, acc, pol), tuple(q if want else None for q, want in zip(u_bar, wanted_rows))
        d_bar, *s_bar = pull(u_bar)  # the policy's: into its arguments and the state at the step's start
        bar = tuple(q + p for q, p in zip(bar, s_bar))
        return (bar, acc, (pol[0] + s_bar[4], [q + p for q, p in zip(pol[1], d_bar)])), None

    zeros = lambda k: jnp.zeros((k, axis_size), dtype)  # noqa: E731
    pm = lambda q: (zeros(n),) * 2 if q is None else (q[..., 0].T, q[..., 1].T)  # noqa: E731  (B, n, 2) -> rows
    start = (*pm(field(ct_final, "x")), *pm(field(ct_final, "v")))
    fields = [k for k in CHAIN_FIELDS if k in chain_wanted and (kind or k not in ("s", "c"))]
    acc = {k: (zeros(n), zeros(n)) if k == "s" else zeros(n - 1 if k == "l" else n) for k in fields}
    # the policy's share of the time's and its arguments' cotangents, summed over the steps
    pol = None if policy is None else (jnp.zeros((axis_size,), dtype), [jnp.zeros_like(consts[i]) for i in diff])
    wanted_rows = [k in inputs_wanted for k in ("tau", "F", "F", "a_w", "a_w")]  # u_bar: tau, F_x, F_y, a^w_x, a^w_y
    shape = lambda k: (axis_size, T, n) + (() if k == "tau" else (2,))  # noqa: E731  an input's, batch first
    out = {} if no_input or policy is not None else {k: jnp.zeros(shape(k), dtype) for k in INPUT_FIELDS
                                                     if k in inputs_wanted}
    ((bar, acc, pol), out), _ = jax.lax.scan(block, ((start, acc, pol), out), jnp.arange(T // K), reverse=True)
    t_bar = jnp.zeros((axis_size,), dtype) if policy is None else pol[0]  # t' = t + dt: passed on by each step
    t_bar = t_bar if field(ct_final, "t") is None else t_bar + field(ct_final, "t")
    t_bar = t_bar if field(ct_traj, "t") is None else t_bar + jnp.sum(field(ct_traj, "t"), 1)
    state_bar = (pts(bar[0], bar[1]), pts(bar[2], bar[3]), t_bar)
    if policy is not None:
        args_bar = dict(zip(diff, pol[1]))
        controls_bar = [args_bar.get(i) for i in range(len(consts))]
    else:
        controls_bar = None if no_input else tuple(out.get(k) for k in INPUT_FIELDS)
    chain_bar = {k: jnp.sum(q, 0) if k == "g" else pts(*q) if k == "s" else q.T for k, q in acc.items()}
    return chain_bar, state_bar, controls_bar


# ----------------------------------------------------------------------------------------------- the backend object
class PointMajor(Backend):
    """Batched rollouts in the point-major lambda-first form of this module, chosen explicitly:
    ``rollout(..., backend=PointMajor())``.

    Under ``vmap`` the rollout runs :func:`lean_rollout` for the whole batch, and reverse mode runs
    :func:`lean_rollout_vjp` (with SeedQuantum, SemiImplicitEuler and RK4; other integrators take the ``vmap`` of the
    array form's reverse mode); forward mode is the array form's. The results are the array form's to round-off.
    Outside ``vmap`` the array form runs (its gradient recomputes the forward pass once). It applies to chains of
    point masses (free, guided or on a line; with or without damping and drag) of up to ``LEAN_MAX`` points with the
    :class:`~diffchain.Recursive` solver, a plain integrator (``RK4()``, ``SemiImplicitEuler()``, ``SeedQuantum()``;
    not the default ``Projected()``), open-loop controls, a policy or none, and ``dt`` and the integrator known at
    trace time; otherwise :meth:`rollout` raises, and :meth:`supports` says why.
    """

    def supports(self, chain: Chain, controls, dt, n_steps, solver, integrator) -> str | None:
        """None where this backend applies, otherwise the reason it does not."""
        if not isinstance(solver, Recursive):
            return f"needs the Recursive solver, got {type(solver).__name__}"
        if isinstance(integrator, ChainIntegrator):
            return (f"takes the plain integrators (RK4(), SemiImplicitEuler(), SeedQuantum()), not "
                    f"{type(integrator).__name__}, which projects onto the constraints: pass integrator=RK4()")
        if chain.has_links:
            return "takes chains of point masses only (this chain has rigid links)"
        if chain.n > LEAN_MAX:
            return f"takes chains of up to LEAN_MAX = {LEAN_MAX} points, got {chain.n}"
        if any(isinstance(v, jax.core.Tracer) for v in jax.tree.leaves((dt, integrator))):
            return "needs dt and the integrator known at trace time (not traced values)"
        if isinstance(controls, Control) and n_steps not in (None, controls.tau.shape[0]):
            return f"needs n_steps to match the controls' {controls.tau.shape[0]} steps, got {n_steps}"
        return None

    def rollout(self, run, chain: Chain, state: State, controls, *, dt, n_steps, solver, integrator):
        reason = self.supports(chain, controls, dt, n_steps, solver, integrator)
        if reason is not None:
            raise ValueError(f"rollout: backend=PointMajor() {reason}")
        steps = n_steps if n_steps is not None else controls.tau.shape[0]
        if chain.n == 1 or steps == 0:  # no rod or no step: nothing to batch point by point
            return run(chain, state, controls)
        policy, inputs, run_inputs = None, controls, run
        if callable(controls) and not isinstance(controls, Control):  # its closed-over values as explicit inputs
            policy, inputs = _explicit(controls, state)

            def run_inputs(chain, state, consts):
                return run(chain, state, lambda s: policy(consts, s))

        def batched(axis_size, in_batched, chain, state, inputs, with_starts=False):
            fast = [functools.partial(lean_rollout, axis_size, in_batched, dt=dt, n_steps=n_steps,
                                      integrator=integrator, policy=policy, kind=kind, with_starts=with_starts)
                    for kind in range(3)]
            return jax.lax.switch(lean_kind(chain), fast, chain, state, inputs)

        if type(integrator) not in ADJOINT_ALPHA:  # reverse mode: the array form's, vmap-ed
            return batch_form(run_inputs, batched, run_inputs)(chain, state, inputs)
        K = _block(steps)

        def run_starts(chain, state, inputs):  # with the states at the start of every K steps
            out = run_inputs(chain, state, inputs)
            return out, tuple(jnp.concatenate([q0[None], q[K - 1:-1:K]])
                              for q0, q in ((state.x, out[1].x), (state.v, out[1].v), (state.t, out[1].t)))

        def one_vjp(args, res, cts, wanted):  # one chain: the array form's reverse mode
            outputs, pull = jax.vjp(run_inputs, *args)
            leaves = jax.tree.leaves(outputs)
            cts = jax.tree.unflatten(jax.tree.structure(outputs),
                                     [jnp.zeros_like(o) if c is None else c for c, o in zip(cts, leaves)])
            return [c for c, a in zip(jax.tree.leaves(pull(cts)), jax.tree.leaves(args)) if _inexact(a)]

        def batched_vjp(axis_size, in_batched, args, res, cts, wanted):  # under vmap: lean_rollout_vjp
            leaves = [(path, a, b) for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(args)[0],
                                                           jax.tree.leaves(in_batched)) if _inexact(a)]
            # (group, field): the chain's and the state's fields, the open-loop inputs' or the policy's argument index
            keys = [(("chain", "state", "inputs")[path[0].idx], getattr(path[1], "name", getattr(path[1], "idx", None)))
                    for path, _, _ in leaves]
            want = {k for k, w in zip(keys, wanted) if w}  # the adjoint computes only the cotangents asked for

            def fast(args, res, cts, kind):
                chain_bar, state_bar, inputs_bar = lean_rollout_vjp(
                    axis_size, in_batched, *args, (tuple(cts[:3]), tuple(cts[3:])), dt=dt, n_steps=n_steps,
                    integrator=integrator, starts=res, policy=policy, kind=kind,
                    chain_wanted={k for s, k in want if s == "chain"},
                    inputs_wanted={k for s, k in want if s == "inputs"})
                names = ("tau", "F", "a_w") if policy is None else range(len(inputs_bar))
                named = {**{("chain", k): v for k, v in chain_bar.items()}, **dict(zip(
                    [("state", k) for k in "xvt"] + [("inputs", k) for k in names],
                    state_bar + tuple(inputs_bar or ())))}
                zero = lambda a, b: jnp.zeros(jnp.shape(a) if b else (axis_size,) + jnp.shape(a), a.dtype)  # noqa
                # (the slider lines s, c: zero without sliders)
                return [(named[key] if key in named else zero(a, b)) if key in want else None
                        for key, (_, a, b) in zip(keys, leaves)]

            branches = [functools.partial(fast, kind=kind) for kind in range(3)]
            return jax.lax.switch(lean_kind(args[0]), branches, args, res, cts)

        reverse = (run_starts, functools.partial(batched, with_starts=True), one_vjp, batched_vjp)
        return batch_form(run_inputs, batched, run_inputs, reverse=reverse)(chain, state, inputs)


def _inexact(a):
    return jnp.issubdtype(jnp.result_type(a), jnp.inexact)
