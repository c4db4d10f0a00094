"""Small dense factorizations written in XLA operations, and the choice between them and LAPACK for the dense solves.

On CPU, jaxlib 0.10's batched LAPACK kernels split their batch over XLA's intra-op thread pool and block until it is
done (``ParallelBatchMap``); when as many of them run at once as the pool has threads (two independent ones on a 2-core
machine, e.g. a QR's ``orgqr`` and a triangular solve with its R), every thread waits and the program hangs for ever at
0 % CPU. With jaxlib 0.10.2 on a 2-core AMD EPYC, ``jax.jit(jax.vmap(event_rollout))`` over 512 copies x 500 quanta
with the dense KKT solver on LAPACK (``factorization="lapack"``) hangs so, for ``systems.four_bar(stop=1.28)``
against a floor (both pool threads waiting in ``getrf``'s ``ParallelBatchMap``) and for a 4-link free chain against
the ground and joint limits (both in ``trsm``); with these loops the same programs finish (32 s and 76 s after
compiling). Unbatched LAPACK calls do not hang: a compiled loop of 20 000 steps of 16 independent ``getrf``, ``trsm``
and ``potrf`` calls of one matrix each ran in 5 s.

The loops: the same arithmetic (Householder QR, Cholesky, Gauss–Jordan elimination with partial pivoting,
substitution), one ``lax.scan`` over the columns each (reverse-differentiable; unrolled, they compile slower), the same
program on every backend and under ``vmap`` and its derivatives. On one large system they are 15-50x slower than
LAPACK (a 768 x 768 solve: 0.2-0.4 s against 13 ms), a scan iteration per column. The event quantum's projections
(:func:`diffchain._events.constraints._mass_metric_step`) always use them. The dense solvers choose with their
``factorization`` (:func:`kernel`): by default ``"auto"``, LAPACK for one system and the loops for a batch of systems
(a ``jax.custom_batching.custom_vmap`` rule, :func:`_by_batching`). Their solves take derivatives implicitly
(:func:`implicit_solve`), as ``jnp.linalg.solve`` does, which is what lets the rule choose: the solve callbacks of
``lax.custom_linear_solve`` are evaluated and batched but never differentiated. In reverse mode the transposed system is
factorized again (``jnp.linalg.solve`` keeps the forward LU): a gradient costs two factorizations.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.custom_batching
import jax.scipy.linalg
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


def _lu_solve(A, B):
    """X with A X = B by LAPACK's LU with partial pivoting (``getrf``, then two triangular solves)."""
    return jax.scipy.linalg.lu_solve(jax.scipy.linalg.lu_factor(A), B)


class Kernels(NamedTuple):
    """One implementation of the dense kernels: Cholesky, forward and back substitution, a general solve."""
    cholesky: Callable
    solve_lower: Callable
    solve_upper: Callable
    solve: Callable


KERNELS = {
    "xla": Kernels(cholesky, solve_lower, solve_upper, _gauss_jordan),
    "lapack": Kernels(jnp.linalg.cholesky, lambda L, B: jax.scipy.linalg.solve_triangular(L, B, lower=True),
                      lambda U, B: jax.scipy.linalg.solve_triangular(U, B, lower=False), _lu_solve),
}
FACTORIZATIONS = ("auto", "lapack", "xla")


def check_factorization(factorization, who="factorization"):
    """``factorization`` if it is one of :data:`FACTORIZATIONS`, else a ValueError naming ``who``."""
    if not isinstance(factorization, str) or factorization not in FACTORIZATIONS:
        raise ValueError(f"{who}: factorization must be 'auto' (LAPACK for one system, the XLA loops for a batch), "
                         f"'lapack' or 'xla', got {factorization!r}")
    return factorization


def _by_batching(lapack, loops):
    """``f(ops, rhs)``: ``lapack(*ops, rhs)`` for one system, ``loops`` under a ``vmap`` that batches its matrices.

    ``ops`` is a tuple of the system's arrays, ``rhs`` (p,) or (p, k) its right-hand side, and ``f`` is linear in
    ``rhs`` with the shape of ``rhs``. A ``jax.custom_batching.custom_vmap`` rule: where some of ``ops`` are batched,
    ``jax.vmap(loops)`` (no LAPACK call, whatever the nesting of ``vmap``s); where only ``rhs`` is (one system, many
    right-hand sides: ``jacfwd``, ``jacrev``, a ``vmap`` over forces), the batch becomes columns of one unbatched call.
    ``custom_vmap`` has no reverse mode: ``f`` is meant for the solve callbacks of ``lax.custom_linear_solve``, which
    are evaluated and batched, never differentiated (:func:`implicit_solve`)."""

    @jax.custom_batching.custom_vmap
    def f(ops, rhs):
        return lapack(*ops, rhs)

    @f.def_vmap
    def rule(axis_size, in_batched, ops, rhs):
        ops_batched, rhs_batched = in_batched
        if not any(ops_batched):  # one system: the right-hand sides side by side, (p, axis_size * k)
            p = rhs.shape[1]
            out = f(ops, jnp.moveaxis(rhs, 0, 1).reshape(p, -1)).reshape((p, axis_size) + rhs.shape[2:])
            return jnp.moveaxis(out, 1, 0), True
        in_axes = (tuple(0 if b else None for b in ops_batched), 0 if rhs_batched else None)
        return jax.vmap(lambda ops, rhs: loops(*ops, rhs), in_axes)(ops, rhs), True

    return f


def kernel(fn, factorization):
    """``g(ops, rhs) = fn(kernels, *ops, rhs)`` with the kernels ``factorization`` picks (:data:`FACTORIZATIONS`):

    * ``"xla"``: the XLA loops of this module (:data:`KERNELS`), under ``vmap`` too;
    * ``"lapack"``: LAPACK (``jax.scipy.linalg``, ``jnp.linalg``; cuSOLVER on a GPU), under ``vmap`` batched;
    * ``"auto"``: LAPACK for one system, the XLA loops for a batch of systems (:func:`_by_batching`). Not
      differentiable by itself: for the callbacks of :func:`implicit_solve`.

    ``fn`` is linear in ``rhs`` ((p,) or (p, k)) and returns its shape."""
    if check_factorization(factorization) == "auto":
        return _by_batching(lambda *a: fn(KERNELS["lapack"], *a), lambda *a: fn(KERNELS["xla"], *a))
    return lambda ops, rhs: fn(KERNELS[factorization], *ops, rhs)


def implicit_solve(matvec, b, fn, ops, transpose_ops=None, factorization="xla"):
    """x with matvec(x) = b, solved by ``fn(kernels, *ops, b)`` (:func:`kernel`; ``ops`` without gradients:
    ``lax.stop_gradient``), its transpose by ``fn(kernels, *transpose_ops, b)`` (None: the matrix is symmetric).
    Derivatives are implicit (``lax.custom_linear_solve``): dx = A^-1 (db - dA x) forward, the transposed system in
    reverse, through ``matvec`` (the differentiable A) and the same solves."""
    solve_ = kernel(fn, factorization)
    ops = tuple(map(jnp.asarray, ops))
    transpose_solve = None
    if transpose_ops is not None:
        transpose_ops = tuple(map(jnp.asarray, transpose_ops))
        transpose_solve = lambda _, X: solve_(transpose_ops, X)  # noqa: E731
    return jax.lax.custom_linear_solve(matvec, b, lambda _, X: solve_(ops, X), transpose_solve,
                                       symmetric=transpose_ops is None)


def solve(A, B, factorization="xla"):
    """X with A X = B, A (n, n) nonsingular, B (n,) or (n, k): Gauss–Jordan elimination (:func:`_gauss_jordan`) or
    LAPACK's LU, as ``factorization`` says (:func:`kernel`). Derivatives are implicit (:func:`implicit_solve`: the
    transposed system solved the same way), as for ``jnp.linalg.solve``."""
    A_ = jax.lax.stop_gradient(A)
    return implicit_solve(lambda X: A @ X, B, lambda k, A, B: k.solve(A, B), (A_,), (A_.T,), factorization)
