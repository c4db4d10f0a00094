"""Rank information of a constrained system (seed 001 §8.7, §8.10; seed 003): complete pivoting on the active rows
of J, the redundant rows, minimum-norm multipliers and the :class:`Info` record every dense solver returns.
"""
from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from .._xla import linalg

OK, SINGULAR, INCONSISTENT, NONFINITE = 0, 1, 2, 3


STATUS = {OK: "ok", SINGULAR: "rank dropped below the nominal rank (singular / dead-point / bifurcation configuration)",
          INCONSISTENT: "redundant constraints are inconsistent (e.g. contradicting drivers)",
          NONFINITE: "non-finite numbers in the solution"}


class Info(eqx.Module):
    """The rank information of a dense solve (``Solution.info``): ``rank`` r of the active rows of J (complete
    pivoting, seed 001 §8.7), ``mobility`` N - r (the degrees of freedom, with N the coordinates), ``redundant`` (rows,)
    bool, the active rows without a pivot (their multipliers are chosen of minimum norm), ``min_pivot`` the smallest
    pivot relative to max |J| (near 0: near a singular configuration), ``residual`` max |J q_dd - gamma| on the active
    rows, and ``status``: 0 ok, 1 the rank dropped below the model's nominal rank (a singular, dead-point or
    bifurcation configuration), 2 redundant rows that contradict each other, 3 non-finite numbers."""

    rank: jax.Array
    mobility: jax.Array
    redundant: jax.Array
    min_pivot: jax.Array
    residual: jax.Array
    status: jax.Array


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


def min_norm_multipliers(J, sel, lam, factorization="xla"):
    """The minimum-norm multipliers with the same constraint force J^T lambda (seed 001 §8.8: with A singular, lambda
    is fixed up to null(J^T) and its z-part does not affect q_dd). ``lam`` is a solution supported on the independent
    rows ``sel``; the minimum-norm one is its projection on range(J) = range(C), C = J J_S^T (J_S J_S^T)^-1.
    ``factorization``: the dense solver's (:func:`diffchain._xla.linalg.kernel`)."""
    Js = J * sel[:, None]
    D = jnp.diag((~sel).astype(J.dtype))
    C = linalg.solve(Js @ Js.T + D, Js @ J.T, factorization).T   # (m, m): row i of J = sum_k C_ik J_k, k in sel
    return C @ linalg.solve(C.T @ C + D, C.T @ lam, factorization)


def _info(J, gamma, on, qdd, indep, r, red, minpiv, nominal_rank):
    res = jnp.max(jnp.abs((J @ qdd - gamma) * on), initial=0.0)
    scale = (1.0 + jnp.max(jnp.abs(gamma * on), initial=0.0)) * max(1e-6, 1e4 * float(jnp.finfo(J.dtype).eps))
    status = jnp.where(~jnp.all(jnp.isfinite(qdd)), NONFINITE,
                       jnp.where((nominal_rank >= 0) & (r < nominal_rank), SINGULAR,
                                 jnp.where(res > scale, INCONSISTENT, OK)))
    return Info(r, J.shape[1] - r, red, minpiv, res, status)
