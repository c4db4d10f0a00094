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
  :func:`~diffchain._constraints.chain.rod_terms_c`). The force of rod k on point k+1 is d_k psi_k, psi_k = phi_k /
  rho_k.

With the point constraints as a_i = P_i a + a0_i (P = I free, 0 guided, I - s s^T on a line; a0 = a^w guided, s beta
on a line: :func:`~diffchain._constraints.chain.projector`), a_i = P_i G_i / m_i + a0_i with
G_i = F^e_i + d_{i-1} psi_{i-1} - d_i psi_i, and rod k's row reads (<k, j>_i = d_k^T P_i d_j / m_i)
    <k, k-1>_k psi_{k-1} - (<k, k>_k + <k, k>_{k+1}) psi_k + <k, k+1>_{k+1} psi_{k+1}
        = rho_k e_k - d_k^T (u_k - u_{k+1}),        u_i = P_i F^e_i / m_i + a0_i.
A rod between two guided points has a zero row, so a vanishing pivot: its tension is 0, as the seed's recursion
gives it. Without sliders P_i / m_i = beta_i I, beta_i = 1/m_i free and 0 guided.

The results are the recursion's to round-off (tests/xla/test_lean.py), except near a singular pose (a stretched or
folded run between two guided points), where any two exact solvers drift apart and this one, whose Thomas algorithm does not
pivot, drifts further than the KKT form. The slider terms, and damping and drag, are compiled in only where a chain
has them (a ``lax.switch`` on the chains' values, :func:`lean_kind`: the choice is made at run time, for the whole
batch).

Derivatives (:func:`diffchain._xla.batching.batch_form`): forward mode is the array form's jvp. Reverse mode of a batch
with open-loop inputs, none or a policy, and an integrator of ``ADJOINT_ALPHA`` (SeedQuantum, SemiImplicitEuler,
RK4), is this module's adjoint, :func:`lean_rollout_vjp`: the tensions' solve differentiated implicitly -- its
transposed system is the same tridiagonal one, S being symmetric, so the adjoint multipliers cost one more Thomas
solve with the forward's factors --, the local terms' adjoint written by hand on point-major arrays, a policy's by
its own ``jax.vjp`` at each step, and the steps run backward block by block from recomputed states; it computes only
the cotangents that reverse mode asks for. Otherwise reverse mode is the array form's, ``vmap``-ed. Both give the
same gradients to round-off (tests/xla/test_lean.py).
"""
from __future__ import annotations

from typing import Callable

import equinox as eqx
import jax
import jax.numpy as jnp

from .._constraints.kinds import slider_rhs
from .._model.forces import _speed
from .._model.model import Model
from .._state import Control, State

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
    """:class:`~diffchain.State` with positions and velocities as :class:`Points`."""

    x: Points
    v: Points
    t: jax.Array


def _pivot_tol(dtype):
    """The relative level below which a Thomas pivot counts as vanishing (:func:`_factor`): 64 eps."""
    return float(64 * jnp.finfo(dtype).eps)


def _input_rows(c: Control):
    """A batch's controls (B, n) and (B, n, 2) as the inputs by point (tau, F_x, F_y, a^w_x, a^w_y), (n, B) each."""
    F = c.forces()
    return c.tau.T, F[..., 0].T, F[..., 1].T, c.a_w[..., 0].T, c.a_w[..., 1].T


def lean_accelerations(chain: Model, X, Y, U, V, control, w):
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


def lean_kind(chain: Model):
    """Which program a batch of chains (``chain``'s arrays may carry a batch axis) takes under ``vmap``: 0 the lean form
    point by point (no slider, damping or drag in any of them), 1 on point-major arrays with sliders, 2 with sliders,
    damping and drag (the ``kind`` of :func:`adjoint_terms`)."""
    friction = jnp.any(chain.k_omega != 0) | jnp.any(_drag(chain) != 0)
    return jnp.where(friction, 2, jnp.where(jnp.any(chain.slider_mask), 1, 0))


def _drag(chain: Model):
    """The chain's drag coefficients k_v, zeros for a chain without drag (``k_v`` None)."""
    return jnp.zeros_like(chain.m) if chain.k_v is None else chain.k_v


def _runtime(chain: Model) -> Model:
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


def lean_rollout(axis_size, in_batched, chain: Model, state: State, controls, *, dt, n_steps, integrator,
                 policy=None, kind=0, with_starts=False):
    """:func:`diffchain.rollout` of a batch of ``axis_size`` lean chains (:func:`lean_kind`), point by point:
    ``chain``, ``state`` and ``controls`` (a :class:`~diffchain.Control` with a time axis, or None) carry a
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
                return Points(t.ax, t.ay)
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


# The adjoint of a rollout, for the integrators whose step is
# x' = x + dt v + alpha a, v' = v + dt a (SeedQuantum: alpha = dt^2/2; SemiImplicitEuler: alpha = dt^2) and for RK4
# (four accelerations per step, each with its own adjoint), written by hand on point-major arrays (n, B): rods are
# rows 0..n-2, and a rod value q reaches the points as q_{i-1} - q_i through one zero-padded copy (:func:`_to_points`),
# so that every kernel is a plain loop over all points at once. (JAX's reverse mode of the point-by-point program,
# even with the implicit solve, was no faster than the array form's.)


def _to_points(q):
    """q_{i-1} - q_i at the points i = 0..n-1 of per-rod rows q (n-1, B), zero beyond the ends."""
    p = jnp.pad(q, ((1, 1), (0, 0)))
    return p[:-1] - p[1:]


def _pm(a):
    """A per-point value point-major: the chain's (n,) -> (n, 1), (B, n) -> (n, B)."""
    return a[:, None] if jnp.ndim(a) == 1 else a.T


class AdjointTerms(eqx.Module):
    """The forward quantities of one step that its adjoint reads (:func:`adjoint_terms`), point-major: (n, B) per
    point, (n-1, B) per rod."""

    U: jax.Array          # the velocities, by component
    V: jax.Array
    dx: jax.Array         # the rods d_k = x_{k+1} - x_k and their rates, by component
    dy: jax.Array
    du: jax.Array
    dv: jax.Array
    pos: jax.Array        # rods of nonzero length
    inv_sq: jax.Array     # 1 / |d_k|^2 (0 on a rod of zero length)
    rho: jax.Array        # |d_k|
    ddv: jax.Array        # d_k . dv_k
    dtau: jax.Array       # (tau_{k+1} - tau_k) / |d_k|^2: the torques' point forces per rod
    tau: jax.Array        # the joint torques, damping included
    l: jax.Array          # the rods' lengths, masses, gravity and guided points of the chain
    m: jax.Array
    g: jax.Array
    guided: jax.Array
    off: jax.Array        # the tridiagonal matrix's off-diagonal and its factors (:func:`_factor`)
    factors: tuple
    psi: jax.Array        # the rod tensions
    Gx: jax.Array         # the points' forces with the rods'
    Gy: jax.Array
    ax: jax.Array         # the accelerations
    ay: jax.Array
    weighted: Callable    # (f_x, f_y[, points]) -> P_i f / m_i
    kw: jax.Array | None = None     # with damping and drag (kind 2): their coefficients
    kv: jax.Array | None = None
    sx: jax.Array | None = None     # with sliders (kind >= 1): the lines' normals s, 1 / |s|^2, their
    sy: jax.Array | None = None     # right-hand side beta, the points on a line, and the positions
    inv_q: jax.Array | None = None
    beta: jax.Array | None = None
    on: jax.Array | None = None
    X: jax.Array | None = None
    Y: jax.Array | None = None


def adjoint_terms(chain: Model, X, Y, U, V, u, w, tol, kind=0):
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
    extra = {}
    if kind == 2:  # joint damping -k_omega omega^z and drag -k_v |v| v (seed §4.3), omega^z_i = w_i - w_{i-1}
        kw, kv = _pm(chain.k_omega), _pm(_drag(chain))
        omega_z = -_to_points((dx * dv - dy * du) * inv_sq)  # w_k = (d_k x dv_k) / rho_k^2, the links' rates
        tau = tau - kw * omega_z
        drag = kv * _speed(U, V)
        Fx, Fy = Fx - drag * U, Fy - drag * V
        extra = dict(kw=kw, kv=kv)
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
        extra.update(sx=sx, sy=sy, inv_q=inv_q, beta=beta, on=on, X=X, Y=Y)

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
    return AdjointTerms(U=U, V=V, dx=dx, dy=dy, du=du, dv=dv, pos=pos, inv_sq=inv_sq, rho=rho, ddv=ddv, dtau=dtau,
                        tau=tau, l=l, m=m, g=g, guided=guided, off=off, factors=factors, psi=psi, Gx=Gx, Gy=Gy,
                        ax=ax + a0x, ay=ay + a0y, weighted=weighted, **extra)
