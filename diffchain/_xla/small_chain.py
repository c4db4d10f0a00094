"""The solver :class:`ShortChain`: the recursion's KKT system solved in the lambda-first form written out in scalars,
for one chain of up to ``SMALL_MAX`` point masses, chosen explicitly with ``solver=ShortChain()``.

The same KKT system as the Part II recursion (:mod:`diffchain._solvers.recursive_held`), so the same accelerations,
torques and tensions to round-off, and the same implicit derivatives; XLA fuses a short chain's solve into few
kernels, where the recursion's scans are a few kernels per point. It pays on a single chain, forward and reverse;
batched it is about as fast as the recursion, whose programs compile sooner (benchmarks/bench_events.py).
"""
from __future__ import annotations

from typing import ClassVar

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._model.model import Model
from .._state import Control, State
from .._solvers.base import Solution, Solver
from .._solvers.implicit import implicit_solve
from .._solvers.recursive import _kkt_complete, _kkt_matvec, kkt_system, point_a0
from .._solvers.recursive_held import _lock_tolerance, _tolerance
from .._solvers.recursive_solver import _active_complete, _active_matvec, held_solution, held_system


def _small_sweeps(m, r, L, e, Fe, P, a0, active, alpha, sigma, ell, joints=True):
    """The outputs of :func:`_part_two_sweeps` in the lambda-first form, written out in scalars for a short chain
    (not in the seed; the same KKT system, so the same accelerations, torques and tensions to round-off).

    With the point constraints a_i = W_i G_i + a0_i (W_i = P_i / m_i) and the forces G_i = F^e_i + sum_q y_q c_{q,i}
    of the multipliers y = (the rod tensions phi_k, the held joints' torques tau_j) -- rod k pulls point k by
    -r_k phi_k and point k+1 by r_k phi_k; joint j's torque acts as :func:`diffchain._model.forces.torque_forces` --,
    the rows c_q^T a = h_q (rods: r_k^T (a_{k+1} - a_k) = -e_k, held joints: eq. (13) = alpha_j) ask
        S y = h - c^T u,    S_qp = sum_i c_{q,i}^T W_i c_{p,i},    u_i = W_i F^e_i + a0_i,
    S symmetric positive semi-definite, with at most 2n - 1 rows, each touching two or three points. It is
    eliminated in the seed's order (from the terminal end: rod i, then joint i+1, for i = n-1..1, joint 1 last) with
    the seed's rule for a vanishing pivot: that row's multiplier is 0 -- a rod between two guided points, a joint held
    by the other constraints, one row too many of a redundant set (seed §12.2 "stiffness"); and a joint whose
    compliance is at round-off level is not used at all (the test of :func:`root_torque`). Every value that later
    rows read is a quotient (the pivot rows divided by their pivots), which XLA CPU computes once instead of in each
    consumer (:mod:`diffchain._xla.point_major`). ``joints`` (known at trace time): True, every joint's row (masked by
    ``active``); False, the rods' rows alone (no joint held: a joint that is not held has a dropped row, multiplier 0,
    its entries in the later rows exactly 0, so leaving its row out changes no other multiplier)."""
    n = m.shape[0]
    joints = tuple(range(n)) if joints else ()
    dt = m.dtype
    tol, tol_lock = _tolerance(dt), _lock_tolerance(dt)
    (rx, ry), (Fx, Fy), (P11, P12, P22), (a0x, a0y) = r, Fe, P, a0
    Wm = jnp.stack([P11, P12, P22]) / m  # P_i / m_i: one buffer of quotients
    W = [(Wm[0, i], Wm[1, i], Wm[2, i]) for i in range(n)]
    u = [(W[i][0] * Fx[i] + W[i][1] * Fy[i] + a0x[i], W[i][1] * Fx[i] + W[i][2] * Fy[i] + a0y[i]) for i in range(n)]
    rod = [(rx[k], ry[k]) for k in range(n - 1)]
    Lk = [(L[0][k], L[1][k]) for k in range(n - 1)] if joints else []
    # the rows: (kind, index, {point: column vector}, right-hand side), in the order of elimination
    rows = []
    for i in reversed(range(n - 1)):
        rows.append(("rod", i, {i: (-rod[i][0], -rod[i][1]), i + 1: rod[i]}, -e[i]))
        j = i + 1
        if j not in joints:
            continue
        col = {j - 1: Lk[j - 1]}
        col[j] = (-Lk[j - 1][0] - (Lk[j][0] if j < n - 1 else 0.0), -Lk[j - 1][1] - (Lk[j][1] if j < n - 1 else 0.0))
        if j < n - 1:
            col[j + 1] = Lk[j]
        rows.append(("joint", j, col, alpha[j]))
    if n > 1 and 0 in joints:
        rows.append(("joint", 0, {0: (-Lk[0][0], -Lk[0][1]), 1: Lk[0]}, alpha[0]))
    nq = len(rows)

    def wdot(i, c, d):  # c^T W_i d
        w11, w12, w22 = W[i]
        return c[0] * (w11 * d[0] + w12 * d[1]) + c[1] * (w12 * d[0] + w22 * d[1])

    S = [[None] * nq for _ in range(nq)]
    for q in range(nq):
        for p in range(q, nq):
            shared = [i for i in rows[q][2] if i in rows[p][2]]
            if shared:
                S[q][p] = S[p][q] = sum(wdot(i, rows[q][2][i], rows[p][2][i]) for i in shared[1:]) \
                    + wdot(shared[0], rows[q][2][shared[0]], rows[p][2][shared[0]])
    b = [rows[q][3] - sum(c[0] * u[i][0] + c[1] * u[i][1] for i, c in rows[q][2].items()) for q in range(nq)]
    diag = [S[q][q] for q in range(nq)]
    keep = []
    for q in range(nq):
        k = diag[q] > 0
        if rows[q][0] == "joint":
            k = active[rows[q][1]] & (diag[q] * ell**2 > tol_lock * sigma)
        keep.append(k)
    # forward elimination: row k's entries right of the pivot and its right-hand side divided by the pivot
    U = [row[:] for row in S]
    Ur, Ub = [None] * nq, [None] * nq
    for k in range(nq):
        piv = U[k][k]
        # a dropped row divides by inf: its multiplier and its entries in the later rows are 0
        den = jnp.where(keep[k] & (piv > tol * diag[k]), piv, jnp.inf)
        cols = [j for j in range(k + 1, nq) if U[k][j] is not None]
        quot = jnp.stack([U[k][j] for j in cols] + [b[k]]) / den  # one buffer per pivot row
        Ur[k] = {j: quot[c] for c, j in enumerate(cols)}
        Ub[k] = quot[-1]
        for i in range(k + 1, nq):
            if U[i][k] is None:
                continue
            lik = U[i][k]  # = U[k][i] (symmetric)
            for j, ukj in Ur[k].items():
                U[i][j] = -lik * ukj if U[i][j] is None else U[i][j] - lik * ukj
            b[i] = b[i] - lik * Ub[k]
    y = [None] * nq
    for k in reversed(range(nq)):
        t = Ub[k]
        for j, ukj in Ur[k].items():
            t = t - ukj * y[j]
        y[k] = t
    zero = jnp.zeros((), dt)
    phi, tau = [zero] * n, [zero] * n
    G = [[Fx[i], Fy[i]] for i in range(n)]  # the forces on each point but the point constraints'
    for q, (kind, idx, col, _) in enumerate(rows):
        if kind == "rod":
            phi[idx] = y[q]
        else:
            tau[idx] = y[q]
        for i, c in col.items():
            G[i][0] = G[i][0] + y[q] * c[0]
            G[i][1] = G[i][1] + y[q] * c[1]
    ax = jnp.stack([W[i][0] * G[i][0] + W[i][1] * G[i][1] + a0x[i] for i in range(n)])
    ay = jnp.stack([W[i][1] * G[i][0] + W[i][2] * G[i][1] + a0y[i] for i in range(n)])
    return (ax, ay), jnp.stack(tau), jnp.stack(phi)


SMALL_MAX = 8  # the longest chain ShortChain takes (its program grows as n^2: above, the recursion compiles sooner)


def _short_swept(op, b, joints):
    """The part of K^-1 b that the recursion's sweeps give (:func:`diffchain._solvers.recursive._kkt_swept`; with
    ``joints``, :func:`diffchain._solvers.recursive_solver._active_swept`), by :func:`_small_sweeps`."""
    n = op.m.shape[0]
    bx, by, br = b[:3]
    if joints:
        L, active, alpha = (-op.ry * op.inv_rho, op.rx * op.inv_rho), op.active, [b[5][j] for j in range(n)]
    else:
        L, active, alpha = None, None, None
    (ax, ay), tau, phi = _small_sweeps(op.m, (op.rx, op.ry), L, -br, (bx, by), op.P, point_a0(op, b), active, alpha,
                                       op.sigma, op.ell, joints)
    z = ax, ay, jnp.where(op.on, -phi[:-1], br)
    return z + (jnp.where(active, -tau, b[5]),) if joints else z


short_solve = implicit_solve(lambda op, b: _short_swept(op, b, False), _kkt_complete, _kkt_matvec)
short_solve.__doc__ = ":func:`diffchain._solvers.recursive.kkt_solve` by :func:`_small_sweeps`."
short_held_solve = implicit_solve(lambda op, b: _short_swept(op, b, True), _active_complete, _active_matvec)
short_held_solve.__doc__ = ":func:`diffchain._solvers.recursive_solver.active_solve` by :func:`_small_sweeps`."


class ShortChain(Solver):
    """The recursion's KKT system solved by :func:`_small_sweeps`, written out in scalars, for one chain of 2 to
    ``SMALL_MAX`` point masses, with and without held joints: the accelerations, tensions and holding torques of
    :class:`~diffchain.Recursive` to round-off, in few kernels, with the same implicit derivatives
    (:func:`diffchain._solvers.implicit.implicit_solve`). The fastest solver for a single short chain, e.g.
    ``event_rollout(..., solver=ShortChain())``, forward and reverse; batched it is about as fast as
    :class:`~diffchain.Recursive`, whose programs compile sooner. Chains only (:attr:`Model.serial`); a longer chain or
    rigid links raise."""

    chains_only: ClassVar[bool] = True

    def __call__(self, chain: Model, state: State, control: Control, stab: ArrayLike | None = None) -> Solution:
        _check_short(chain)
        ax, ay, yr, _, _ = short_solve(*kkt_system(chain, state, control, stab))
        return Solution(jnp.stack([ax, ay], -1), -yr)

    def held(self, chain: Model, state: State, control: Control, active: jax.Array, alpha_w: ArrayLike,
             theta_bar: jax.Array | None = None, stab: ArrayLike | None = None) -> Solution:
        _check_short(chain)
        return Solution(*held_solution(*held_system(chain, state, control, active, alpha_w, theta_bar, stab),
                                       short_held_solve))

    def system(self, M: jax.Array, Q: jax.Array, J: jax.Array, gamma: jax.Array, on: jax.Array,
               nominal_rank: int = -1) -> Solution:
        raise TypeError("ShortChain: the written-out recursion solves short serial chains only; a mechanism (or any "
                        "system given by its matrices) needs a dense solver: KKT(), RangeSpace(), NullSpace() or "
                        "Larin()")


def _check_short(chain: Model):
    if chain.has_links or not 2 <= chain.n <= SMALL_MAX:
        got = "rigid links" if chain.has_links else f"n = {chain.n} points"
        raise ValueError(f"ShortChain: solves chains of 2 to SMALL_MAX = {SMALL_MAX} point masses, got a chain with "
                         f"{got}: use Recursive() (any length, and rigid links without held joints) or KKT()")
