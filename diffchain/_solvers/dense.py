"""The dense solvers of constrained systems (seed 001 §8.5-8.12, seed 002): :class:`KKT`, :class:`RangeSpace`,
:class:`NullSpace` and :class:`Larin`, for every model.

Rank handling (seed 001 §8.10, seed 003): :func:`~diffchain._solvers.rank.pivot_sequence` runs Gaussian elimination
with complete pivoting on the active rows of J (values only) and records the pivots. Rows without a pivot are
*redundant*; every solver uses the independent rows only, so q_dd is unique and its gradient finite; lambda is then
made minimum-norm. On a chain they solve its (M, Q, J, gamma, on) (:func:`~diffchain._constraints.system.system_terms`);
:class:`KKT` solves a chain's saddle-point system directly, without rank decisions, as the reference the recursion is
checked against (a redundant set of a chain's constraints makes that matrix singular: the recursion and the other
dense solvers handle it).
"""
from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._constraints.system import system_terms
from .._state import Control, State
from .._model.model import Model
from .._xla import linalg
from .base import Solution, Solver
from .rank import _info, min_norm_multipliers, pivot_sequence, rank_info


class DenseSolver(Solver):
    """A solver of the whole system at once; ``tol``: the relative pivot below which a row counts as redundant.

    ``factorization``: how its linear systems are factorized (:func:`diffchain._xla.linalg.kernel`):

    * ``"auto"`` (the default): LAPACK (``jax.scipy.linalg``) where a program solves one system, the XLA loops of
      :mod:`diffchain._xla.linalg` where ``vmap`` batches the systems (a ``custom_vmap`` rule; a matrix that is the
      same for the whole batch stays one LAPACK call). One large system is solved at LAPACK's speed (15-50x the
      loops'), and a batched program calls no batched LAPACK kernel: on CPU, jaxlib 0.10's can deadlock each other
      (the module docstring of :mod:`diffchain._xla.linalg`);
    * ``"lapack"``: LAPACK always, its batched kernels under ``vmap`` (on a GPU, cuSOLVER's); on CPU with jaxlib 0.10
      a batched program can then hang;
    * ``"xla"``: the XLA loops always (a ``lax.scan`` over the columns: the same program on every backend).

    The three agree to round-off, and so do their derivatives, which are implicit in every case (the solves'
    ``lax.custom_linear_solve``: forward and reverse mode, under ``vmap`` too). The rank decisions
    (:func:`~diffchain._solvers.rank.pivot_sequence`) and the null-space bases are XLA loops in all three."""
    tol: float = 1e-9
    factorization: str = eqx.field(static=True, default="auto", kw_only=True)

    def __check_init__(self):
        linalg.check_factorization(self.factorization, type(self).__name__)

    def system(self, M: jax.Array, Q: jax.Array, J: jax.Array, gamma: jax.Array, on: jax.Array,
               nominal_rank: int = -1) -> Solution:
        indep, r, _, red, minpiv = rank_info(J, on, tol=self.tol)
        qdd, lam = self.solve(M, Q, J, gamma, on, indep)
        lam = min_norm_multipliers(J, indep, lam, self.factorization)
        return Solution(qdd, lam, info=_info(J, gamma, on, qdd, indep, r, red, minpiv, nominal_rank))

    def solve(self, M: jax.Array, Q: jax.Array, J: jax.Array, gamma: jax.Array, on: jax.Array,
              sel: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(q_dd, lambda) on the independent rows ``sel``."""
        raise NotImplementedError

    def __call__(self, model: Model, state: State, control: Control, stab: ArrayLike | None = None) -> Solution:
        terms = system_terms(model, state, control, stab)
        return _model_solution(model, self.system(*terms, model.nominal_rank))

    def held(self, chain: Model, state: State, control: Control, active: jax.Array, alpha_w: ArrayLike,
             theta_bar: jax.Array | None = None, stab: ArrayLike | None = None) -> Solution:
        terms = system_terms(chain, state, control, stab, active=active, alpha_w=alpha_w, theta_bar=theta_bar)
        return _model_solution(chain, self.system(*terms), held=True)


def _model_solution(model: Model, sol: Solution, held=False):
    """A model's :class:`Solution` from its system's (:func:`~diffchain._constraints.system.system_terms`): its points'
    accelerations (N, 2), the multipliers of Phi's rows (the first rows: a chain's rod tensions) and those of the held
    joints' rows (the last)."""
    n = model.n
    return Solution(sol.a.reshape(n, 2), sol.forces[: model.rows_on.shape[0]], sol.forces[-n:] if held else None,
                    sol.info)


def direct_kkt(M, Q, J, gamma, on, factorization="xla"):
    """``[[M, J^T], [J, 0]] [q_dd; -lambda] = [Q; gamma]`` solved directly (seed 001 eq. 8.36); rows switched off
    keep their place with a unit diagonal, which forces their multiplier to 0. O(n^3), no rank decisions.
    ``factorization``: :class:`DenseSolver`'s (here and below, ``"xla"`` for the callers outside the solvers)."""
    n = M.shape[0]
    K = jnp.block([[M, J.T], [J, jnp.diag(jnp.where(on, 0.0, 1.0).astype(J.dtype))]])
    sol = linalg.solve(K, jnp.concatenate([Q, gamma]), factorization)
    return sol[:n], -sol[n:]


def saddle_point_solve(M, Q, J, gamma, sel, factorization="xla"):
    """Seed 001 method 1 (eq. 8.6/8.36): ``[[M, J_S^T], [J_S, 0]] [q_dd; -lambda] = [Q; gamma_S]``, rows S independent
    (the other rows keep their place with a unit diagonal, forcing their lambda to 0)."""
    Js, n = J * sel[:, None], M.shape[0]
    K = jnp.block([[M, Js.T], [Js, jnp.diag((~sel).astype(M.dtype))]])
    sol = linalg.solve(K, jnp.concatenate([Q, gamma * sel]), factorization)
    return sol[:n], -sol[n:]


def _range_space(k, M, Js, sel, rhs):
    """[q_dd; -lambda] from [Q; g] (rhs (n + m,) or (n + m, p)) by seed 001 §8.8 method 2 with the kernels ``k``
    (:func:`diffchain._xla.linalg.kernel`): M = L L^T, Y = L^-1 J_S^T, z = L^-1 Q, A = Y^T Y (+1 on the diagonal of
    the rows not in S), A lambda = g - Y^T z, q_dd = L^-T (z + Y lambda)."""
    n = M.shape[0]
    R = rhs.reshape(rhs.shape[0], -1)
    L = k.cholesky(M)
    Y = k.solve_lower(L, Js.T)
    z = k.solve_lower(L, R[:n])
    La = k.cholesky(Y.T @ Y + jnp.diag((~sel).astype(M.dtype)))
    lam = k.solve_upper(La.T, k.solve_lower(La, R[n:] - Y.T @ z))
    return jnp.concatenate([k.solve_upper(L.T, z + Y @ lam), -lam]).reshape(rhs.shape)


def range_space_solve(M, Q, J, gamma, sel, factorization="xla"):
    """Seed 001 §8.8 method 2 (lambda first): M = L L^T, Y = L^-1 J^T, z = L^-1 Q, A = Y^T Y, b = gamma - Y^T z,
    A lambda = b (rows S only), then q_dd = L^-T (z + Y lambda) (:func:`_range_space`). It solves the symmetric
    ``[[M, J_S^T], [J_S, -D]] [q_dd; -lambda] = [Q; gamma_S]`` (D: 1 on the rows not in S, whose lambda is then 0), so
    its derivatives are implicit through that matrix (:func:`diffchain._xla.linalg.implicit_solve`)."""
    Js, n = J * sel[:, None], M.shape[0]
    off = (~sel).astype(M.dtype)

    def matvec(z):
        return jnp.concatenate([M @ z[:n] + Js.T @ z[n:], Js @ z[:n] - off * z[n:]])

    ops = tuple(jax.lax.stop_gradient(a) for a in (M, Js)) + (sel,)
    sol = linalg.implicit_solve(matvec, jnp.concatenate([Q, gamma * sel]), _range_space, ops,
                                factorization=factorization)
    return sol[:n], -sol[n:]


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


def reduced_solve(M, Q, G, g, free, factorization="xla"):
    """G^T M G y_dd = G^T (Q - M g), q_dd = G y_dd + g (seed 001 eqs. 8.45–8.46; seed 003 D^T M D u_dd = ...)."""
    Mr = G.T @ M @ G + jnp.diag((~free).astype(M.dtype))
    ydd = linalg.solve(Mr, G.T @ (Q - M @ g), factorization)
    return G @ ydd + g


def constraint_multipliers(M, Q, J, sel, qdd, factorization="xla"):
    """lambda on the independent rows from J_S^T lambda = M q_dd - Q."""
    Js = J * sel[:, None]
    return linalg.solve(Js @ Js.T + jnp.diag((~sel).astype(M.dtype)), Js @ (M @ qdd - Q), factorization)


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


class KKT(DenseSolver):
    """Seed 001 §8.5 method 1: the saddle-point system. On a chain it is solved directly (:func:`direct_kkt`: a
    chain's forward dynamics, seed 001 eq. 8.36 with the rows of seed 000); on any other system with the
    independent rows only. The multiplier of a held joint's row is the joint's torque (seed §4.2).
    ``tol``, ``factorization`` (``"auto"``, ``"lapack"``, ``"xla"``): :class:`DenseSolver`."""

    def solve(self, M: jax.Array, Q: jax.Array, J: jax.Array, gamma: jax.Array, on: jax.Array,
              sel: jax.Array) -> tuple[jax.Array, jax.Array]:
        return saddle_point_solve(M, Q, J, gamma, sel, self.factorization)

    def __call__(self, model: Model, state: State, control: Control, stab: ArrayLike | None = None) -> Solution:
        if not model.serial:
            return super().__call__(model, state, control, stab)
        terms = system_terms(model, state, control, stab)
        return _model_solution(model, Solution(*direct_kkt(*terms, self.factorization)))

    def held(self, chain: Model, state: State, control: Control, active: jax.Array, alpha_w: ArrayLike,
             theta_bar: jax.Array | None = None, stab: ArrayLike | None = None) -> Solution:
        terms = system_terms(chain, state, control, stab, active=active, alpha_w=alpha_w, theta_bar=theta_bar)
        return _model_solution(chain, Solution(*direct_kkt(*terms, self.factorization)), held=True)


class RangeSpace(DenseSolver):
    """Seed 001 §8.8 method 2 (lambda first, Cholesky of M).
    ``tol``, ``factorization`` (``"auto"``, ``"lapack"``, ``"xla"``): :class:`DenseSolver`."""

    def solve(self, M: jax.Array, Q: jax.Array, J: jax.Array, gamma: jax.Array, on: jax.Array,
              sel: jax.Array) -> tuple[jax.Array, jax.Array]:
        return range_space_solve(M, Q, J, gamma, sel, self.factorization)


class NullSpace(DenseSolver):
    """Seed 001 §8.7 method 3 / seed 003 coordinate partitioning: G, g by complete pivoting (eq. 8.51).
    ``independent``: optional tuple of coordinate indices the user wants as the independent ones;
    ``tol``, ``factorization`` (``"auto"``, ``"lapack"``, ``"xla"``): :class:`DenseSolver`."""
    independent: tuple | None = eqx.field(static=True, default=None)

    def solve(self, M: jax.Array, Q: jax.Array, J: jax.Array, gamma: jax.Array, on: jax.Array,
              sel: jax.Array) -> tuple[jax.Array, jax.Array]:
        free = None
        if self.independent is not None:
            free = jnp.zeros((J.shape[1],), bool).at[jnp.asarray(self.independent)].set(True)
        G, g, fr = null_space_basis(J, gamma, on, free, self.tol)
        qdd = reduced_solve(M, Q, G, g, fr, self.factorization)
        return qdd, constraint_multipliers(M, Q, J, sel, qdd, self.factorization)


class Larin(DenseSolver):
    """Seed 002: q_dd = V2 y_dd + g_p with V2 the orthonormal null-space basis of :func:`larin_basis` and g_p the
    minimum-norm particular solution in span B[:, :r]; V2^T M V2 y_dd = V2^T (Q - M g_p). (The seed's convective term
    V2^T M V2_dot q_dot is contained in g_p, since gamma holds -J_dot q_dot.)
    ``tol``, ``factorization`` (``"auto"``, ``"lapack"``, ``"xla"``): :class:`DenseSolver`."""

    def solve(self, M: jax.Array, Q: jax.Array, J: jax.Array, gamma: jax.Array, on: jax.Array,
              sel: jax.Array) -> tuple[jax.Array, jax.Array]:
        B, r = larin_basis(J, on, self.tol)
        n = J.shape[1]
        used = jnp.arange(n) < r
        U, V2 = B * used, B * ~used
        JU = (J * on[:, None]) @ U
        c = linalg.solve(JU.T @ JU + jnp.diag((~used).astype(J.dtype)), JU.T @ (gamma * on), self.factorization)
        qdd = reduced_solve(M, Q, V2, U @ c, ~used, self.factorization)
        return qdd, constraint_multipliers(M, Q, J, sel, qdd, self.factorization)
