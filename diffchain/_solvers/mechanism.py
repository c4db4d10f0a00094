"""Dynamics of constrained systems M q_dd = Q + J^T lambda, J q_dd = gamma (seed 001 §8.4–8.12, seed 002, seed 004).

The core works on any (M, Q, J, gamma, on) -- a :class:`~diffchain._model.mechanism.Mechanism` in natural coordinates,
a tree in joint coordinates with loop constraints, or a Lagrangian given by its energies (:func:`lagrange_terms`).
Solvers are objects: ``KKT()`` (seed 001 method 1, also accepts ``diffchain.KKT()``), ``RangeSpace()`` (method 2,
lambda first),
``NullSpace()`` (method 3 with G, g by complete pivoting, eq. 8.51), ``Larin()`` (seed 002 orthonormal basis).

Rank handling (seed 001 §8.10, seed 003): :func:`pivot_sequence` runs Gaussian elimination with complete pivoting on
the active rows of J (value only, no gradient) and records the pivots. Rows without a pivot are *redundant*; every
solver uses the independent rows only, so q_dd is unique and its gradient finite; lambda is then made minimum-norm by
:func:`min_norm_multipliers`. ``Info`` reports rank, mobility n - r, the redundant rows, the smallest relative pivot,
the residual |J q_dd - gamma| over all active rows (inconsistent redundant rows show up here) and a status code.
"""
from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl

from . import base as _chain_solvers
from .._model.chain import State, runtime_checks

OK, SINGULAR, INCONSISTENT, NONFINITE = 0, 1, 2, 3
STATUS = {OK: "ok", SINGULAR: "rank dropped below the nominal rank (singular / dead-point / bifurcation configuration)",
          INCONSISTENT: "redundant constraints are inconsistent (e.g. contradicting drivers)",
          NONFINITE: "non-finite numbers in the solution"}


class Info(eqx.Module):
    rank: jax.Array
    mobility: jax.Array
    redundant: jax.Array
    min_pivot: jax.Array
    residual: jax.Array
    status: jax.Array


# ---------------------------------------------------------------------------------------------------------------------
# constraint terms
def constraint_terms(phi, q, qd, t, stab=None):
    """J = dPhi/dq (jacfwd) and gamma = -(J q_d)_q q_d - 2 Phi_qt q_d - Phi_tt (seed 003; seed 004 P2), by nested jvp.

    With ``stab`` = T_stab, Baumgarte's k_stab = -2 alpha Phi_dot - beta^2 Phi, alpha = beta = 1/T_stab (seed 001 eqs.
    8.21–8.22) is added to gamma.
    """
    t = jnp.asarray(t, q.dtype)
    one = jnp.ones_like(t)
    J = jax.jacfwd(phi)(q, t)

    def phi_dot(q_, t_):
        return jax.jvp(phi, (q_, t_), (qd, one))[1]

    pd, pdd = jax.jvp(phi_dot, (q, t), (qd, one))
    gamma = -pdd
    if stab is not None:
        w = 1.0 / stab
        gamma = gamma - 2.0 * w * pd - w**2 * phi(q, t)
    return J, gamma


def lagrange_terms(kinetic, potential, q, qd, Q_extra=None):
    """M(q) = d^2T/dqd^2 and P1 = dT/dq - (d^2T/dqd dq) qd - dV/dq + Q (seed 004 "LEMT"), all by AD."""
    M = jax.hessian(kinetic, argnums=1)(q, qd)
    dTdq = jax.grad(kinetic, argnums=0)(q, qd)
    mixed = jax.jvp(lambda q_: jax.grad(kinetic, argnums=1)(q_, qd), (q,), (qd,))[1]
    Q = dTdq - mixed - jax.grad(potential)(q)
    return M, Q if Q_extra is None else Q + Q_extra


def mechanism_terms(mech, state: State, tau=None, F=None, stab=None):
    """(M, Q, J, gamma, on) of a Mechanism at ``state`` (x = coordinate points (N, 2))."""
    q, qd = state.x.reshape(-1), state.v.reshape(-1)
    J, gamma = constraint_terms(mech.phi, q, qd, state.t, stab)
    Q = mech.applied_forces(q, qd, state.t, tau, F)
    return mech.M, Q, J, gamma, mech.on


# ---------------------------------------------------------------------------------------------------------------------
# rank: complete pivoting
def pivot_sequence(J, on, free_cols=None, tol=1e-9):
    """Gaussian elimination with complete pivoting on the active rows of J (seed 001 §8.7, eq. 8.51; seed 003).

    Returns pivot rows, pivot columns, validity flags (each (min(m, n),)) and |pivots| / max|J|. Elimination stops
    (all further flags False) when the largest remaining entry is below ``tol`` * max|J|: the rank r is the number of
    valid pivots. Columns in ``free_cols`` (bool (n,)) are never pivots: they are the user's independent coordinates
    (then the search is a partial pivoting over the remaining columns). Values only (stop_gradient).
    """
    A = jax.lax.stop_gradient(J) * on[:, None]
    m, n = A.shape
    tol = max(tol, 64 * float(jnp.finfo(A.dtype).eps))     # float32: no rank decisions below round-off
    allowed = jnp.ones((n,), bool) if free_cols is None else ~jnp.asarray(free_cols, bool)
    scale = jnp.maximum(jnp.max(jnp.abs(A), initial=0.0), jnp.finfo(A.dtype).tiny)

    def step(carry, _):
        A, ru, cu = carry
        mask = (~ru)[:, None] & (~cu & allowed)[None, :]
        a = jnp.where(mask, jnp.abs(A), -1.0)
        k = jnp.argmax(a)
        r, c = k // n, k % n
        piv = A[r, c]
        valid = jnp.abs(piv) > tol * scale
        fac = jnp.where(valid, A[:, c] / jnp.where(valid, piv, 1.0), 0.0).at[r].set(0.0)
        A = A - jnp.outer(fac, A[r])
        return (A, ru.at[r].set(ru[r] | valid), cu.at[c].set(cu[c] | valid)), (r, c, valid, jnp.abs(piv) / scale)

    init = (A, jnp.zeros((m,), bool), jnp.zeros((n,), bool))
    _, (rows, cols, valid, piv) = jax.lax.scan(step, init, None, length=min(m, n))
    return rows, cols, valid, piv


def rank_info(J, on, nominal_rank=-1, tol=1e-9):
    """Rank r, mobility n - r, redundant active rows and the smallest relative pivot (seed 001 §8.10)."""
    rows, cols, valid, piv = pivot_sequence(J, on, tol=tol)
    indep = jnp.zeros(on.shape, bool).at[rows].max(valid)
    r = jnp.sum(valid)
    return indep, r, J.shape[1] - r, on & ~indep, jnp.min(jnp.where(valid, piv, jnp.inf), initial=jnp.inf)


def min_norm_multipliers(J, sel, lam):
    """The minimum-norm multipliers with the same constraint force J^T lambda (seed 001 §8.8: with A singular, lambda
    is fixed up to null(J^T) and its z-part does not affect q_dd). ``lam`` is a solution supported on the independent
    rows ``sel``; the minimum-norm one is its projection on range(J) = range(C), C = J J_S^T (J_S J_S^T)^-1."""
    Js = J * sel[:, None]
    D = jnp.diag((~sel).astype(J.dtype))
    C = jnp.linalg.solve(Js @ Js.T + D, Js @ J.T).T          # (m, m): row i of J = sum_k C_ik J_k, k in sel
    return C @ jnp.linalg.solve(C.T @ C + D, C.T @ lam)


def _info(J, gamma, on, qdd, indep, r, red, minpiv, nominal_rank):
    res = jnp.max(jnp.abs((J @ qdd - gamma) * on), initial=0.0)
    scale = (1.0 + jnp.max(jnp.abs(gamma * on), initial=0.0)) * max(1e-6, 1e4 * float(jnp.finfo(J.dtype).eps))
    status = jnp.where(~jnp.all(jnp.isfinite(qdd)), NONFINITE,
                       jnp.where((nominal_rank >= 0) & (r < nominal_rank), SINGULAR,
                                 jnp.where(res > scale, INCONSISTENT, OK)))
    return Info(r, J.shape[1] - r, red, minpiv, res, status)


# ---------------------------------------------------------------------------------------------------------------------
# solvers
class MechSolver(eqx.Module):
    """Turns (M, Q, J, gamma, on) into (q_dd, lambda, Info)."""
    tol: float = 1e-9

    def __call__(self, M, Q, J, gamma, on, nominal_rank=-1):
        indep, r, _, red, minpiv = rank_info(J, on, tol=self.tol)
        qdd, lam = self.solve(M, Q, J, gamma, on, indep)
        lam = min_norm_multipliers(J, indep, lam)
        return qdd, lam, _info(J, gamma, on, qdd, indep, r, red, minpiv, nominal_rank)

    def solve(self, M, Q, J, gamma, on, sel):
        raise NotImplementedError


def kkt_solve(M, Q, J, gamma, sel):
    """Seed 001 method 1 (eq. 8.6/8.36): ``[[M, J_S^T], [J_S, 0]] [q_dd; -lambda] = [Q; gamma_S]``, rows S independent
    (the other rows keep their place with a unit diagonal, forcing their lambda to 0)."""
    Js, n = J * sel[:, None], M.shape[0]
    K = jnp.block([[M, Js.T], [Js, jnp.diag((~sel).astype(M.dtype))]])
    sol = jnp.linalg.solve(K, jnp.concatenate([Q, gamma * sel]))
    return sol[:n], -sol[n:]


def range_space_solve(M, Q, J, gamma, sel):
    """Seed 001 §8.8 method 2 (lambda first): M = L L^T, Y = L^-1 J^T, z = L^-1 Q, A = Y^T Y, b = gamma - Y^T z,
    A lambda = b (rows S only), then q_dd = L^-T (z + Y lambda)."""
    L = jnp.linalg.cholesky(M)
    Y = jsl.solve_triangular(L, (J * sel[:, None]).T, lower=True)
    z = jsl.solve_triangular(L, Q, lower=True)
    A = Y.T @ Y + jnp.diag((~sel).astype(M.dtype))
    lam = jsl.cho_solve(jsl.cho_factor(A, lower=True), (gamma - Y.T @ z) * sel)
    return jsl.solve_triangular(L.T, z + Y @ lam, lower=False), lam


def null_space_basis(J, k, on, free_cols=None, tol=1e-9):
    """G, g with q_dd = G y_dd + g, J G = 0, J g = k, by Gauss–Jordan elimination with complete pivoting (seed 001
    eq. 8.51: G = Q2^T [-K11^-1 K12; 1], g = Q2^T [K11^-1 k1; 0]). Fixed shapes: G is (n, n) with a zero column for
    every dependent coordinate; ``free`` marks the independent ones (chosen by the pivoting, or ``free_cols``)."""
    rows, cols, valid, _ = pivot_sequence(J, on, free_cols, tol)
    n = J.shape[1]
    A = jnp.concatenate([J * on[:, None], (k * on)[:, None]], 1)

    def step(A, p):
        r, c, v = p
        piv_row = A[r] / jnp.where(v, A[r, c], 1.0)
        B = (A - jnp.outer(A[:, c], piv_row)).at[r].set(piv_row)
        return jnp.where(v, B, A), None

    A, _ = jax.lax.scan(step, A, (rows, cols, valid))
    free = ~jnp.zeros((n,), bool).at[cols].max(valid)
    dep = jnp.where(valid[:, None], -A[rows, :n] * free[None, :], 0.0)
    G = jnp.diag(free.astype(J.dtype)).at[cols].add(dep)
    g = jnp.zeros((n,), J.dtype).at[cols].add(jnp.where(valid, A[rows, n], 0.0))
    return G, g, free


def reduced_solve(M, Q, G, g, free):
    """G^T M G y_dd = G^T (Q - M g), q_dd = G y_dd + g (seed 001 eqs. 8.45–8.46; seed 003 D^T M D u_dd = ...)."""
    Mr = G.T @ M @ G + jnp.diag((~free).astype(M.dtype))
    ydd = jnp.linalg.solve(Mr, G.T @ (Q - M @ g))
    return G @ ydd + g


def constraint_multipliers(M, Q, J, sel, qdd):
    """lambda on the independent rows from J_S^T lambda = M q_dd - Q."""
    Js = J * sel[:, None]
    return jnp.linalg.solve(Js @ Js.T + jnp.diag((~sel).astype(M.dtype)), Js @ (M @ qdd - Q))


def larin_basis(J, on, tol=1e-9):
    """Seed 002 (Larin 1993): orthonormal basis of null(J) without an SVD, one constraint row at a time.

    For the unit row v = [gamma0; gamma*] (projected on the current basis, sign chosen so gamma0 >= 0 -- the
    Householder choice; with gamma0 < 0, 1/(1 + gamma0) cancels catastrophically):
        ``H = [[gamma0, -gamma*^T], [gamma*, E - gamma* gamma*^T / (1 + gamma0)]]``
    is orthogonal, its first column is v and the rest is the seed's V2 (eq. 3.2). B <- B H accumulates
    V2 = V21 V22 ... V2m in the trailing columns of B (fixed shapes: B is (n, n), column k is consumed at step k).
    A row with no component left (redundant, or a singular configuration) is skipped instead of dividing by zero.
    Returns B and the number r of consumed columns: null(J) = span B[:, r:], row space = span B[:, :r].
    """
    n = J.shape[1]
    idx = jnp.arange(n)
    scale = jnp.maximum(jnp.max(jnp.abs(J * on[:, None]), initial=0.0), jnp.finfo(J.dtype).tiny)

    def step(carry, row):
        B, k = carry
        Jr, act = row
        d = jnp.where(idx >= k, B.T @ Jr, 0.0)
        nd2 = d @ d
        ok = act & (nd2 > (tol * scale) ** 2)
        v = d / jnp.sqrt(jnp.where(ok, nd2, 1.0))
        v = jnp.where(v[jnp.minimum(k, n - 1)] < 0, -v, v)
        g0 = v[jnp.minimum(k, n - 1)]
        gs = jnp.where(idx > k, v, 0.0)
        ek = (idx == k).astype(J.dtype)
        H = (jnp.eye(n, dtype=J.dtype) + (g0 - 1.0) * jnp.outer(ek, ek) - jnp.outer(ek, gs) + jnp.outer(gs, ek)
             - jnp.outer(gs, gs) / (1.0 + g0))
        return (jnp.where(ok, B @ H, B), k + ok), None

    (B, r), _ = jax.lax.scan(step, (jnp.eye(n, dtype=J.dtype), jnp.asarray(0)), (J, on))
    return B, r


class KKT(MechSolver):
    """Seed 001 §8.5 method 1: the saddle-point system, independent rows only."""

    def solve(self, M, Q, J, gamma, on, sel):
        return kkt_solve(M, Q, J, gamma, sel)


class RangeSpace(MechSolver):
    """Seed 001 §8.8 method 2 (lambda first, Cholesky of M)."""

    def solve(self, M, Q, J, gamma, on, sel):
        return range_space_solve(M, Q, J, gamma, sel)


class NullSpace(MechSolver):
    """Seed 001 §8.7 method 3 / seed 003 coordinate partitioning: G, g by complete pivoting (eq. 8.51).
    ``independent``: optional tuple of coordinate indices the user wants as the independent ones."""
    independent: tuple | None = eqx.field(static=True, default=None)

    def solve(self, M, Q, J, gamma, on, sel):
        free = None
        if self.independent is not None:
            free = jnp.zeros((J.shape[1],), bool).at[jnp.asarray(self.independent)].set(True)
        G, g, fr = null_space_basis(J, gamma, on, free, self.tol)
        qdd = reduced_solve(M, Q, G, g, fr)
        return qdd, constraint_multipliers(M, Q, J, sel, qdd)


class Larin(MechSolver):
    """Seed 002: q_dd = V2 y_dd + g_p with V2 the orthonormal null-space basis of :func:`larin_basis` and g_p the
    minimum-norm particular solution in span B[:, :r]; V2^T M V2 y_dd = V2^T (Q - M g_p). (The seed's convective term
    V2^T M V2_dot q_dot is contained in g_p, since gamma holds -J_dot q_dot.)"""

    def solve(self, M, Q, J, gamma, on, sel):
        B, r = larin_basis(J, on, self.tol)
        n = J.shape[1]
        used = jnp.arange(n) < r
        U, V2 = B * used, B * ~used
        JU = (J * on[:, None]) @ U
        c = jnp.linalg.solve(JU.T @ JU + jnp.diag((~used).astype(J.dtype)), JU.T @ (gamma * on))
        qdd = reduced_solve(M, Q, V2, U @ c, ~used)
        return qdd, constraint_multipliers(M, Q, J, sel, qdd)


def _as_solver(solver, who="mechanism_dynamics"):
    if isinstance(solver, MechSolver):
        return solver
    if isinstance(solver, _chain_solvers.KKT):
        return KKT()
    got = f"the class {solver.__name__}" if isinstance(solver, type) else f"{solver!r} (of type {type(solver).__name__})"
    raise TypeError(f"{who}: solver must be one of the mechanism solvers KKT(), RangeSpace(), NullSpace(), Larin() "
                    f"(an instance), got {got}")


def check_mechanism_state(mech, state, who):
    """TypeError / ValueError at trace time unless ``state`` is a State of the mechanism's coordinate points (N, 2)."""
    if not isinstance(state, State):
        raise TypeError(f"{who}: state must be a diffchain.State, got {type(state).__name__}")
    N = mech.n // 2
    if state.x.shape != (N, 2):
        raise ValueError(f"{who}: the state must hold the mechanism's N = {N} coordinate points, x and v of shape "
                         f"({N}, 2), got x of shape {state.x.shape}")


def mechanism_dynamics(mech, state: State, tau=None, F=None, *, solver=KKT(), stab=None, check=False):
    """Accelerations (N, 2) of the coordinate points, multipliers lambda (rows of mech.phi) and :class:`Info`.

    ``stab``: Baumgarte time constant T_stab (alpha = beta = 1/T_stab), None for none. ``check=True`` raises
    (:func:`diffchain._model.chain.runtime_checks`, also under jit) when the status is not OK instead of returning a
    flagged result.
    """
    solver = _as_solver(solver)
    check_mechanism_state(mech, state, "mechanism_dynamics")
    M, Q, J, gamma, on = mechanism_terms(mech, state, tau, F, stab)
    qdd, lam, info = solver(M, Q, J, gamma, on, mech.nominal_rank)
    if check:
        (qdd,) = runtime_checks((qdd,), [
            (info.status == SINGULAR, f"mechanism_dynamics: {STATUS[SINGULAR]}: the rank and the nominal rank are",
             jnp.stack([info.rank, jnp.asarray(mech.nominal_rank)])),
            (info.status == INCONSISTENT, f"mechanism_dynamics: {STATUS[INCONSISTENT]}: the residual is", info.residual),
            (info.status == NONFINITE, f"mechanism_dynamics: {STATUS[NONFINITE]}", info.status)])
    return qdd.reshape(state.x.shape), lam, info


def reactions(mech, state: State, lam):
    """Joint reactions in physical units: {joint name: forces (P, 2) the joint applies on every point}, from
    F_points = (dPhi_rows/dP)^T lambda_rows (seed 004: the multipliers are the reactions). For a revolute joint or a
    pin (p, q) the force on p is lambda itself (N); for a rod/body distance row it is the tension along the rod."""
    q = state.x.reshape(-1)
    P = mech.points(q)

    def phi_P(P_):
        rows = [mech.dist(P_, state.t), mech.coin(P_, state.t), mech.line(P_, state.t)]
        rows += [d(P_, state.t) for d in mech.drivers]
        return jnp.concatenate([r.astype(q.dtype) for r in rows]) * mech.on

    _, vjp = jax.vjp(phi_P, P)
    out = {}
    for name, (r0, nr) in mech.joint_rows:
        out[name] = vjp(jnp.zeros_like(lam).at[r0:r0 + nr].set(lam[r0:r0 + nr]))[0]
    return out
