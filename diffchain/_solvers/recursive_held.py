"""The O(n) recursion of seed 000 Part II (§9–§11): held (active) joints enforced by unknown torques, as two
``lax.scan`` sweeps in projector form (:func:`active_backward`, :func:`root_torque`, :func:`active_forward`), with
the seed's rules for vanishing pivots and locked parts (§11.1, §12.2). The model-facing solvers are in
:mod:`diffchain._solvers.recursive_solver`.
"""
from __future__ import annotations


import jax
import jax.numpy as jnp

from .._model.geometry import _pad_diff, link_omega_c
from .._model.model import Model
from .._xla.loops import SCAN_BLOCK, scan_points
from .recursive import _pad1


def _tolerance(dtype):
    """Relative level below which a pivot of the recursion counts as round-off (seed §11.1, §11.2 "sytuacje
    wyjątkowe"): 1e4 eps, 2e-12 in float64. Kept small: a legitimate pivot of a pose near a singular one (a nearly
    straight run between pins) may be tiny, and dropping its row is an O(1) error."""
    return 1e4 * jnp.finfo(dtype).eps


def _lock_tolerance(dtype):
    """Relative level below which a compliance (A, b^w = p, q^w) counts as round-off: the point or link is locked by
    its tail (seed §12.2 "sztywność": "check whether A_{i+1} has very small values") and is set to exactly 0.
    sqrt(eps), 1.5e-8 in float64: round-off in a locked part is amplified by every nearly parallel pair of rows it
    passes, and snapping a legitimately tiny compliance costs only tol * |F| -- the same order as the round-off it
    removes."""
    return jnp.sqrt(jnp.finfo(dtype).eps)


def _max_abs(*xs):
    """max |x| over the components xs, pointwise."""
    out = jnp.abs(xs[0])
    for x in xs[1:]:
        out = jnp.maximum(out, jnp.abs(x))
    return out


def _snap(locks, A, bw, p, qw):
    """Seed §12.2 stiffness: exact zeros for the compliance of a point (A, b^w = p) or a link (q^w, b^w = p) locked by
    its tail, ``locks`` = (point_locked, link_locked) of :func:`active_backward`. Vectors and matrices by components."""
    point_locked, link_locked = locks
    either = point_locked | link_locked
    A = tuple(jnp.where(point_locked, 0.0, x) for x in A)
    bw, p = (tuple(jnp.where(either, 0.0, x) for x in v) for v in (bw, p))
    return A, bw, p, jnp.where(link_locked, 0.0, qw)


def _solve(system, k2, k7):
    """k12..k17: [phi_i; tau^w_{i+1}] = -K^-1 [k2^T F + k3 tau + k4; k7^T F + k8 tau + k9], K = [[k0, k1], [k5, k6]],
    k11 = -det K, after the degenerate rules (K singular: phi_i = tau^w_{i+1} = 0). ``system`` = (k0, k1, k3, k4, k5,
    k6, k8, k9, drop1, drop2) of :func:`active_backward`, k2 = (k2_x, k2_y), k7 = (k7_x, k7_y)."""
    k0, k1, k3, k4, k5, k6, k8, k9, drop1, drop2 = system
    (k2_x, k2_y), (k7_x, k7_y) = k2, k7
    # a dropped row: phi_i = 0 (k0 = 1, k1 = k2 = k3 = k4 = 0) or tau^w_{i+1} = 0 (k6 = 1, k5 = k7 = k8 = k9 = 0)
    k0, k1, k3, k4 = (jnp.where(drop1, v, k) for v, k in ((1.0, k0), (0.0, k1), (0.0, k3), (0.0, k4)))
    k2_x, k2_y = jnp.where(drop1, 0.0, k2_x), jnp.where(drop1, 0.0, k2_y)
    k5, k6, k8, k9 = (jnp.where(drop2, v, k) for v, k in ((0.0, k5), (1.0, k6), (0.0, k8), (0.0, k9)))
    k7_x, k7_y = jnp.where(drop2, 0.0, k7_x), jnp.where(drop2, 0.0, k7_y)
    k11 = k5 * k1 - k0 * k6
    ok = k11 != 0
    inv = jnp.where(ok, 1.0 / jnp.where(ok, k11, 1.0), 0.0)
    k12_x, k12_y = (k2_x * k6 - k7_x * k1) * inv, (k2_y * k6 - k7_y * k1) * inv
    k13_x, k13_y = (k7_x * k0 - k2_x * k5) * inv, (k7_y * k0 - k2_y * k5) * inv
    k14 = (k6 * k3 - k1 * k8) * inv
    k15 = (k0 * k8 - k5 * k3) * inv
    k16 = (k4 * k6 - k1 * k9) * inv
    k17 = (k0 * k9 - k5 * k4) * inv
    return (k12_x, k12_y), (k13_x, k13_y), k14, k15, k16, k17


def _response(system, inv_m, r, L, Fe, P, a0):
    """Point i's answer to F = F_i^d and tau = tau^w_i from its system (seed §10; before the lock snap):
        phi_i = k12^T F + k14 tau + k16,   g = k13, h^w = k15, h = k17   (:func:`_solve`, k2 = P r/m, k7 = P L/m),
        C = r k12^T - L k13^T,  d^w = r k14 + L - L k15,  d = r k16 - L k17,
        A = P (I - C)/m,  b^w = -P d^w/m,  b = P (F^e - d)/m + a0.
    Scalars by components (P = (P11, P12, P22) symmetric). Returns ((k12, k14, k16), (g, h^w, h), C, d^w, d, A, b^w,
    b)."""
    (r_x, r_y), (L_x, L_y), (Fe_x, Fe_y), (P11, P12, P22), (a0_x, a0_y) = r, L, Fe, P, a0
    Pr_x, Pr_y = P11 * r_x + P12 * r_y, P12 * r_x + P22 * r_y
    PL_x, PL_y = P11 * L_x + P12 * L_y, P12 * L_x + P22 * L_y
    k2, k7 = (Pr_x * inv_m, Pr_y * inv_m), (PL_x * inv_m, PL_y * inv_m)
    (k12_x, k12_y), (k13_x, k13_y), k14, k15, k16, k17 = _solve(system, k2, k7)
    C11, C12 = r_x * k12_x - L_x * k13_x, r_x * k12_y - L_x * k13_y
    C21, C22 = r_y * k12_x - L_y * k13_x, r_y * k12_y - L_y * k13_y
    dw_x, dw_y = r_x * k14 + L_x - L_x * k15, r_y * k14 + L_y - L_y * k15
    d_x, d_y = r_x * k16 - L_x * k17, r_y * k16 - L_y * k17
    A11 = (P11 * (1.0 - C11) - P12 * C21) * inv_m
    A12 = (P12 * (1.0 - C22) - P11 * C12) * inv_m
    A21 = (P12 * (1.0 - C11) - P22 * C21) * inv_m
    A22 = (P22 * (1.0 - C22) - P12 * C12) * inv_m
    bw_x, bw_y = -(P11 * dw_x + P12 * dw_y) * inv_m, -(P12 * dw_x + P22 * dw_y) * inv_m
    b_x = (P11 * (Fe_x - d_x) + P12 * (Fe_y - d_y)) * inv_m + a0_x
    b_y = (P12 * (Fe_x - d_x) + P22 * (Fe_y - d_y)) * inv_m + a0_y
    return (((k12_x, k12_y), k14, k16), ((k13_x, k13_y), k15, k17), (C11, C12, C21, C22), (dw_x, dw_y), (d_x, d_y),
            (A11, A12, A21, A22), (bw_x, bw_y), (b_x, b_y))


def active_backward(m, r, L, e, Fe, P, a0, act_next, alpha_next, sigma, ell, block=SCAN_BLOCK):
    """Seed §9 step 1 / §10 / §11: the coefficient groups for i = n..1, in projector form.

    Each point i answers the force F = F_i^d and torque tau = tau_i^w arriving from link i-1 with (seed §9)
        a_i = A_i F + b^w_i tau + b_i,            alpha^o_i = p_i^T F + q^w_i tau + q_i,
        F_{i+1}^d = C_i F + d^w_i tau + d_i,      tau^w_{i+1} = g_i^T F + h^w_i tau + h_i.
    F_{i+1}^d = r_i phi_i + L_i (tau - tau^w_{i+1}); the point constraint is a_i = P_i F_i / m_i + a0_i (free P = I,
    slider I - s s^T, guided 0 with a0 = a^w, as in :mod:`diffchain._solvers.recursive`). The link equation and, if
    joint i+1 is active, the alpha_{i+1}^w equation give 0 = K [phi_i; tau^w_{i+1}] + [k2^T F + k3 tau + k4; k7^T F +
    k8 tau + k9] with (eqs. 14–23 for P = I, eqs. 24–31 for P = 0; the P terms are the only generalisation)
        k0 = -r^T P r/m - r^T A' r          k1 = r^T P L/m + r^T A' L - r^T b'^w     k2 = P r/m
        k3 = -r^T P L/m - r^T A' L          k4 = r^T P F^e/m + r^T a0 - r^T b' - e
        k5 = p'^T r - L^T A' r - L^T P r/m  k6 = -p'^T L + q'^w + L^T A' L - L^T b'^w + L^T P L/m   k7 = P L/m
        k8 = p'^T L - L^T A' L - L^T P L/m  k9 = q' - L^T b' + L^T P F^e/m + L^T a0 - alpha^w_{i+1}
    (primes: index i+1). K = [[k0, k1], [k5, k6]] = [[-a, b], [-b, c]] with a, c >= 0 and b^2 <= a c (compliances).
    If joint i+1 is not active the second equation is tau^w_{i+1} = 0 (§11.2, §11.3). Degenerate rules (§11.1, §11.2,
    §12.2 stiffness), all with a relative threshold on the scale sigma = max 1/m, ell = min l: a ~ 0 -> phi_i = 0 (the
    prescribed accelerations win over the rod, k0 = 1, k1 = k2 = k3 = k4 = 0); c ~ 0 -> tau^w_{i+1} = 0 (k6 = 1,
    k5 = k7 = k8 = k9 = 0); rows parallel (k11 ~ 0) -> drop the weaker row (seed: compare |k0|+|k1| with |k5|+|k6|,
    here in consistent units a vs c ell^2). The terminal joint is the rod r_n = L_n = 0 (both rules fire). Pivot
    threshold :func:`_tolerance`; a compliance at round-off level (:func:`_lock_tolerance`) is snapped to exactly 0
    after the step (a locked point acts as guided, seed §12.2), using the symmetry b^w_i = p_i of the compliance.
    Then k11..k17 (:func:`_solve`) and (:func:`_response`, then the step)
        g = k13, h^w = k15, h = k17;  C = r k12^T - L k13^T,  d^w = r k14 + L - L k15,  d = r k16 - L k17,
        A = P (I - C)/m,  b^w = -P d^w/m,  b = P (F^e - d)/m + a0,
        p = (L^T A' C + L^T b'^w g^T - L^T A)^T,  q^w = L^T A' d^w + L^T b'^w h^w - L^T b^w,
        q = L^T A' d + L^T b'^w h + L^T b' - L^T b.

    By components, as :func:`diffchain._solvers.recursive.abcd_sweeps_c`: every per-point quantity is an (n,) array, a
    vector v the pair (v_x, v_y), a matrix M the four (M11, M12, M21, M22) (A and C are not symmetric term by term), the
    symmetric P the three (P11, P12, P22); so the step has only scalar operations and under ``vmap`` every operation is
    elementwise on batch-contiguous arrays. Inputs m, r (r_n = 0), L (L_n = 0), e (e_n = 0), F^e, P, a0 and
    act_next, alpha_next of joint i+1. Returns, per point,
        groups = (A, b^w, b, p, q^w, q) after the lock snap,  locks = (point_locked, link_locked),
        systems = (k0, k1, k3, k4, k5, k6, k8, k9, drop1, drop2)   (k2, k7 depend on the point alone),
    and ``system1``, point 1's system once more, as the scan's final carry (see below).

    The system and the lock flags have many consumers, so they are carried (XLA computes a carried value once, any
    other once per consumer): the snap of point i+1 is applied when step i reads it, and :func:`active_forward` reads
    point 1's system from the final carry.
    """
    tol, tol_lock = _tolerance(m.dtype), _lock_tolerance(m.dtype)
    small = lambda xs, s: _max_abs(*xs) * s <= tol_lock * sigma  # noqa: E731

    def step(carry, inp):
        (A1, bw1, b1, p1, qw1, q1), locks1, _ = carry  # point i+1 before its lock snap, its lock flags
        A1, bw1, p1, qw1 = _snap(locks1, A1, bw1, p1, qw1)
        (A11_, A12_, A21_, A22_), (bw_x_, bw_y_), (b_x_, b_y_), (p_x_, p_y_), qw_, q_ = A1, bw1, b1, p1, qw1, q1
        inv_m, r_i, L_i, e_i, Fe_i, P_i, a0_i, act, alpha = inp
        (r_x, r_y), (L_x, L_y), (Fe_x, Fe_y), (P11_i, P12_i, P22_i), (a0_x, a0_y) = r_i, L_i, Fe_i, P_i, a0_i
        Pr_x, Pr_y = P11_i * r_x + P12_i * r_y, P12_i * r_x + P22_i * r_y
        PL_x, PL_y = P11_i * L_x + P12_i * L_y, P12_i * L_x + P22_i * L_y
        PF_x, PF_y = P11_i * Fe_x + P12_i * Fe_y, P12_i * Fe_x + P22_i * Fe_y
        A1r_x, A1r_y = A11_ * r_x + A12_ * r_y, A21_ * r_x + A22_ * r_y
        A1L_x, A1L_y = A11_ * L_x + A12_ * L_y, A21_ * L_x + A22_ * L_y
        rPr, rPL, rPF = r_x * Pr_x + r_y * Pr_y, r_x * PL_x + r_y * PL_y, r_x * PF_x + r_y * PF_y
        LPr, LPL, LPF = L_x * Pr_x + L_y * Pr_y, L_x * PL_x + L_y * PL_y, L_x * PF_x + L_y * PF_y
        rA1r, rA1L = r_x * A1r_x + r_y * A1r_y, r_x * A1L_x + r_y * A1L_y
        LA1r, LA1L = L_x * A1r_x + L_y * A1r_y, L_x * A1L_x + L_y * A1L_y
        rbw1, Lbw1 = r_x * bw_x_ + r_y * bw_y_, L_x * bw_x_ + L_y * bw_y_
        rb1, Lb1 = r_x * b_x_ + r_y * b_y_, L_x * b_x_ + L_y * b_y_
        ra0, La0 = r_x * a0_x + r_y * a0_y, L_x * a0_x + L_y * a0_y
        p1r, p1L = p_x_ * r_x + p_y_ * r_y, p_x_ * L_x + p_y_ * L_y
        k0 = -rPr * inv_m - rA1r
        k1 = rPL * inv_m + rA1L - rbw1
        k3 = -rPL * inv_m - rA1L
        k4 = rPF * inv_m + ra0 - rb1 - e_i
        k5 = p1r - LA1r - LPr * inv_m
        k6 = -p1L + qw_ + LA1L - Lbw1 + LPL * inv_m
        k8 = p1L - LA1L - LPL * inv_m
        k9 = q_ - Lb1 + LPF * inv_m + La0 - alpha
        # degenerate rules (seed §11.1 "sytuacje wyjątkowe", §11.2, §12.2), applied by _solve; det K = k5 k1 - k0 k6
        # is round-off against the magnitudes it is computed from: sigma for a (a sum of compliances <= ~sigma), the
        # terms of k6 for c (of either sign: they cancel where the tail barely lets link i turn)
        a_, c_ = -k0, k6 * ell**2
        k6_scale = jnp.abs(p1L) + jnp.abs(qw_) + jnp.abs(LA1L) + jnp.abs(Lbw1) + jnp.abs(LPL * inv_m)
        zero1 = a_ <= tol * sigma
        zero2 = ~act | (c_ <= tol * sigma)
        parallel = ~zero1 & ~zero2 & (k5 * k1 - k0 * k6 <= tol * sigma * k6_scale)
        drop1 = zero1 | (parallel & (a_ < c_))
        drop2 = zero2 | (parallel & (a_ >= c_))
        system = (k0, k1, k3, k4, k5, k6, k8, k9, drop1, drop2)
        _, ((g_x, g_y), hw, h), (C11, C12, C21, C22), (dw_x, dw_y), (d_x, d_y), A, bw, b = _response(
            system, inv_m, r_i, L_i, Fe_i, P_i, a0_i)
        (A11, A12, A21, A22), (bw_x, bw_y), (b_x, b_y) = A, bw, b
        LA1_x, LA1_y = L_x * A11_ + L_y * A21_, L_x * A12_ + L_y * A22_  # the row L^T A'
        p_x = LA1_x * C11 + LA1_y * C21 + Lbw1 * g_x - (L_x * A11 + L_y * A21)
        p_y = LA1_x * C12 + LA1_y * C22 + Lbw1 * g_y - (L_x * A12 + L_y * A22)
        qw = LA1_x * dw_x + LA1_y * dw_y + Lbw1 * hw - (L_x * bw_x + L_y * bw_y)
        q = LA1_x * d_x + LA1_y * d_y + Lbw1 * h + Lb1 - (L_x * b_x + L_y * b_y)
        # seed §12.2 stiffness: [[A, b^w], [p^T, q^w]] is the symmetric PSD compliance of the tail to (F, tau) (so
        # b^w = p). A point (A ~ 0) or link (q^w ~ 0) locked by the tail gets exact zeros (:func:`_snap`): it then acts
        # as guided, its round-off is not multiplied by the (possibly large) F_i^d, and the next pivots see an exact 0.
        point_locked = small(A, 1.0) & small(bw, ell) & small((p_x, p_y), ell)
        link_locked = small((qw,), ell**2) & small(bw, ell) & small((p_x, p_y), ell)
        locks = (point_locked, link_locked)
        A_s, bw_s, p_s, qw_s = _snap(locks, A, bw, (p_x, p_y), qw)
        return ((A, bw, b, (p_x, p_y), qw, q), locks, system), ((A_s, bw_s, b, p_s, qw_s, q), locks, system)

    z, no = jnp.zeros((), m.dtype), jnp.zeros((), bool)
    init = (((z,) * 4, (z, z), (z, z), (z, z), z, z), (no, no), (z,) * 8 + (no, no))
    inputs = (1.0 / m, r, L, e, Fe, P, a0, act_next, alpha_next)
    (_, _, system1), (groups, locks, systems) = scan_points(step, init, inputs, reverse=True, block=block)
    return groups, locks, systems, system1


def active_forward(locks, systems, system1, m, r, L, Fe, P, a0, tau1, block=SCAN_BLOCK):
    """Seed §9 steps 2–3: F_1^d = 0, tau_1^w = tau1, then for i = 1..n (F = F_i^d, tau = tau^w_i)
        a_i = A_i F + b^w_i tau + b_i,   phi_i = k12^T F + k14 tau + k16,   tau^w_{i+1} = g_i^T F + h^w_i tau + h_i,
        F_{i+1}^d = C_i F + d^w_i tau + d_i = r_i phi_i + L_i (tau - tau^w_{i+1}),
    with the point's groups rebuilt from its system and lock flags (:func:`_response`, :func:`_snap`; cheaper than
    storing them). Inputs by components as for :func:`active_backward`, with its locks, systems and system1 (point 1's
    system, taken from there). Returns a = (a_x, a_y), tau^w (n,) and the rod tensions phi (n,) (the last one is 0)."""

    def step(carry, inp):
        F_x, F_y, tau = carry  # F_i^d, tau_i^w
        locks_i, system, inv_m, r_i, L_i, Fe_i, P_i, a0_i = inp
        ((k12_x, k12_y), k14, k16), ((g_x, g_y), hw, h), _, _, _, A, bw, (b_x, b_y) = _response(
            system, inv_m, r_i, L_i, Fe_i, P_i, a0_i)
        (A11, A12, A21, A22), (bw_x, bw_y), _, _ = _snap(locks_i, A, bw, (), 0.0)
        a_x = A11 * F_x + A12 * F_y + bw_x * tau + b_x
        a_y = A21 * F_x + A22 * F_y + bw_y * tau + b_y
        phi = k12_x * F_x + k12_y * F_y + k14 * tau + k16
        tau_next = g_x * F_x + g_y * F_y + hw * tau + h
        (r_x, r_y), (L_x, L_y) = r_i, L_i
        return (r_x * phi + L_x * (tau - tau_next), r_y * phi + L_y * (tau - tau_next), tau_next), (a_x, a_y, tau, phi)

    inputs = (locks, systems, 1.0 / m, r, L, Fe, P, a0)
    first = (jax.tree.map(lambda x: x[0], locks), system1) + jax.tree.map(lambda x: x[0], inputs[2:])
    z = jnp.zeros_like(tau1)
    carry, out1 = step((z, z, tau1), first)
    _, out = scan_points(step, carry, jax.tree.map(lambda x: x[1:], inputs), block=block)
    a_x, a_y, tau, phi = (jnp.concatenate([o1[None], o]) for o1, o in zip(out1, out))
    return (a_x, a_y), tau, phi


def root_torque(active1, alpha1, p1, qw1, q1, sigma, ell):
    """tau_1^w for an active joint 1 (the seed starts with tau_1^w = 0, having no joint against the world).

    With F_1^d = 0, alpha_1^z = alpha_1^o = q^w_1 tau + q_1 = alpha_1^w, so tau_1^w = (alpha_1^w - q_1)/q^w_1; if
    link 1 cannot rotate at all (q^w_1 at round-off level, e.g. points 1 and 2 guided) tau_1^w = 0 (seed §12.2)."""
    del p1
    ok = active1 & (qw1 * ell**2 > _lock_tolerance(qw1.dtype) * sigma)
    return jnp.where(ok, (alpha1 - q1) / jnp.where(ok, qw1, 1.0), 0.0)


def _joint_alpha(rx, ry, inv_rho, ax, ay):
    """alpha^z of every joint (seed eq. 13) for point accelerations (a_x, a_y), the links by components."""
    return _pad_diff(link_omega_c(rx, ry, inv_rho, ax[1:] - ax[:-1], ay[1:] - ay[:-1]))


def _scales(chain: Model):
    """sigma = max 1/m and ell = min l (1 for one point): the scales of the lock test (:func:`root_torque`)."""
    return jnp.max(1.0 / chain.m), jnp.min(chain.l) if chain.n > 1 else jnp.ones((), chain.m.dtype)


def _part_two_sweeps(m, r, L, e, Fe, P, a0, active, alpha, sigma, ell, block=SCAN_BLOCK):
    """:func:`active_backward`, :func:`root_torque`, :func:`active_forward`: a = (a_x, a_y), tau^w, phi."""
    groups, locks, systems, system1 = active_backward(m, r, L, e, Fe, P, a0, _pad1(active[1:]),
                                                      _pad1(alpha[1:]), sigma, ell, block)
    _, _, _, (p_x, p_y), qw, q = groups
    tau1 = root_torque(active[0], alpha[0], (p_x[0], p_y[0]), qw[0], q[0], sigma, ell)
    return active_forward(locks, systems, system1, m, r, L, Fe, P, a0, tau1, block)
