"""O(n) dynamics of a closed chain by a banded (tridiagonal) factorisation with ``lax.scan`` (seed 001 §8.13, §8.9).

A chain of n point masses p_1..p_n joined by n+1 rods, its ends pinned to the ground points a (before p_1) and b
(after p_n): a closed loop through the ground (a "rope bridge", a ladder-like chain). Rod k joins p_{k-1} and p_k
(p_0 = a, p_{n+1} = b) with the row (|d_k|^2 - l_k^2) / (2 l_k) of :class:`diffchain._constraints.mechanism.Distance`.
Every spanning-tree method cuts the loop and pays O(n^2) or more; here the range-space matrix of seed 001 method 2,
    A = J M^-1 J^T,   A_kk = |d_k|^2 / l_k^2 (1/m_{k-1} + 1/m_k),   A_k,k+1 = -d_k . d_{k+1} / (l_k l_{k+1} m_k)
(1/m = 0 at the ground), is tridiagonal, so A lambda = gamma - J M^-1 F is solved by the Thomas algorithm -- one
forward elimination and one back substitution, two ``lax.scan``s -- and a = M^-1 (F + J^T lambda): O(n) work and memory,
never a dense Jacobian. Full rank is assumed (a taut chain is not; the dense solvers report that case).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .._model.chain import G, State


def _tridiag_solve(lo, di, up, rhs):
    """Thomas algorithm for lo[k] x[k-1] + di[k] x[k] + up[k] x[k+1] = rhs[k] (lo[0] = up[-1] = 0), two scans."""
    def fwd(carry, z):
        c_prev, d_prev = carry
        l_, d_, u_, r_ = z
        den = d_ - l_ * c_prev
        c, d = u_ / den, (r_ - l_ * d_prev) / den
        return (c, d), (c, d)

    zero = jnp.zeros((), rhs.dtype)
    _, (c, d) = jax.lax.scan(fwd, (zero, zero), (lo, di, up, rhs))

    def bwd(x_next, z):
        c_, d_ = z
        x = d_ - c_ * x_next
        return x, x

    _, x = jax.lax.scan(bwd, zero, (c, d), reverse=True)
    return x


def closed_chain_dynamics(m, l, a, b, state: State, F=None, g=G, stab=None):
    """Accelerations (n, 2) and rod tensions lambda (n+1,) of the closed chain (module docstring) in O(n).

    m (n,) masses, l (n+1,) rod lengths, a, b (2,) ground anchors; state.x, state.v (n, 2); F (n, 2) extra forces;
    ``stab``: Baumgarte time constant as in :func:`diffchain._solvers.mechanism.constraint_terms`.
    """
    x, v = state.x, state.v
    dt = x.dtype
    P = jnp.concatenate([jnp.asarray(a, dt)[None], x, jnp.asarray(b, dt)[None]])
    V = jnp.concatenate([jnp.zeros((1, 2), dt), v, jnp.zeros((1, 2), dt)])
    inv_m = jnp.concatenate([jnp.zeros((1,), dt), 1.0 / m, jnp.zeros((1,), dt)])
    d, dd = P[1:] - P[:-1], V[1:] - V[:-1]                     # (n+1, 2)
    jr = d / l[:, None]                                          # dPhi_k / dp_k (and minus it for p_{k-1})
    gamma = -jnp.sum(dd * dd, -1) / l
    if stab is not None:
        w = 1.0 / stab
        phi = (jnp.sum(d * d, -1) - l**2) / (2 * l)
        gamma = gamma - 2 * w * jnp.sum(jr * dd, -1) - w**2 * phi
    Fe = jnp.stack([jnp.zeros_like(m), -g * m], -1) + (0.0 if F is None else F)
    acc0 = jnp.concatenate([jnp.zeros((1, 2), dt), Fe / m[:, None], jnp.zeros((1, 2), dt)])   # M^-1 F, padded
    rhs = gamma - jnp.sum(jr * (acc0[1:] - acc0[:-1]), -1)
    jj = jnp.sum(jr * jr, -1)
    di = jj * (inv_m[:-1] + inv_m[1:])
    off = -jnp.sum(jr[:-1] * jr[1:], -1) * inv_m[1:-1]          # A_k,k+1, k = 0..n-1
    lam = _tridiag_solve(jnp.concatenate([jnp.zeros((1,), dt), off]), di,
                         jnp.concatenate([off, jnp.zeros((1,), dt)]), rhs)
    force = jr * lam[:, None]                                    # J^T lambda: +force on p_k, -force on p_{k-1}
    Fc = force[:-1] - force[1:]                                  # on p_1..p_n
    return (Fe + Fc) / m[:, None], lam
