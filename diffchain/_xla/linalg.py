"""Small dense factorizations written in XLA operations: no LAPACK custom calls.

On CPU, jaxlib 0.10's batched LAPACK kernels split their batch over XLA's intra-op thread pool and block until it is
done; when as many of them run at once as the pool has threads (two independent ones on a 2-core machine, e.g. a QR's
``orgqr`` and a triangular solve with its R), every thread waits and the program hangs for ever at 0 % CPU (seen with
``vmap`` of an event rollout over 512 copies, of a chain and of a four-bar). The event quantum's projections
(:func:`diffchain._events.dynamics._mass_metric_step`) and the dense solvers therefore use these loops: the same
arithmetic (Householder QR, Cholesky, Gauss–Jordan elimination with partial pivoting, substitution), one ``lax.scan``
over the columns each (reverse-differentiable; unrolled, they compile slower), the same program on every backend and
under ``vmap`` and its derivatives; :func:`solve` takes its derivatives implicitly, as ``jnp.linalg.solve`` does.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def _columns(n, body, init, reverse=False):
    """``body(k, carry)`` for k = 0 .. n-1 (n-1 .. 0 with ``reverse``) as a ``lax.scan`` (a static trip count:
    reverse mode passes through it)."""
    return jax.lax.scan(lambda c, k: (body(k, c), None), init, jnp.arange(n), reverse=reverse)[0]


def safe_sqrt(s):
    """sqrt(s) for s >= 0 whose derivative is 0, not inf, at s = 0 (a row switched off, a zero column)."""
    pos = s > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, s, 1.0)), 0.0)


def row_norms(A):
    """|A_k| of every row of A, with a finite derivative (zero) at a zero row (:func:`safe_sqrt`)."""
    return safe_sqrt(jnp.sum(A * A, -1))


def householder_qr(M):
    """Householder reflectors of M (p, m), p >= m: H_{m-1} ... H_0 M = [R; 0], H_k = I - beta_k v_k v_k^T.

    Returns R (m, m) upper triangular (its diagonal of either sign, as LAPACK's), V (m, p) with the v_k as rows and
    beta (m,); a zero column gets beta = 0 (H = I). Q = H_0 ... H_{m-1}: :func:`apply_q`, :func:`apply_qt`."""
    p, m = M.shape
    rows = jnp.arange(p)

    def step(k, carry):
        M, V, beta = carry
        x = jnp.where(rows >= k, M[:, k], 0.0)
        alpha = -jnp.where(M[k, k] >= 0, 1.0, -1.0) * safe_sqrt(jnp.sum(x * x))
        v = x - alpha * (rows == k)
        vv = jnp.sum(v * v)
        b = jnp.where(vv > 0, 2.0 / jnp.where(vv > 0, vv, 1.0), 0.0)
        return M - b * jnp.outer(v, v @ M), V.at[k].set(v), beta.at[k].set(b)

    M, V, beta = _columns(m, step, (M, jnp.zeros((m, p), M.dtype), jnp.zeros((m,), M.dtype)))
    return jnp.triu(M[:m]), V, beta


def apply_qt(V, beta, b):
    """Q^T b = H_{m-1} ... H_0 b for the reflectors of :func:`householder_qr` (b: (p,))."""
    return _columns(V.shape[0], lambda k, b: b - beta[k] * V[k] * (V[k] @ b), b)


def apply_q(V, beta, b):
    """Q b = H_0 ... H_{m-1} b for the reflectors of :func:`householder_qr` (b: (p,))."""
    return _columns(V.shape[0], lambda k, b: b - beta[k] * V[k] * (V[k] @ b), b, reverse=True)


def cholesky(A):
    """The lower triangular L with L L^T = A for a symmetric positive definite A (n, n) (column by column)."""
    n = A.shape[0]
    rows = jnp.arange(n)

    def step(j, L):
        col = jnp.where(rows >= j, A[:, j] - L @ L[j], 0.0)
        return L.at[:, j].set(col / jnp.sqrt(col[j]))

    return _columns(n, step, jnp.zeros_like(A))


def solve_lower(L, B):
    """X with L X = B, L (n, n) lower triangular, B (n,) or (n, k), by forward substitution; a zero pivot gives a zero
    row of X."""
    n = L.shape[0]

    def step(i, X):
        d = L[i, i]
        xi = (B[i] - L[i] @ X) / jnp.where(d != 0, d, 1.0)
        return X.at[i].set(jnp.where(d != 0, xi, 0.0))

    return _columns(n, step, jnp.zeros_like(B))


def solve_upper(U, B):
    """X with U X = B, U (n, n) upper triangular, B (n,) or (n, k), by back substitution; a zero pivot gives a zero row
    of X."""
    n = U.shape[0]

    def step(i, X):
        d = U[i, i]
        xi = (B[i] - U[i] @ X) / jnp.where(d != 0, d, 1.0)
        return X.at[i].set(jnp.where(d != 0, xi, 0.0))

    return _columns(n, step, jnp.zeros_like(B), reverse=True)


def _gauss_jordan(A, B):
    """X with A X = B, A (n, n), B (n,) or (n, k), by Gauss–Jordan elimination with partial pivoting on [A | B]: one
    ``lax.scan`` over the columns. A zero pivot is kept: X is then not finite, as LAPACK's solve gives."""
    n = A.shape[0]
    rows = jnp.arange(n)
    M = jnp.concatenate([A, B.reshape(n, -1)], 1)

    def step(k, M):
        p = jnp.argmax(jnp.where(rows >= k, jnp.abs(M[:, k]), -1.0))
        M = M.at[k].set(M[p]).at[p].set(M[k])
        pivot_row = M[k] / M[k, k]
        return (M - jnp.outer(M[:, k], pivot_row)).at[k].set(pivot_row)

    return _columns(n, step, M)[:, n:].reshape(B.shape)


def solve(A, B):
    """X with A X = B, A (n, n) nonsingular, B (n,) or (n, k) (:func:`_gauss_jordan`). Derivatives are implicit
    (``lax.custom_linear_solve``: the transposed system solved the same way), as for ``jnp.linalg.solve``."""
    A_ = jax.lax.stop_gradient(A)
    return jax.lax.custom_linear_solve(lambda X: A @ X, B, lambda _, X: _gauss_jordan(A_, X),
                                       lambda _, X: _gauss_jordan(A_.T, X))
