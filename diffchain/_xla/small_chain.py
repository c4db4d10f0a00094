"""The solver :class:`ShortChain`: the lambda-first solve of one short chain written out in scalars (up to
``SMALL_MAX`` points), chosen explicitly with ``solver=ShortChain()``.

The same KKT system as the Part II recursion (:mod:`diffchain._solvers.recursive_held`), so the same accelerations,
torques and tensions to round-off; XLA fuses a short chain's solve into few kernels, where the recursion's scans are
a kernel per step. It pays on a single chain (an event rollout of one chain); batched and in derivatives the
recursion is as fast or faster and compiles sooner (benchmarks/bench_events.py).
"""
from __future__ import annotations

import functools
from typing import ClassVar

import jax.numpy as jnp

from .._constraints.chain import _inv
from .._model.geometry import link_omega_c, links_c, wrap_angle
from .._model.chain import Chain, Control, State
from .._solvers.base import Solver
from .._solvers.recursive import kkt_system, point_a0
from .._constraints.held import _active_mask, _per_joint
from .._solvers.recursive_held import _lock_tolerance, _tolerance


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
    (rx, ry), (Lx, Ly), (Fx, Fy), (P11, P12, P22), (a0x, a0y) = r, L, Fe, P, a0
    Wm = jnp.stack([P11, P12, P22]) / m  # P_i / m_i: one buffer of quotients
    W = [(Wm[0, i], Wm[1, i], Wm[2, i]) for i in range(n)]
    u = [(W[i][0] * Fx[i] + W[i][1] * Fy[i] + a0x[i], W[i][1] * Fx[i] + W[i][2] * Fy[i] + a0y[i]) for i in range(n)]
    rod = [(rx[k], ry[k]) for k in range(n - 1)]
    Lk = [(Lx[k], Ly[k]) for k in range(n - 1)]
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


def _small_active_terms(state: State, active, alpha_w, theta_bar, stab, links):
    """:func:`active_terms` (masked by ``active``) as a list of scalars, one per joint, so that each joint's term
    fuses into the rows that read it instead of the (n,) arrays' concatenations (``links``: :func:`links_c`)."""
    n = active.shape[0]
    dX, dY, _, inv_rho, rx, ry = links
    U, V = state.v[:, 0], state.v[:, 1]
    omega, kappa, phi = [], [], []
    for k in range(n - 1):
        dU, dV = U[k + 1] - U[k], V[k + 1] - V[k]
        omega.append(link_omega_c(rx[k], ry[k], inv_rho[k], dU, dV))
        kappa.append(-2.0 * omega[k] * (rx[k] * dU + ry[k] * dV) * inv_rho[k])
        phi.append(jnp.arctan2(dY[k], dX[k]) if theta_bar is not None and stab is not None else None)

    def diff(f, j):  # f_j - f_{j-1}, f_{-1} = f_{n-1} = 0 (:func:`diffchain._model.geometry._pad_diff`)
        return (f[j] if j < n - 1 else 0.0) - (f[j - 1] if j > 0 else 0.0)

    alpha = []
    for j in range(n):
        target = alpha_w[j]
        if theta_bar is not None and stab is not None:
            w = _inv(stab)
            target = target - wrap_angle(diff(phi, j) - theta_bar[j]) * w**2 - 2.0 * diff(omega, j) * w
        alpha.append(jnp.where(active[j], target - diff(kappa, j), 0.0))
    return alpha


def small_dynamics(chain: Chain, state: State, control: Control, active=None, alpha_w=None, theta_bar=None, stab=None):
    """(a, phi, tau_w) of :func:`active_dynamics_recursive` by :func:`_small_sweeps` alone, for one short chain of
    point masses (differentiated through its scalars: no implicit derivative rule). ``active`` None: no joint is
    held (the rods' rows alone, the Part I accelerations; tau_w = 0)."""
    n, dt = chain.n, chain.m.dtype
    joints = active is not None
    active = _active_mask(chain, active) if joints else jnp.zeros((n,), bool)
    op, b = kkt_system(chain, state, control, stab)
    m, rx, ry, on, P = op.m, op.rx, op.ry, op.on, op.P
    bx, by, br = b[:3]
    lk = links_c(state.x[:, 0], state.x[:, 1])
    inv_rho = lk[3]
    r, L = (rx, ry), (-ry * inv_rho, rx * inv_rho)  # per rod: _small_sweeps reads no terminal rod
    inv_m = [1.0 / chain.m[i] for i in range(n)]  # scalars, so that the scales fuse into their consumers
    sigma = functools.reduce(jnp.maximum, inv_m)
    ell = functools.reduce(jnp.minimum, [chain.l[k] for k in range(n - 1)])
    if joints:
        theta_bar = None if theta_bar is None else _per_joint(chain, theta_bar, "theta_bar")
        alpha = _small_active_terms(state, active, _per_joint(chain, alpha_w, "alpha_w"), theta_bar, stab, lk)
    else:
        alpha = [jnp.zeros((), dt)] * n
    (ax, ay), tau, phi = _small_sweeps(m, r, L, -br, (bx, by), P, point_a0(op, b), active, alpha, sigma, ell, joints)
    return jnp.stack([ax, ay], -1), jnp.where(on, phi[:-1], -br), jnp.where(active, tau, 0.0)


class ShortChain(Solver):
    """The lambda-first solve written out in scalars (:func:`small_dynamics`) for one chain of 2 to ``SMALL_MAX``
    point masses, with and without held joints: the accelerations, tensions and holding torques of
    :class:`~diffchain.Recursive` to round-off, in few kernels. The fastest solver for a single short chain, e.g.
    ``event_rollout(..., solver=ShortChain())``; batched or differentiated, :class:`~diffchain.Recursive` is as fast
    and compiles sooner. Chains only (serial topology); a longer chain or rigid links raise."""

    chains_only: ClassVar[bool] = True

    def __call__(self, chain, state, control, stab=None):
        _check_short(chain)
        return small_dynamics(chain, state, control, stab=stab)[:2]

    def held(self, chain, state, control, active, alpha_w, theta_bar=None, stab=None):
        _check_short(chain)
        return small_dynamics(chain, state, control, active, alpha_w, theta_bar, stab)

    def system(self, M, Q, J, gamma, on, nominal_rank=-1):
        raise TypeError("ShortChain: the written-out recursion solves short serial chains only; a mechanism (or any "
                        "system given by its matrices) needs a dense solver: KKT(), RangeSpace(), NullSpace() or "
                        "Larin()")


def _check_short(chain: Chain):
    if chain.has_links or not 2 <= chain.n <= SMALL_MAX:
        got = "rigid links" if chain.has_links else f"n = {chain.n} points"
        raise ValueError(f"ShortChain: solves chains of 2 to SMALL_MAX = {SMALL_MAX} point masses, got a chain with "
                         f"{got}: use Recursive() (any length, and rigid links without held joints) or KKT()")
