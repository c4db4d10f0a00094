"""The sparse method of seed 001 §8.13: a serial chain's range-space matrix is tridiagonal, solved in O(n).

Seed 001 method 2 (§8.8) solves for the multipliers first, (J M^-1 J^T) lambda = gamma - J M^-1 Q, then
q_dd = M^-1 (Q + J^T lambda). On a chain of point masses the point constraints (seed 000 §6: guided points, points on
a line) are eliminated point by point first: with the projector P_i of :func:`~diffchain._constraints.chain.projector`
each point moves as a_i = a0_i + W_i f_i, W_i = P_i / m_i (0 at a guided point, (I - s s^T) / m_i on a line), under
the forces f_i on it. Rod k joins points k and k+1 (unit direction r_k, row r_k^T (a_{k+1} - a_k) = -e_k of
:func:`~diffchain._constraints.chain.rod_terms_c`) and pushes point k+1 with r_k phi_k, point k with -r_k phi_k. The
rods' equations are then tridiagonal in the tensions phi:

    r_k^T (W_k + W_{k+1}) r_k phi_k - r_k^T W_{k+1} r_{k+1} phi_{k+1} - r_k^T W_k r_{k-1} phi_{k-1}
        = -e_k - r_k^T (c_{k+1} - c_k),    c_i = a0_i + W_i F_i,

solved by the Thomas algorithm (one forward elimination, one back substitution: two ``lax.scan``s): O(n) work and
memory, never a dense Jacobian. A chain pinned at both ends (its first and last points guided) is a closed loop
through the ground, a "rope bridge", for which every spanning-tree method cuts the loop and pays more. Full rank is
assumed (a taut chain between two pins is not; the dense solvers report that case, :class:`~diffchain.Info`).
"""
from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._constraints.chain import point_projector_c, rod_terms_c
from .._model.model import Model
from .._state import Control, State
from .._model.forces import external_forces_c
from .._model.geometry import _pad_diff
from .base import Solution, Solver


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


def banded_dynamics(chain: Model, state: State, control: Control, stab=None):
    """Accelerations a (n, 2) and rod tensions phi (n-1,) of a chain of point masses by the sparse method (module
    docstring; seed 001 §8.13, §8.8)."""
    X, Y, U, V = state.x[:, 0], state.x[:, 1], state.v[:, 0], state.v[:, 1]
    rx, ry, e = rod_terms_c(chain, X, Y, U, V, stab)
    p11, p12, p22, a0x, a0y = point_projector_c(chain, X, Y, U, V, control.a_w, stab)
    g = chain.guided
    inv_m = jnp.where(g, 0.0, 1.0 / jnp.where(g, 1.0, chain.m))
    w11, w12, w22 = p11 * inv_m, p12 * inv_m, p22 * inv_m

    def W(fx, fy, i=slice(None)):  # W_i f
        return w11[i] * fx + w12[i] * fy, w12[i] * fx + w22[i] * fy

    wFx, wFy = W(*external_forces_c(chain, X, Y, U, V, control))
    cx, cy = a0x + wFx, a0y + wFy
    if chain.n == 1:  # no rod
        return jnp.stack([cx, cy], -1), jnp.zeros((0,), cx.dtype)
    on = chain.rod_on

    def rWr(i, ax, ay, bx, by):  # a^T W_i b
        wx, wy = W(bx, by, i)
        return ax * wx + ay * wy

    di = rWr(slice(None, -1), rx, ry, rx, ry) + rWr(slice(1, None), rx, ry, rx, ry)
    off = -rWr(slice(1, -1), rx[:-1], ry[:-1], rx[1:], ry[1:]) * on[:-1] * on[1:]   # rods k, k+1 share point k+1
    rhs = -e - (rx * (cx[1:] - cx[:-1]) + ry * (cy[1:] - cy[:-1]))
    zero = jnp.zeros((1,), di.dtype)
    phi = _tridiag_solve(jnp.concatenate([zero, off]), jnp.where(on, di, 1.0), jnp.concatenate([off, zero]),
                         jnp.where(on, rhs, 0.0))
    ax, ay = W(-_pad_diff(rx * phi), -_pad_diff(ry * phi))   # rod k pushes point k+1 with r_k phi_k, point k with -
    return jnp.stack([cx + ax, cy + ay], -1), phi


class Banded(Solver):
    """The sparse method of seed 001 §8.13 (module docstring): a serial chain's multipliers first, from its
    tridiagonal range-space matrix, in O(n) by the Thomas algorithm; guided and sliding points are eliminated first,
    so a chain pinned at both ends (a loop through the ground) is O(n) too. Chains of point masses only, every point
    that is not guided with a positive mass, no held joints, full rank assumed; it agrees with :class:`KKT` to
    round-off where it applies."""

    chains_only: ClassVar[bool] = True

    def __call__(self, chain: Model, state: State, control: Control, stab: ArrayLike | None = None) -> Solution:
        if chain.has_links:
            raise ValueError("Banded: the sparse method needs a diagonal mass matrix (point masses), got a chain with "
                             "rigid links: use Recursive() or a dense solver such as KKT()")
        return Solution(*banded_dynamics(chain, state, control, stab))

    def held(self, chain: Model, state: State, control: Control, active: jax.Array, alpha_w: ArrayLike,
             theta_bar: jax.Array | None = None, stab: ArrayLike | None = None) -> Solution:
        raise NotImplementedError("Banded: held joints (seed 000 Part II) couple three points per row, beyond the "
                                  "tridiagonal form: use Recursive() or a dense solver such as KKT()")

    def system(self, M: jax.Array, Q: jax.Array, J: jax.Array, gamma: jax.Array, on: jax.Array,
               nominal_rank: int = -1) -> Solution:
        raise TypeError("Banded: the sparse method solves serial chains only; a mechanism (or any system given by its "
                        "matrices) needs a dense solver: KKT(), RangeSpace(), NullSpace() or Larin()")
