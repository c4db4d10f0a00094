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

import equinox as eqx
import jax
import jax.numpy as jnp

from .constraints import _inv, point_projector, rod_terms
from .forces import external_forces
from .geometry import _pad_diff, link_angles, link_L, links, perp
from .inertia import mass_matrix
from .model import Chain, Control, State


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
    d, rho, r = links(state.x)
    dv = state.v[1:] - state.v[:-1]
    rho_safe = jnp.where(rho > 0, rho, 1.0)
    omega = jnp.sum(perp(d) * dv, -1) / rho_safe**2
    eps_dot = jnp.sum(r * dv, -1)
    kappa = -2.0 * omega * eps_dot / rho_safe
    target = alpha_w
    if theta_bar is not None and stab is not None:
        theta = _pad_diff(link_angles(state.x))
        err = theta - _per_joint(chain, theta_bar, "theta_bar")
        err = jnp.arctan2(jnp.sin(err), jnp.cos(err))
        w = _inv(stab)
        target = target - err * w**2 - 2.0 * _pad_diff(omega) * w
    return target - _pad_diff(kappa)


def active_dynamics_kkt(chain: Chain, state: State, control: Control, active, alpha_w, theta_bar=None, stab=None):
    """Accelerations a (n,2), rod tensions phi (n-1,) and constraint torques tau_w (n,) from the dense KKT system.

    [[M, J^T], [J, 0]] [a; -lambda] = [F^e; gamma] (seed 001 eq. 8.36) with J = rods, point constraints
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
    passes (1e-10 relative seen on 64-point chains), and snapping a legitimately tiny compliance costs only
    tol * |F| -- the same order as the round-off it removes."""
    return jnp.sqrt(jnp.finfo(dtype).eps)


def active_backward(m, r, L, e, Fe, P, a0, act_next, alpha_next, sigma, ell):
    """Seed §9 step 1 / §10 / §11: the twelve coefficient groups for i = n..1, in projector form.

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
    Then k11..k17 and
        g = k13, h^w = k15, h = k17;  C = r k12^T - L k13^T,  d^w = r k14 + L - L k15,  d = r k16 - L k17,
        A = P (I - C)/m,  b^w = -P d^w/m,  b = P (F^e - d)/m + a0,
        p = (L^T A' C + L^T b'^w g^T - L^T A)^T,  q^w = L^T A' d^w + L^T b'^w h^w - L^T b^w,
        q = L^T A' d + L^T b'^w h + L^T b' - L^T b.
    Returns the per-point groups and (k12, k14, k16) for the rod tensions phi_i = k12^T F + k14 tau + k16.
    """
    dt = Fe.dtype
    tol, tol_lock = _tolerance(dt), _lock_tolerance(dt)
    I2 = jnp.eye(2, dtype=dt)

    def step(carry, inp):
        A1, bw1, b1, p1, qw1, q1 = carry  # the groups of point i+1
        m_i, r_i, L_i, e_i, Fe_i, P_i, a0_i, act, alpha = inp
        Pr, PL, PF = P_i @ r_i, P_i @ L_i, P_i @ Fe_i
        A1r, A1L = A1 @ r_i, A1 @ L_i
        k0 = -(r_i @ Pr) / m_i - r_i @ A1r
        k1 = (r_i @ PL) / m_i + r_i @ A1L - r_i @ bw1
        k2 = Pr / m_i
        k3 = -(r_i @ PL) / m_i - r_i @ A1L
        k4 = (r_i @ PF) / m_i + r_i @ a0_i - r_i @ b1 - e_i
        k5 = p1 @ r_i - L_i @ A1r - (L_i @ Pr) / m_i
        k6 = -p1 @ L_i + qw1 + L_i @ A1L - L_i @ bw1 + (L_i @ PL) / m_i
        k7 = PL / m_i
        k8 = p1 @ L_i - L_i @ A1L - (L_i @ PL) / m_i
        k9 = q1 - L_i @ b1 + (L_i @ PF) / m_i + L_i @ a0_i - alpha
        # degenerate rules (seed §11.1 "sytuacje wyjątkowe", §11.2, §12.2)
        a_, c_ = -k0, k6 * ell**2
        zero1 = a_ <= tol * sigma
        zero2 = ~act | (c_ <= tol * sigma)
        parallel = ~zero1 & ~zero2 & (k5 * k1 - k0 * k6 <= tol * a_ * k6)
        drop1 = zero1 | (parallel & (a_ < c_))
        drop2 = zero2 | (parallel & (a_ >= c_))
        k0, k1, k3, k4 = (jnp.where(drop1, v, k) for v, k in ((1.0, k0), (0.0, k1), (0.0, k3), (0.0, k4)))
        k2 = jnp.where(drop1, 0.0, k2)
        k5, k6, k8, k9 = (jnp.where(drop2, v, k) for v, k in ((0.0, k5), (1.0, k6), (0.0, k8), (0.0, k9)))
        k7 = jnp.where(drop2, 0.0, k7)
        k11 = k5 * k1 - k0 * k6
        ok = k11 != 0
        inv = jnp.where(ok, 1.0 / jnp.where(ok, k11, 1.0), 0.0)
        k12 = (k2 * k6 - k7 * k1) * inv
        k13 = (k7 * k0 - k2 * k5) * inv
        k14 = (k6 * k3 - k1 * k8) * inv
        k15 = (k0 * k8 - k5 * k3) * inv
        k16 = (k4 * k6 - k1 * k9) * inv
        k17 = (k0 * k9 - k5 * k4) * inv
        g, hw, h = k13, k15, k17
        C = jnp.outer(r_i, k12) - jnp.outer(L_i, k13)
        dw = r_i * k14 + L_i - L_i * k15
        d = r_i * k16 - L_i * k17
        A = P_i @ (I2 - C) / m_i
        bw = -(P_i @ dw) / m_i
        b = P_i @ (Fe_i - d) / m_i + a0_i
        LA1, Lbw1 = L_i @ A1, L_i @ bw1
        p = LA1 @ C + Lbw1 * g - L_i @ A
        qw = LA1 @ dw + Lbw1 * hw - L_i @ bw
        q = LA1 @ d + Lbw1 * h + L_i @ b1 - L_i @ b
        # seed §12.2 stiffness: [[A, b^w], [p^T, q^w]] is the symmetric PSD compliance of the tail to (F, tau) (so
        # b^w = p). A point (A ~ 0) or link (q^w ~ 0) locked by the tail gets exact zeros: it then acts as guided,
        # its round-off is not multiplied by the (possibly large) F_i^d, and the next pivots see an exact 0.
        small = lambda x, s: jnp.max(jnp.abs(x)) * s <= tol_lock * sigma  # noqa: E731
        point_locked = small(A, 1.0) & small(bw, ell) & small(p, ell)
        link_locked = small(qw, ell**2) & small(bw, ell) & small(p, ell)
        A = jnp.where(point_locked, 0.0, A)
        bw, p = (jnp.where(point_locked | link_locked, 0.0, x) for x in (bw, p))
        qw = jnp.where(link_locked, 0.0, qw)
        return (A, bw, b, p, qw, q), ((A, bw, b, C, dw, d, g, hw, h, p, qw, q), (k12, k14, k16))

    z2, z = jnp.zeros((2,), dt), jnp.zeros((), dt)
    init = (jnp.zeros((2, 2), dt), z2, z2, z2, z, z)
    _, out = jax.lax.scan(step, init, (m, r, L, e, Fe, P, a0, act_next, alpha_next), reverse=True)
    return out


def active_forward(groups, tensions, tau1):
    """Seed §9 steps 2–3: F_1^d = 0, tau_1^w = tau1; F_{i+1}^d = f_i, tau_{i+1}^w = g_i; a_i = A_i F + b^w_i tau + b_i.

    Returns a (n,2), the constraint torques tau^w (n,) and the rod tensions phi (n,) (the last one is 0)."""
    A, bw, b, C, dw, d, g, hw, h, _, _, _ = groups

    def step(carry, c):
        F, tau = carry
        A_i, bw_i, b_i, C_i, dw_i, d_i, g_i, hw_i, h_i, k12, k14, k16 = c
        out = (A_i @ F + bw_i * tau + b_i, tau, k12 @ F + k14 * tau + k16)
        return (C_i @ F + dw_i * tau + d_i, g_i @ F + hw_i * tau + h_i), out

    init = (jnp.zeros_like(b[0]), tau1)
    _, (a, tau, phi) = jax.lax.scan(step, init, (A, bw, b, C, dw, d, g, hw, h) + tuple(tensions))
    return a, tau, phi


def root_torque(active1, alpha1, p1, qw1, q1, sigma, ell):
    """tau_1^w for an active joint 1 (the seed starts with tau_1^w = 0, having no joint against the world).

    With F_1^d = 0, alpha_1^z = alpha_1^o = q^w_1 tau + q_1 = alpha_1^w, so tau_1^w = (alpha_1^w - q_1)/q^w_1; if
    link 1 cannot rotate at all (q^w_1 at round-off level, e.g. points 1 and 2 guided) tau_1^w = 0 (seed §12.2)."""
    del p1
    ok = active1 & (qw1 * ell**2 > _lock_tolerance(qw1.dtype) * sigma)
    return jnp.where(ok, (alpha1 - q1) / jnp.where(ok, qw1, 1.0), 0.0)


def active_dynamics_recursive(chain: Chain, state: State, control: Control, active, alpha_w, theta_bar=None,
                              stab=None):
    """Accelerations a (n,2), rod tensions phi (n-1,) and constraint torques tau_w (n,) by the O(n) recursion of seed
    000 Part II (§9–§11, :func:`active_backward`, :func:`active_forward`, :func:`root_torque`).

    Point masses only (massless rods): with rigid links the coupling block M12 would enter every k like the
    Part I generalisation :func:`diffchain.recursive.abcd_backward_inertial` (a_i no longer equals P F_i / m_i).
    """
    if chain.has_links:
        raise NotImplementedError("active_dynamics_recursive: rigid links with distributed mass are not supported by "
                                  "the Part II recursion; use active_dynamics_kkt")
    n, dt = chain.n, chain.m.dtype
    active = _active_mask(chain, active)
    r, e = rod_terms(chain, state, stab)
    P, a0 = point_projector(chain, state, control.a_w, stab)
    Fe = external_forces(chain, state, control)
    alpha = active_terms(chain, state, alpha_w, theta_bar, stab)
    pad = lambda x: jnp.concatenate([x, jnp.zeros((1,) + x.shape[1:], x.dtype)])  # noqa: E731  terminal: r_n = 0
    L = link_L(state.x)
    sigma = jnp.max(1.0 / chain.m)
    ell = jnp.min(chain.l) if n > 1 else jnp.ones((), dt)
    act_next = jnp.concatenate([active[1:], jnp.zeros((1,), bool)])
    alpha_next = pad(alpha[1:])
    groups, tensions = active_backward(chain.m, pad(r), pad(L), pad(e), Fe, P, a0, act_next, alpha_next, sigma, ell)
    p, qw, q = groups[9:]
    tau1 = root_torque(active[0], alpha[0], p[0], qw[0], q[0], sigma, ell)
    a, tau, phi = active_forward(groups, tensions, tau1)
    return a, phi[:-1], jnp.where(active, tau, 0.0)


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
