"""Active joints: prescribed joint angular accelerations enforced by unknown torques (seed 000 Part II, §9–§12.2).

An *active* joint i has its angular acceleration (seed eq. 13, conventions of :mod:`diffchain.geometry`: L_0 = L_n = 0)
    alpha_i^z = L_i^T a_{i+1} - (L_i + L_{i-1})^T a_i + L_{i-1}^T a_{i-1}
prescribed to alpha_i^w. It is enforced by an unknown torque tau_i^w that acts exactly like an ordinary joint torque
(:func:`diffchain.forces.torque_forces`): L_{i-1} tau on point i-1, -(L_{i-1} + L_i) tau on point i, L_i tau on point
i+1. The generalized force of that torque is the transposed row of eq. 13, so in the KKT form the multiplier of the
active row *is* tau_i^w (same sign convention as the rod tensions of :func:`diffchain.solvers.kkt_dynamics`).

Joint 1 is measured against the world (a base motor); joint n (L_n = 0) prescribes minus the absolute angular
acceleration of the last link (a torque between the world and link n-1 alone). Both are supported by both solvers.
A chain of one point has no joints: ``active`` is ignored there.

Two solvers, same signature ``(chain, state, control, active, alpha_w, theta_bar=None, stab=None) -> (a, phi, tau_w)``:

* :func:`active_dynamics_kkt` -- the Part I KKT system of :mod:`diffchain.solvers` plus one candidate row per joint
  (fixed shape, masked; rows switched off get a unit diagonal so their multiplier is 0). Works with rigid links too.
  A redundant set of constraints (seed §12.2 "stiffness") makes the matrix singular: use the recursion there.
* :func:`active_dynamics_recursive` -- the O(n) recursion of seed §9–§11 in ``lax.scan`` (point masses only).

Off the constraint manifold (rods not exactly at length, stretching velocities) the exact second derivative of the joint
angle has the extra terms of dL/dt (:func:`active_terms`); both solvers use the same right-hand side, so they agree
off-manifold too, as the rod equations of :func:`diffchain.constraints.rod_terms` do.
"""
from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.numpy as jnp

from .constraints import _inv
from .forces import _torque_forces_c, external_forces
from .geometry import _pad_diff, link_L, link_omega_c, links_c, wrap_angle
from .inertia import mass_matrix
from .model import Chain, Control, State
from .batching import one_chain_form
from .recursive import (_kkt_matvec, _pad1, implicit_solve, kkt_system, point_a0,
                        point_multipliers, scan_points)


def _active_mask(chain: Chain, active):
    active = jnp.asarray(active, bool)
    if active.shape != (chain.n,):
        raise ValueError(f"active must have one flag per joint (n = {chain.n}), got shape {active.shape}")
    return active if chain.n > 1 else jnp.zeros_like(active)


def _per_joint(chain: Chain, value, name):
    dt = chain.m.dtype
    arr = jnp.broadcast_to(jnp.asarray(value, dt), (chain.n,)) if jnp.ndim(value) == 0 else jnp.asarray(value, dt)
    if arr.shape != (chain.n,):
        raise ValueError(f"{name} must be a scalar or have shape (n,) = ({chain.n},), got {arr.shape}")
    return arr


def joint_rows(x):
    """The rows of seed eq. (13) as a (n, n, 2) array G with alpha^z_i = sum_j G_ij^T a_j (L_0 = L_n = 0)."""
    L = link_L(x)
    n = x.shape[0]
    k = jnp.arange(n - 1)
    G = jnp.zeros((n, n, 2), x.dtype)
    # link k contributes +alpha_k^o to joint k and -alpha_k^o to joint k+1, alpha_k^o = L_k^T (a_{k+1} - a_k)
    return G.at[k, k + 1].add(L).at[k, k].add(-L).at[k + 1, k + 1].add(-L).at[k + 1, k].add(L)


def active_terms(chain: Chain, state: State, alpha_w, theta_bar=None, stab=None):
    """Right-hand side of the active rows (n,): G a = alpha_eff with G the rows of eq. (13).

    The link angle phi_k obeys phi_k'' = L_k^T (a_{k+1} - a_k) + kappa_k exactly, kappa_k = L_k-dot^T dv_k =
    -2 omega_k eps'_k / rho_k (omega_k the link angular velocity, eps'_k = r_k^T dv_k the stretching rate, rho_k the
    current length); on the constraint manifold eps' = 0 and kappa vanishes (seed eq. 13 is then exact). So
    theta_i'' = alpha_i^z(a) + kappa_i - kappa_{i-1} = target_i, alpha_eff = target - (kappa_i - kappa_{i-1}).

    target = alpha^w, and with both ``theta_bar`` and ``stab`` given the PD drift correction of seed §12.2 eq. (33)
    for a held angle: eps = wrap(theta - theta_bar), eps' = omega^z, target = alpha^w - eps/T^2 - 2 eps'/T (meant for
    alpha^w = 0; otherwise it pulls towards theta_bar on top of alpha^w). theta_i = phi_i - phi_{i-1} with
    phi_0 = phi_n = 0 (joint 1 against the world; joint n is minus the last link's absolute angle).
    """
    alpha_w = _per_joint(chain, alpha_w, "alpha_w")
    dX, dY, _, inv_rho, rx, ry = links_c(state.x[:, 0], state.x[:, 1])  # by components, see links_c
    dU, dV = state.v[1:, 0] - state.v[:-1, 0], state.v[1:, 1] - state.v[:-1, 1]
    omega = link_omega_c(rx, ry, inv_rho, dU, dV)
    eps_dot = rx * dU + ry * dV
    kappa = -2.0 * omega * eps_dot * inv_rho
    target = alpha_w
    if theta_bar is not None and stab is not None:
        theta = _pad_diff(jnp.arctan2(dY, dX))  # the link angles (:func:`diffchain.geometry.link_angles`)
        err = theta - _per_joint(chain, theta_bar, "theta_bar")
        err = wrap_angle(err)
        w = _inv(stab)
        target = target - err * w**2 - 2.0 * _pad_diff(omega) * w
    return target - _pad_diff(kappa)


def active_dynamics_kkt(chain: Chain, state: State, control: Control, active, alpha_w, theta_bar=None, stab=None):
    """Accelerations a (n,2), rod tensions phi (n-1,) and constraint torques tau_w (n,) from the dense KKT system.

    ``[[M, J^T], [J, 0]] [a; -lambda] = [F^e; gamma]`` (seed 001 eq. 8.36) with J = rods, point constraints
    (:func:`diffchain.solvers.constraint_jacobian`) and one row of eq. (13) per active joint, right-hand side
    :func:`active_terms`. M a = F^e + J^T lambda, and the generalized force of an active row's multiplier is exactly
    the point forces of a joint torque (seed §4.2, Fig. 1): tau_w = lambda of that row. O(n^3); rigid links allowed.
    """
    from .solvers import constraint_jacobian  # lazy: lets solvers.py import this module without a cycle

    n = chain.n
    active = _active_mask(chain, active)
    J, gamma, on = constraint_jacobian(chain, state, control.a_w, stab)
    G = joint_rows(state.x).reshape(n, 2 * n)
    rhs = active_terms(chain, state, alpha_w, theta_bar, stab)
    J = jnp.concatenate([J, G * active[:, None]])
    gamma = jnp.concatenate([gamma, jnp.where(active, rhs, 0.0)])
    on = jnp.concatenate([on, active])
    K = jnp.block([[mass_matrix(chain), J.T], [J, jnp.diag(jnp.where(on, 0.0, 1.0).astype(J.dtype))]])
    sol = jnp.linalg.solve(K, jnp.concatenate([external_forces(chain, state, control).reshape(-1), gamma]))
    a, lam = sol[: 2 * n].reshape(n, 2), -sol[2 * n:]
    return a, lam[: n - 1], lam[-n:]


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


def active_backward(m, r, L, e, Fe, P, a0, act_next, alpha_next, sigma, ell, unroll=False):
    """Seed §9 step 1 / §10 / §11: the coefficient groups for i = n..1, in projector form.

    Each point i answers the force F = F_i^d and torque tau = tau_i^w arriving from link i-1 with (seed §9)
        a_i = A_i F + b^w_i tau + b_i,            alpha^o_i = p_i^T F + q^w_i tau + q_i,
        F_{i+1}^d = C_i F + d^w_i tau + d_i,      tau^w_{i+1} = g_i^T F + h^w_i tau + h_i.
    F_{i+1}^d = r_i phi_i + L_i (tau - tau^w_{i+1}); the point constraint is a_i = P_i F_i / m_i + a0_i (free P = I,
    slider I - s s^T, guided 0 with a0 = a^w, as in :mod:`diffchain.recursive`). The link equation and, if joint i+1
    is active, the alpha_{i+1}^w equation give 0 = K [phi_i; tau^w_{i+1}] + [k2^T F + k3 tau + k4; k7^T F + k8 tau + k9]
    with (eqs. 14–23 for P = I, eqs. 24–31 for P = 0; the P terms are the only generalisation)
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

    By components, as :func:`diffchain.recursive.abcd_sweeps_c`: every per-point quantity is an (n,) array, a vector
    v the pair (v_x, v_y), a matrix M the four (M11, M12, M21, M22) (A and C are not symmetric term by term), the
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
        # degenerate rules (seed §11.1 "sytuacje wyjątkowe", §11.2, §12.2), applied by _solve
        a_, c_ = -k0, k6 * ell**2
        zero1 = a_ <= tol * sigma
        zero2 = ~act | (c_ <= tol * sigma)
        parallel = ~zero1 & ~zero2 & (k5 * k1 - k0 * k6 <= tol * a_ * k6)
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
    (_, _, system1), (groups, locks, systems) = scan_points(step, init, inputs, reverse=True, unroll=unroll)
    return groups, locks, systems, system1


def active_forward(locks, systems, system1, m, r, L, Fe, P, a0, tau1, unroll=False):
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
    _, out = scan_points(step, carry, jax.tree.map(lambda x: x[1:], inputs), unroll=unroll)
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


def _scales(chain: Chain):
    """sigma = max 1/m and ell = min l (1 for one point): the scales of the lock test (:func:`root_torque`)."""
    return jnp.max(1.0 / chain.m), jnp.min(chain.l) if chain.n > 1 else jnp.ones((), chain.m.dtype)


def active_dynamics_recursive(chain: Chain, state: State, control: Control, active, alpha_w, theta_bar=None,
                              stab=None):
    """Accelerations a (n,2), rod tensions phi (n-1,) and constraint torques tau_w (n,) by the O(n) recursion of seed
    000 Part II (§9–§11, :func:`active_backward`, :func:`active_forward`, :func:`root_torque`).

    The recursion solves the symmetric KKT system of :func:`active_dynamics_kkt` (:func:`_active_matvec`) for any
    right-hand side, so it is differentiated implicitly like the Part I recursion (:func:`active_solve`): one more
    recursion with the tangent or cotangent plus the adjoint of the elementwise terms, never a derivative through
    the sweeps themselves.

    Point masses only (massless rods): with rigid links the coupling block M12 would enter every k like the Part I
    generalisation :func:`diffchain.recursive.abcd_backward_inertial` (a_i no longer equals P F_i / m_i).
    """
    if chain.has_links:
        raise NotImplementedError("active_dynamics_recursive: rigid links with distributed mass are not supported by "
                                  "the Part II recursion; use active_dynamics_kkt")
    active = _active_mask(chain, active)
    op, b = kkt_system(chain, state, control, stab)
    _, _, _, inv_rho, _, _ = links_c(state.x[:, 0], state.x[:, 1])
    sigma, ell = _scales(chain)
    alpha = active_terms(chain, state, alpha_w, theta_bar, stab)
    ax, ay, yr, _, _, yt = active_solve(op + (inv_rho, active, sigma, ell), b + (jnp.where(active, alpha, 0.0),))
    return jnp.stack([ax, ay], -1), -yr, jnp.where(active, -yt, 0.0)


def one_joint_dynamics(chain: Chain, state: State, control: Control, active, alpha_w, theta_bar=None, stab=None,
                       part_one=None):
    """(a, phi, tau_w) as :func:`active_dynamics_recursive` gives them when ``active`` holds one joint j alone, by
    superposition of two Part I solves (``part_one``: :func:`diffchain.recursive.recursive_dynamics` by default).

    The constraint torque tau^w_j acts on the points as a joint torque (seed §4.2), so the accelerations and tensions
    are affine in it: a = a0 + tau a1, phi = phi0 + tau phi1, with (a0, phi0) Part I's for the given forces and
    (a1, phi1) its response to a unit torque at joint j alone (no gravity, velocity, PD or guided acceleration
    terms). Eq. (13) for joint j, alpha^z_j(a) = rhs_j (:func:`active_terms`), gives
    tau = (rhs_j - alpha^z_j(a0)) / alpha^z_j(a1). alpha^z_j(a1) is joint j's compliance; where it is at round-off
    level the joint cannot turn (seed §12.2) and tau = 0, the rule of :func:`root_torque`. The two solves run as one
    batch of two, which costs little more than one Part I call and less than the Part II recursion."""
    if part_one is None:
        from .recursive import recursive_dynamics as part_one
    dtype = state.x.dtype
    active = _active_mask(chain, active)
    e = active.astype(dtype)
    unit = Control(e, jnp.zeros_like(control.F), jnp.zeros_like(control.a_w))
    stab_unit = None if stab is None else jnp.full_like(jnp.asarray(stab, dtype), jnp.inf)  # 1/stab = 0: no PD terms

    def solve(g, v, u, s):
        return part_one(eqx.tree_at(lambda c: c.g, chain, g), State(state.x, v, state.t), u, s)

    def pair(p, q):  # the two solves' inputs stacked
        return jax.tree.map(lambda y, z: jnp.stack([jnp.asarray(y, dtype), jnp.asarray(z, dtype)]), p, q)

    a, phi = jax.vmap(solve)(pair(chain.g, 0.0), pair(state.v, jnp.zeros_like(state.v)), pair(control, unit),
                             None if stab is None else pair(stab, stab_unit))
    _, _, _, inv_rho, rx, ry = links_c(state.x[:, 0], state.x[:, 1])
    alpha = jax.vmap(lambda a: _joint_alpha(rx, ry, inv_rho, a[:, 0], a[:, 1]))(a)
    at_j = lambda q: jnp.sum(jnp.where(active, q, 0.0))  # noqa: E731
    rhs = at_j(active_terms(chain, state, alpha_w, theta_bar, stab))
    tau = root_torque(jnp.any(active), rhs, None, at_j(alpha[1]), at_j(alpha[0]), *_scales(chain))
    return a[0] + tau * a[1], phi[0] + tau * phi[1], tau * e


def _active_swept(op, b, sweeps=None):
    """The part of K^-1 b (:func:`_active_matvec`) that the Part II sweeps give: a_x, a_y, the rod multipliers
    -phi and the active rows' multipliers -tau^w (rows switched off: y = b). ``sweeps``: :func:`part_two_sweeps`
    (default) or :func:`_part_two_sweeps`."""
    (m, rx, ry, on), P, (inv_rho, act, sigma, ell) = op[:4], op[8:11], op[11:]
    (bx, by, br), bt = b[:3], b[5]
    r, L = (_pad1(rx), _pad1(ry)), (_pad1(-ry * inv_rho), _pad1(rx * inv_rho))  # L = r^* / rho (link_L); r_n = L_n = 0
    sweeps = sweeps or part_two_sweeps
    (ax, ay), tau, phi = sweeps(m, r, L, _pad1(-br), (bx, by), P, point_a0(op, b), act, bt, sigma, ell)
    return ax, ay, jnp.where(on, -phi[:-1], br), jnp.where(act, -tau, bt)


def _active_complete(op, b, swept):
    """The whole solution from the swept part: the point multipliers from the residual of Newton's law, in which
    the active rows' multipliers act as joint torques (:func:`diffchain.forces.torque_forces`)."""
    ax, ay, yr, yt = swept
    rx, ry, inv_rho, act = op[1], op[2], op[11], op[12]
    y1, y2 = point_multipliers(op, b, ax, ay, yr, *_torque_forces_c(rx, ry, inv_rho, jnp.where(act, yt, 0.0)))
    return ax, ay, yr, y1, y2, yt


def _active_matvec(op, z):
    """K z for the massless KKT operator (:func:`diffchain.recursive._kkt_matvec`) with one row of eq. (13) per
    active joint, op = (Part I operator, 1/rho, active, sigma, ell), z = (a_x, a_y, y_rod, y1, y2, y_t): G a on the
    active rows (a unit diagonal on the others) and G^T y_t in Newton's rows -- the point forces of the joint
    torques y_t (:func:`diffchain.forces.torque_forces`), which makes K symmetric."""
    rx, ry, inv_rho, act = op[1], op[2], op[11], op[12]
    ax, ay, yt = z[0], z[1], z[5]
    top_x, top_y, rod, row1, row2 = _kkt_matvec(op, z[:5])
    fx, fy = _torque_forces_c(rx, ry, inv_rho, jnp.where(act, yt, 0.0))
    alpha = _joint_alpha(rx, ry, inv_rho, ax, ay)
    return top_x + fx, top_y + fy, rod, row1, row2, jnp.where(act, alpha, yt)


def _part_two_sweeps(m, r, L, e, Fe, P, a0, active, alpha, sigma, ell, unroll=False):
    """:func:`active_backward`, :func:`root_torque`, :func:`active_forward`: a = (a_x, a_y), tau^w, phi."""
    groups, locks, systems, system1 = active_backward(m, r, L, e, Fe, P, a0, _pad1(active[1:]),
                                                      _pad1(alpha[1:]), sigma, ell, unroll)
    _, _, _, (p_x, p_y), qw, q = groups
    tau1 = root_torque(active[0], alpha[0], (p_x[0], p_y[0]), qw[0], q[0], sigma, ell)
    return active_forward(locks, systems, system1, m, r, L, Fe, P, a0, tau1, unroll)


def _small_sweeps(m, r, L, e, Fe, P, a0, active, alpha, sigma, ell, joints=True, forces=False):
    """The outputs of :func:`_part_two_sweeps` in the lambda-first form, written out in scalars for a short chain
    (not in the seed; the same KKT system, so the same accelerations, torques and tensions to round-off).

    With the point constraints a_i = W_i G_i + a0_i (W_i = P_i / m_i) and the forces G_i = F^e_i + sum_q y_q c_{q,i}
    of the multipliers y = (the rod tensions phi_k, the held joints' torques tau_j) -- rod k pulls point k by
    -r_k phi_k and point k+1 by r_k phi_k; joint j's torque acts as :func:`diffchain.forces.torque_forces` --, the
    rows c_q^T a = h_q (rods: r_k^T (a_{k+1} - a_k) = -e_k, held joints: eq. (13) = alpha_j) ask
        S y = h - c^T u,    S_qp = sum_i c_{q,i}^T W_i c_{p,i},    u_i = W_i F^e_i + a0_i,
    S symmetric positive semi-definite, with at most 2n - 1 rows, each touching two or three points. It is
    eliminated in the seed's order (from the terminal end: rod i, then joint i+1, for i = n-1..1, joint 1 last) with
    the seed's rule for a vanishing pivot: that row's multiplier is 0 -- a rod between two guided points, a joint held
    by the other constraints, one row too many of a redundant set (seed §12.2 "stiffness"); and a joint whose
    compliance is at round-off level is not used at all (the test of :func:`root_torque`). Every value that later
    rows read is a quotient (the pivot rows divided by their pivots), which XLA CPU computes once instead of in each
    consumer (:mod:`diffchain.lean`). ``joints`` (known at trace time): True, every joint's row (masked by ``active``);
    False, the rods' rows alone; or a tuple of the joints whose rows are written, the others known not to be held.
    A joint that is not held has a dropped row (multiplier 0, its entries in the later rows exactly 0), so leaving
    its row out changes no other multiplier, and saves its pivot."""
    n = m.shape[0]
    joints = tuple(range(n)) if joints is True else tuple(joints or ())
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
    G = [[Fx[i], Fy[i]] for i in range(n)]
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
    out = (ax, ay), jnp.stack(tau), jnp.stack(phi)
    return out + (G,) if forces else out  # forces: also G (the points' forces but the point constraints'), scalars


SMALL_MAX = 8  # single chains of up to this many points take :func:`_small_sweeps` (above, the scans' compile time)


def _small_active_terms(state: State, active, alpha_w, theta_bar, stab, links, joints):
    """:func:`active_terms` (masked by ``active``) as a list of scalars, one per joint, so that each joint's term
    fuses into the rows that read it instead of the (n,) arrays' concatenations (``links``: :func:`links_c`). Only
    the ``joints`` (a tuple, known at trace time) are computed, the others are 0: a link angle costs a kernel."""
    n = active.shape[0]
    dX, dY, _, inv_rho, rx, ry = links
    U, V = state.v[:, 0], state.v[:, 1]
    omega, kappa, phi = [], [], []
    for k in range(n - 1):
        dU, dV = U[k + 1] - U[k], V[k + 1] - V[k]
        omega.append(link_omega_c(rx[k], ry[k], inv_rho[k], dU, dV))
        kappa.append(-2.0 * omega[k] * (rx[k] * dU + ry[k] * dV) * inv_rho[k])
        used = k in joints or k + 1 in joints  # link k enters joints k and k + 1
        phi.append(jnp.arctan2(dY[k], dX[k]) if used and theta_bar is not None and stab is not None else None)

    def diff(f, j):  # f_j - f_{j-1}, f_{-1} = f_{n-1} = 0 (:func:`diffchain.geometry._pad_diff`)
        return (f[j] if j < n - 1 else 0.0) - (f[j - 1] if j > 0 else 0.0)

    alpha = []
    for j in range(n):
        if j not in joints:
            alpha.append(jnp.zeros((), alpha_w.dtype))
            continue
        target = alpha_w[j]
        if theta_bar is not None and stab is not None:
            w = _inv(stab)
            target = target - wrap_angle(diff(phi, j) - theta_bar[j]) * w**2 - 2.0 * diff(omega, j) * w
        alpha.append(jnp.where(active[j], target - diff(kappa, j), 0.0))
    return alpha


def small_dynamics(chain: Chain, state: State, control: Control, active=None, alpha_w=None, theta_bar=None, stab=None,
                   reactions=False, joints=True):
    """(a, phi, tau_w) of :func:`active_dynamics_recursive` by :func:`_small_sweeps` alone, for one short chain
    outside derivatives (no implicit derivative rule; point masses only). ``active`` None: no joint is held (the
    rods' rows alone, the Part I accelerations; tau_w = 0). ``joints``: a tuple of the only joints that ``active``
    may hold (known at trace time: e.g. one joint held, 3 rows of 5 at n = 3), or True. ``reactions``: also
    R = m a - G (n, 2), G the forces on each point other than the point constraints' (external, rods, joint
    torques): the point constraints' force."""
    n, dt = chain.n, chain.m.dtype
    joints = (tuple(range(n)) if joints is True else tuple(joints)) if active is not None else ()
    active = _active_mask(chain, active) if joints else jnp.zeros((n,), bool)
    op, b = kkt_system(chain, state, control, stab)
    (m, rx, ry, on), P = op[:4], op[8:11]
    bx, by, br = b[:3]
    lk = links_c(state.x[:, 0], state.x[:, 1])
    inv_rho = lk[3]
    r, L = (rx, ry), (-ry * inv_rho, rx * inv_rho)  # per rod: _small_sweeps reads no terminal rod
    inv_m = [1.0 / chain.m[i] for i in range(n)]  # scalars, so that the scales fuse into their consumers
    sigma = functools.reduce(jnp.maximum, inv_m)
    ell = functools.reduce(jnp.minimum, [chain.l[k] for k in range(n - 1)])
    if joints:
        theta_bar = None if theta_bar is None else _per_joint(chain, theta_bar, "theta_bar")
        alpha = _small_active_terms(state, active, _per_joint(chain, alpha_w, "alpha_w"), theta_bar, stab, lk, joints)
    else:
        alpha = [jnp.zeros((), dt)] * n
    (ax, ay), tau, phi, G = _small_sweeps(m, r, L, -br, (bx, by), P, point_a0(op, b), active, alpha, sigma, ell,
                                          joints, forces=True)
    out = jnp.stack([ax, ay], -1), jnp.where(on, phi[:-1], -br), jnp.where(active, tau, 0.0)
    if reactions:
        R = jnp.stack([jnp.stack([m[i] * ax[i] - G[i][0], m[i] * ay[i] - G[i][1]]) for i in range(n)])
        return out + (R,)
    return out


def _one_chain_part_two(*args):
    n = args[0].shape[0]
    return _small_sweeps(*args) if 1 < n <= SMALL_MAX else _part_two_sweeps(*args, unroll=n == 1)


part_two_sweeps = one_chain_form(_one_chain_part_two, _part_two_sweeps)
part_two_sweeps.__doc__ = (
    ":func:`_part_two_sweeps` evaluated on one chain: by :func:`_small_sweeps` up to ``SMALL_MAX`` points (written "
    "out in scalars, XLA fuses a short chain's solve into few kernels), the scans beyond; the scans under ``vmap`` "
    "and in derivatives (:func:`diffchain.batching.one_chain_form`), where writing a chain out is slower.")


active_solve = implicit_solve(_active_swept, _active_complete, _active_matvec,
                              lambda op, b: _active_swept(op, b, _part_two_sweeps))
active_solve.__doc__ = (
    "z = (a_x, a_y, y_rod, y1, y2, y_t) = K(op)^-1 b for the operator of :func:`_active_matvec` by the Part II "
    "recursion (:func:`part_two_sweeps`), with implicit derivatives (:func:`diffchain.recursive.implicit_solve`): "
    "derivatives never go through the sweeps, and their solves take the scans (:func:`_part_two_sweeps`), not the "
    "written-out one-chain forms: as fast there, and a smaller program to trace and compile.")


class ActiveSolver(eqx.Module):
    """Forward dynamics with active joints: (chain, state, control, active, alpha_w, theta_bar, stab) ->
    (a, phi, tau_w). ``active`` (n,) bool, ``alpha_w`` (n,) prescribed alpha^z, ``theta_bar`` (n,) held angles for the
    PD correction (used with ``stab``)."""

    def __call__(self, chain, state, control, active, alpha_w, theta_bar=None, stab=None):
        raise NotImplementedError

    def part_one(self, chain, state, control, stab=None):
        """The same solver without active joints (seed Part I): (a, phi)."""
        raise NotImplementedError


class ActiveKKT(ActiveSolver):
    """Dense KKT system with the active rows (:func:`active_dynamics_kkt`)."""

    def __call__(self, chain, state, control, active, alpha_w, theta_bar=None, stab=None):
        return active_dynamics_kkt(chain, state, control, active, alpha_w, theta_bar, stab)

    def part_one(self, chain, state, control, stab=None):
        from .solvers import kkt_dynamics

        return kkt_dynamics(chain, state, control, stab)


class ActiveRecursive(ActiveSolver):
    """O(n) recursion of seed 000 Part II (:func:`active_dynamics_recursive`)."""

    def __call__(self, chain, state, control, active, alpha_w, theta_bar=None, stab=None):
        return active_dynamics_recursive(chain, state, control, active, alpha_w, theta_bar, stab)

    def part_one(self, chain, state, control, stab=None):
        from .recursive import recursive_dynamics

        return recursive_dynamics(chain, state, control, stab)
