"""The O(n) recursive forward dynamics of seed 000 Part I (§3, §5, §6), as two ``lax.scan`` sweeps.

Every point i answers a force F = F_i^d arriving through rod i-1 with two affine response functions (eqs. 1–2)
    a_i = A_i F + b_i,        F_{i+1}^d = C_i F + d_i,
computed from i = n down to 1 out of A_{i+1}, b_{i+1}. The seed derives them separately for an ordinary joint (§5),
a guided joint (§6.1), a terminal joint (§6.2), a joint on a line (§6.3) and a terminal joint on a line (§6.4). All five
are one formula once the point constraint is written as a_i = P_i a + a0_i (P = I free, I - s s^T on a line, 0 guided;
a0 = a^w guided, 0 otherwise) and the terminal joint is a rod of direction r_n = 0:

    D_i  = r_i^T P_i r_i + m_i r_i^T A_{i+1} r_i              (seed: 1 + m r^T A r; 1 - (s^T r)^2 + m r^T A r; m r^T A
    r) mu_i = r_i^T a0_i - r_i^T b_{i+1} - e_i
    C_i  = r_i r_i^T P_i / D_i                                 (eq. 6 / §6.3)
    d_i  = C_i F_i^e + m_i mu_i r_i / D_i                      (eq. 7 / §6.1 / §6.3)
    A_i  = P_i / m_i - P_i r_i r_i^T P_i / (m_i D_i)           (eq. 8 / §6.3)
    b_i  = A_i F_i^e + a0_i - mu_i P_i r_i / D_i               (eq. 9 / §6.1 / §6.3)

The rod force is F_{i+1}^d = r_i phi_i (phi_i = rod tension). Rigid links with distributed mass generalise the step
(:func:`abcd_backward_inertial`); the seed's closed form above stays the special case for massless rods. Where D_i
vanishes -- a terminal joint, or a guided joint whose successor cannot move along r_i (guided too, §6.1 "next guided or
terminal") -- the seed sets f_i = 0: the prescribed accelerations win over the rod length. We do the same, with a
relative threshold and double-``where`` so the masked branch has finite gradients.
"""
from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp

from .._constraints.chain import _slider_rhs, point_projector_c, rod_terms_c
from .._model.forces import external_forces_c
from .._model.geometry import _pad_diff
from .._model.inertia import chain_link_blocks, link_gravity, point_mass_blocks
from .._model.model import Model
from .._state import Control, State
from .._xla.loops import SCAN_BLOCK, scan_points
from .implicit import implicit_solve


def abcd_backward(m, r, e, Fe, P, a0):
    """Seed §3 step 1: A_i, b_i, C_i, d_i for i = n..1 (eqs. 6–9 and §6 in projector form, see module docstring).

    The readable reference, as the seed writes it (tests check it against eqs. 6–9 literally); simulations run the
    same sweep by components (:func:`abcd_sweeps_c`), which the tests check against this one and the KKT form.

    Per-point inputs m (n,), r (n,2) with r_n = 0, e (n,) with e_n = 0, F^e (n,2), P (n,2,2), a0 (n,2).
    """
    tol = 64 * jnp.finfo(Fe.dtype).eps

    def step(carry, inp):
        A1, b1 = carry  # A_{i+1}, b_{i+1}
        m_i, r_i, e_i, Fe_i, P_i, a0_i = inp
        Pr = P_i @ r_i
        D = r_i @ Pr + m_i * (r_i @ A1 @ r_i)
        scale = r_i @ r_i + m_i * jnp.trace(A1)
        ok = D > tol * scale
        inv_D = jnp.where(ok, 1.0 / jnp.where(ok, D, 1.0), 0.0)
        mu = r_i @ a0_i - r_i @ b1 - e_i
        C = inv_D * jnp.outer(r_i, Pr)
        d = C @ Fe_i + (inv_D * m_i * mu) * r_i
        A = P_i / m_i - inv_D * jnp.outer(Pr, Pr) / m_i
        b = A @ Fe_i + a0_i - (inv_D * mu) * Pr
        return (A, b), (A, b, C, d)

    init = (jnp.zeros((2, 2), Fe.dtype), jnp.zeros((2,), Fe.dtype))
    _, (A, b, C, d) = jax.lax.scan(step, init, (m, r, e, Fe, P, a0), reverse=True)
    return A, b, C, d


def _inv2(A):
    """The inverse of a 2 x 2 matrix, written out (no LAPACK call under ``vmap``: :mod:`diffchain._xla.linalg`)."""
    (a, b), (c, d) = A
    return jnp.array([[d, -b], [-c, a]]) / (a * d - b * c)


def abcd_backward_inertial(B, r, e, Fe, P, a0, M12):
    """The A, b, C, d sweep for links with distributed mass (seed 003 natural coordinates, :mod:`diffchain._model.inertia`;
    reduces to seed 000 eqs. 6–9 when the links are massless).

    The chain's mass matrix is block-tridiagonal (:mod:`diffchain._model.inertia`): diagonal blocks B_i = m_i I + M22
    of link i-1 + M11 of link i, and M12 of link i couples a_i and a_{i+1}. F is now everything link i-1 does to point i
    besides the inertia already in B_i: the rod tension and the coupling -M21 a_{i-1}; so F' = r_i phi_i - M21 a_i.
    With a_{i+1} = A_{i+1} F' + b_{i+1}, eliminating F' and a_{i+1} leaves, per point, a 2x2 problem:
        N = B_i - M12 A_{i+1} M21,    rho = (I + M12 A_{i+1}) r_i,    K = P (P N P + I - P)^-1 P
        D = rho^T K rho + r^T A_{i+1} r,    phi = k^T F + phi0 with k = K rho / D,
        phi0 = [rho^T K (F^e - M12 b_{i+1} - N a0) + rho^T a0 - e - r^T b_{i+1}] / D
        A_i = K - K rho rho^T K / D,         b_i = K (F^e - M12 b_{i+1} - N a0 - rho phi0) + a0
        C_i = r k^T - M21 A_i,               d_i = r phi0 - M21 b_i
    With massless links N = m I, rho = r, K = P/m and D = (seed's D)/m: the seed's formulas. A massless point is fine
    as long as a link gives it mass (B_i > 0). Returns A, b, C, d and (k, phi0) for the rod tensions.
    """
    tol = 64 * jnp.finfo(Fe.dtype).eps
    I2 = jnp.eye(2, dtype=Fe.dtype)

    def step(carry, inp):
        A1, b1 = carry
        B_i, r_i, e_i, Fe_i, P_i, a0_i, M12_i = inp
        M21_i = M12_i.T
        N = B_i - M12_i @ A1 @ M21_i
        rho = r_i + M12_i @ (A1 @ r_i)
        K = P_i @ _inv2(P_i @ N @ P_i + I2 - P_i) @ P_i
        f0 = Fe_i - M12_i @ b1 - N @ a0_i
        Krho = K @ rho
        D = rho @ Krho + r_i @ A1 @ r_i
        scale = (rho @ rho) * jnp.trace(K) + (r_i @ r_i) * jnp.trace(A1)
        ok = D > tol * scale
        inv_D = jnp.where(ok, 1.0 / jnp.where(ok, D, 1.0), 0.0)
        k = inv_D * Krho
        phi0 = inv_D * (Krho @ f0 + rho @ a0_i - e_i - r_i @ b1)
        A = K - inv_D * jnp.outer(Krho, Krho)
        b = K @ (f0 - rho * phi0) + a0_i
        C = jnp.outer(r_i, k) - M21_i @ A
        d = r_i * phi0 - M21_i @ b
        return (A, b), (A, b, C, d, k, phi0)

    init = (jnp.zeros((2, 2), Fe.dtype), jnp.zeros((2,), Fe.dtype))
    _, (A, b, C, d, k, phi0) = jax.lax.scan(step, init, (B, r, e, Fe, P, a0, M12), reverse=True)
    return (A, b, C, d), (k, phi0)


def _inertial_sweeps_c(B, r, e, Fe, P, a0, M12):
    """:func:`abcd_backward_inertial` and :func:`forward_sweep` by components (as :func:`abcd_sweeps_c` is for the
    massless sweep), so that under ``vmap`` every operation is elementwise on batch-contiguous arrays instead of on
    2 x 2 minor axes. Inputs per point by components: B = (B11, B12, B22), r = (r_x, r_y), e, F^e = (F_x, F_y),
    P = (P11, P12, P22), a0 = (a0_x, a0_y), M12 = (M11, M12, M21, M22) of link i (zero for the terminal point).
    Returns a_x, a_y and the rod tensions phi (n,). The formulas are those of :func:`abcd_backward_inertial` (A_i
    symmetric; C_i F + d_i = r_i phi_i - M21 a_i)."""
    tol = 64 * jnp.finfo(e.dtype).eps

    def back(carry, inp):
        A11, A12, A22, b1x, b1y = carry  # A_{i+1} (symmetric), b_{i+1}
        (B11, B12, B22), (x, y), e_i, (fx, fy), (p11, p12, p22), (wx, wy), (c11, c12, c21, c22) = inp
        T11, T12, T21, T22 = c11 * A11 + c12 * A12, c11 * A12 + c12 * A22, c21 * A11 + c22 * A12, c21 * A12 + c22 * A22
        N11, N12, N22 = B11 - (T11 * c11 + T12 * c12), B12 - (T11 * c21 + T12 * c22), B22 - (T21 * c21 + T22 * c22)
        Arx, Ary = A11 * x + A12 * y, A12 * x + A22 * y  # A_{i+1} r
        rhx, rhy = x + c11 * Arx + c12 * Ary, y + c21 * Arx + c22 * Ary  # rho = (I + M12 A_{i+1}) r

        def pmp(m11, m12, m22):  # P M P for a symmetric M, by components
            u11, u12 = p11 * m11 + p12 * m12, p11 * m12 + p12 * m22
            u21, u22 = p12 * m11 + p22 * m12, p12 * m12 + p22 * m22
            return u11 * p11 + u12 * p12, u11 * p12 + u12 * p22, u21 * p12 + u22 * p22

        Q11, Q12, Q22 = pmp(N11, N12, N22)  # K = P Q^-1 P with Q = P N P + I - P
        Q11, Q12, Q22 = Q11 + 1.0 - p11, Q12 - p12, Q22 + 1.0 - p22
        inv_det = 1.0 / (Q11 * Q22 - Q12 * Q12)
        K11, K12, K22 = pmp(Q22 * inv_det, -Q12 * inv_det, Q11 * inv_det)
        f0x = fx - (c11 * b1x + c12 * b1y) - (N11 * wx + N12 * wy)  # F^e - M12 b_{i+1} - N a0
        f0y = fy - (c21 * b1x + c22 * b1y) - (N12 * wx + N22 * wy)
        Kx, Ky = K11 * rhx + K12 * rhy, K12 * rhx + K22 * rhy  # K rho
        D = rhx * Kx + rhy * Ky + x * Arx + y * Ary
        ok = D > tol * ((rhx * rhx + rhy * rhy) * (K11 + K22) + (x * x + y * y) * (A11 + A22))
        inv_D = jnp.where(ok, 1.0 / jnp.where(ok, D, 1.0), 0.0)
        kx, ky = inv_D * Kx, inv_D * Ky
        phi0 = inv_D * (Kx * f0x + Ky * f0y + rhx * wx + rhy * wy - e_i - x * b1x - y * b1y)
        n11, n12, n22 = K11 - kx * Kx, K12 - kx * Ky, K22 - ky * Ky  # A_i = K - K rho rho^T K / D
        gx, gy = f0x - rhx * phi0, f0y - rhy * phi0
        bx, by = K11 * gx + K12 * gy + wx, K12 * gx + K22 * gy + wy  # b_i = K (f0 - rho phi0) + a0
        return (n11, n12, n22, bx, by), (n11, n12, n22, bx, by, kx, ky, phi0)

    z = jnp.zeros_like(e)[0]
    _, (A11, A12, A22, bx, by, kx, ky, phi0) = jax.lax.scan(back, (z,) * 5, (B, r, e, Fe, P, a0, M12), reverse=True)

    def fwd(F, inp):
        Fx, Fy = F  # F_i^d
        a11, a12, a22, b_x, b_y, k_x, k_y, p0, (x, y), (c11, c12, c21, c22) = inp
        ax, ay = a11 * Fx + a12 * Fy + b_x, a12 * Fx + a22 * Fy + b_y
        phi = k_x * Fx + k_y * Fy + p0
        # F_{i+1}^d = C_i F + d_i = r phi - M21 a_i  (C = r k^T - M21 A, d = r phi0 - M21 b)
        return (x * phi - (c11 * ax + c21 * ay), y * phi - (c12 * ax + c22 * ay)), (ax, ay, phi)

    _, (ax, ay, phi) = jax.lax.scan(fwd, (z, z), (A11, A12, A22, bx, by, kx, ky, phi0, r, M12))
    return ax, ay, phi


def forward_sweep(A, b, C, d):
    """Seed §3 steps 2–3: F_1^d = 0, F_{i+1}^d = C_i F_i^d + d_i, a_i = A_i F_i^d + b_i. Returns a (n,2), F^d (n,2)."""

    def step(F, coeffs):
        A_i, b_i, C_i, d_i = coeffs
        return C_i @ F + d_i, (A_i @ F + b_i, F)

    _, (a, Fd) = jax.lax.scan(step, jnp.zeros_like(b[0]), (A, b, C, d))
    return a, Fd


def abcd_sweeps_c(m, rx, ry, e, Fx, Fy, p11, p12, p22, a0x, a0y, block=SCAN_BLOCK):
    """:func:`abcd_backward` and :func:`forward_sweep` by components, for the simulation hot path.

    The same mathematics (module docstring) with every 2-vector kept as two per-point arrays and the symmetric A_i as
    three, so that under ``vmap`` every operation is elementwise on batch-contiguous arrays. The backward sweep keeps
    c_i = P_i r_i / D_i (so C_i = r_i c_i^T), k_i = c_i^T F^e_i + m_i mu_i / D_i and b_i; the forward sweep re-derives
    phi_i = c_i^T F_i^d + k_i (the rod tension: F_{i+1}^d = r_i phi_i) and A_i F = (P_i F - P_i r_i c_i^T F) / m_i.
    Inputs as :func:`abcd_backward` (terminal rod r_n = 0, e_n = 0), by components; ``block``: that of
    :func:`~diffchain._xla.loops.scan_points`. Returns a_x, a_y, phi (n,).
    """
    tol = 64 * jnp.finfo(Fx.dtype).eps

    def back(carry, inp):
        A11, A12, A22, b1x, b1y = carry  # A_{i+1}, b_{i+1}
        m_i, x, y, e_i, fx, fy, q11, q12, q22, wx, wy = inp
        Prx, Pry = q11 * x + q12 * y, q12 * x + q22 * y
        D = x * Prx + y * Pry + m_i * (A11 * x * x + 2.0 * A12 * x * y + A22 * y * y)
        ok = D > tol * (x * x + y * y + m_i * (A11 + A22))
        mu = x * (wx - b1x) + y * (wy - b1y) - e_i
        inv_D = jnp.where(ok, 1.0 / jnp.where(ok, D, 1.0), 0.0)
        cx, cy, g = inv_D * Prx, inv_D * Pry, inv_D * mu
        k = cx * fx + cy * fy + m_i * g
        inv_m = 1.0 / m_i
        n11, n12, n22 = (q11 - cx * Prx) * inv_m, (q12 - cx * Pry) * inv_m, (q22 - cy * Pry) * inv_m
        bx = n11 * fx + n12 * fy + wx - g * Prx
        by = n12 * fx + n22 * fy + wy - g * Pry
        return (n11, n12, n22, bx, by), (cx, cy, k, bx, by)

    z = jnp.zeros_like(Fx[0])  # per point a scalar, or a row of right-hand sides
    _, (cx, cy, k, bx, by) = scan_points(back, (z,) * 5, (m, rx, ry, e, Fx, Fy, p11, p12, p22, a0x, a0y),
                                         reverse=True, block=block)

    def fwd(F, inp):
        Fx_, Fy_ = F  # F_i^d
        inv_m, x, y, q11, q12, q22, c_x, c_y, k_i, b_x, b_y = inp
        cF = c_x * Fx_ + c_y * Fy_
        phi = cF + k_i
        Prx, Pry = q11 * x + q12 * y, q12 * x + q22 * y
        ax = (q11 * Fx_ + q12 * Fy_ - Prx * cF) * inv_m + b_x
        ay = (q12 * Fx_ + q22 * Fy_ - Pry * cF) * inv_m + b_y
        return (x * phi, y * phi), (ax, ay, phi)

    _, (ax, ay, phi) = scan_points(fwd, (z, z), (1.0 / m, rx, ry, p11, p12, p22, cx, cy, k, bx, by), block=block)
    return ax, ay, phi


def _pad1(q):
    return jnp.concatenate([q, jnp.zeros((1,), q.dtype)])


class ChainOperator(eqx.Module):
    """The KKT operator K of a chain, by components (the symmetric system of :mod:`diffchain._solvers.base`, rows
    switched off carry a unit diagonal): point masses ``m``, rod directions ``rx, ry`` (n-1,) and switches ``on``,
    the point kinds (``guided``, ``slider`` with the line normals ``sx, sy``) and the point projectors P_i of
    :func:`diffchain._constraints.chain.point_projector_c` (``p11, p12, p22``). With rigid links (:func:`link_solve`)
    also their mass blocks: ``B`` = (B11, B12, B22) of every point and ``M12`` = (M12_11, M12_12, M12_21, M12_22) of
    every link, 0 for the terminal point (:mod:`diffchain._model.inertia`). With held joints
    (:func:`diffchain._solvers.recursive_solver.active_solve`) also 1/rho of every rod (``inv_rho``), the ``active``
    mask and the scales ``sigma``, ``ell`` of :func:`diffchain._solvers.recursive_held._scales`."""

    m: jax.Array
    rx: jax.Array
    ry: jax.Array
    on: jax.Array
    guided: jax.Array
    slider: jax.Array
    sx: jax.Array
    sy: jax.Array
    p11: jax.Array
    p12: jax.Array
    p22: jax.Array
    B: tuple | None = None
    M12: tuple | None = None
    inv_rho: jax.Array | None = None
    active: jax.Array | None = None
    sigma: jax.Array | None = None
    ell: jax.Array | None = None
    block: int | None = eqx.field(static=True, default=SCAN_BLOCK)  # (of the sweeps' scan_points)

    @property
    def P(self):
        return self.p11, self.p12, self.p22


def chain_operator(chain: Model, rx, ry, P, links=False, block=SCAN_BLOCK) -> ChainOperator:
    """The :class:`ChainOperator` of ``chain`` with rods (rx, ry) and point projectors P = (P_11, P_12, P_22); with
    ``links``, the rigid links' mass blocks too; ``block``: its sweeps' (:func:`diffchain._xla.loops.scan_points`)."""
    op = ChainOperator(chain.m, rx, ry, chain.rod_on, chain.guided, chain.slider_mask, chain.s[:, 0], chain.s[:, 1],
                       *P, block=block)
    if not links:
        return op
    Bm = point_mass_blocks(chain)
    M12 = jnp.concatenate([chain_link_blocks(chain)[1], jnp.zeros((1, 2, 2), rx.dtype)])  # terminal point: none
    return dataclasses.replace(op, B=(Bm[:, 0, 0], Bm[:, 0, 1], Bm[:, 1, 1]),
                               M12=(M12[:, 0, 0], M12[:, 0, 1], M12[:, 1, 0], M12[:, 1, 1]))


def _kkt_rod_forces(op: ChainOperator, y):
    """J_rod^T y: rod k pulls point k by -r_k y_k and point k+1 by +r_k y_k."""
    y = jnp.where(op.on, y, 0.0)
    return _pad_diff(-op.rx * y), _pad_diff(-op.ry * y)


def _kkt_matvec(op: ChainOperator, z, Ma=None):
    """K z for the KKT operator ``op`` (:class:`ChainOperator`); ``Ma`` the product of the mass matrix with the
    accelerations, m a by default (point masses)."""
    g, sl, sx, sy = op.guided, op.slider, op.sx, op.sy
    ax, ay, yr, y1, y2 = z
    Ma_x, Ma_y = (op.m * ax, op.m * ay) if Ma is None else Ma
    fx, fy = _kkt_rod_forces(op, yr)
    top_x = Ma_x + fx + jnp.where(g, y1, jnp.where(sl, sx * y1, 0.0))
    top_y = Ma_y + fy + jnp.where(g, y2, jnp.where(sl, sy * y1, 0.0))
    rod = jnp.where(op.on, op.rx * (ax[1:] - ax[:-1]) + op.ry * (ay[1:] - ay[:-1]), yr)
    row1 = jnp.where(g, ax, jnp.where(sl, sx * ax + sy * ay, y1))
    row2 = jnp.where(g, ay, y2)
    return top_x, top_y, rod, row1, row2


def _kkt_swept(op, b):
    """The part of K^-1 b that the recursion gives, O(n): the accelerations and the rod multipliers (rows switched
    off: y = b)."""
    bx, by, br = b[:3]
    ax, ay, phi = abcd_sweeps_c(op.m, _pad1(op.rx), _pad1(op.ry), _pad1(-br), bx, by, *op.P, *point_a0(op, b),
                               block=op.block)
    return ax, ay, jnp.where(op.on, -phi[:-1], br)


def point_a0(op, b):
    """a0 of the point constraints a = P a + a0 (:func:`diffchain._constraints.chain.point_projector_c`) from the point rows
    of the right-hand side: a^w at a guided point, s beta on a slider, 0 elsewhere."""
    g, sl = op.guided, op.slider
    b1, b2 = b[3:5]
    return jnp.where(g, b1, jnp.where(sl, op.sx * b1, 0.0)), jnp.where(g, b2, jnp.where(sl, op.sy * b1, 0.0))


def point_multipliers(op, b, ax, ay, yr, fx=0.0, fy=0.0, Ma=None):
    """The guided and slider points' multipliers y1, y2 from the residual of Newton's law (elementwise), given the
    accelerations, the rod multipliers and any further constraint forces (fx, fy) on the points; ``Ma`` as in
    :func:`_kkt_matvec`."""
    g, sl = op.guided, op.slider
    bx, by, br, b1, b2 = b[:5]
    Ma_x, Ma_y = (op.m * ax, op.m * ay) if Ma is None else Ma
    rod_x, rod_y = _kkt_rod_forces(op, yr)
    res_x, res_y = bx - Ma_x - rod_x - fx, by - Ma_y - rod_y - fy  # = J_pt^T y_pt
    y1 = jnp.where(g, res_x, jnp.where(sl, op.sx * res_x + op.sy * res_y, b1))
    y2 = jnp.where(g, res_y, b2)
    return y1, y2


def _kkt_complete(op, b, swept):
    """The whole K^-1 b from the swept part: the point multipliers from the residual of Newton's law."""
    return swept + point_multipliers(op, b, *swept)


kkt_solve = implicit_solve(_kkt_swept, _kkt_complete, _kkt_matvec)
kkt_solve.__doc__ = (
    "z = (a_x, a_y, y_rod, y1, y2) = K(op)^-1 b for the KKT operator of :func:`_kkt_matvec`, by the recursion "
    "(:func:`abcd_sweeps_c`) with implicit derivatives (:func:`implicit_solve`).")


def massless_dynamics(chain: Model, state: State, control: Control, stab=None, block=SCAN_BLOCK):
    """The recursion for massless rods as a linear solve with implicit derivatives (:func:`kkt_solve`).

    The accelerations and multipliers z = (a, y) solve the symmetric KKT system K z = b of
    :mod:`diffchain._solvers.base` (rows switched off carry a unit diagonal): M a + J^T y = F^e, J a = gamma. The
    recursion (:func:`abcd_sweeps_c`) solves it for any right-hand side b, in O(n). Derivatives are taken implicitly --
    d z = K^-1 (d b - d K z) -- so forward mode is one more recursion, reverse mode one more recursion with the
    cotangent as right-hand side (K is symmetric) plus the adjoint of K(x) z and b(x, v, u): the sweeps themselves are
    never differentiated, which keeps reverse mode cheap and its memory O(n) per step. Components as in :func:`abcd_sweeps_c`.
    """
    ax, ay, yr, _, _ = kkt_solve(*kkt_system(chain, state, control, stab, block=block))
    return jnp.stack([ax, ay], -1), -yr


def kkt_system(chain: Model, state: State, control: Control, stab=None, links=False, block=SCAN_BLOCK):
    """The operator (:class:`ChainOperator`; with ``links``, with the rigid links' mass blocks) and the right-hand
    side b = (F^e_x, F^e_y, rod rows, point rows 1 and 2) of the KKT system (:func:`_kkt_matvec`), by components."""
    X, Y, U, V = state.x[:, 0], state.x[:, 1], state.v[:, 0], state.v[:, 1]
    g, sl = chain.guided, chain.slider_mask
    rx, ry, e = rod_terms_c(chain, X, Y, U, V, stab)
    on = chain.rod_on
    p11, p12, p22, _, _ = point_projector_c(chain, X, Y, U, V, control.a_w, stab)
    op = chain_operator(chain, rx, ry, (p11, p12, p22), links, block)
    beta = _slider_rhs(chain, X, Y, U, V, stab)
    Fx, Fy = external_forces_c(chain, X, Y, U, V, control)
    b = (Fx, Fy, jnp.where(on, -e, 0.0), jnp.where(g, control.a_w[:, 0], jnp.where(sl, beta, 0.0)),
         jnp.where(g, control.a_w[:, 1], 0.0))
    return op, b


def _link_mass_times(op: ChainOperator, ax, ay):
    """M a for rigid links by components (the blocks ``op.B``, ``op.M12``): (M a)_i = B_i a_i + M12_i a_{i+1} +
    M21_{i-1} a_{i-1} (block-tridiagonal, :mod:`diffchain._model.inertia`)."""
    (B11, B12, B22), (c11, c12, c21, c22) = op.B, op.M12
    up = lambda q: jnp.concatenate([q[1:], jnp.zeros_like(q[:1])])  # noqa: E731  q_{i+1}
    down = lambda q: jnp.concatenate([jnp.zeros_like(q[:1]), q[:-1]])  # noqa: E731  q_{i-1}
    nx, ny = up(ax), up(ay)
    px, py = down(ax), down(ay)
    return (B11 * ax + B12 * ay + c11 * nx + c12 * ny + down(c11) * px + down(c21) * py,
            B12 * ax + B22 * ay + c21 * nx + c22 * ny + down(c12) * px + down(c22) * py)


def _link_swept(op, b):
    """The part of K^-1 b that the rigid-link sweeps (:func:`_inertial_sweeps_c`) give: a_x, a_y, y_rod."""
    bx, by, br = b[:3]
    ax, ay, phi = _inertial_sweeps_c(op.B, (_pad1(op.rx), _pad1(op.ry)), _pad1(-br), (bx, by), op.P, point_a0(op, b),
                                     op.M12)
    return ax, ay, jnp.where(op.on, -phi[:-1], br)


link_solve = implicit_solve(
    _link_swept, lambda op, b, z: z + point_multipliers(op, b, *z, Ma=_link_mass_times(op, *z[:2])),
    lambda op, z: _kkt_matvec(op, z, _link_mass_times(op, *z[:2])))
link_solve.__doc__ = (
    "z = (a_x, a_y, y_rod, y1, y2) = K(op)^-1 b for the KKT operator with the block-tridiagonal mass matrix of rigid "
    "links (:func:`_link_mass_times`), by the rigid-link sweeps, with implicit derivatives (:func:`implicit_solve`).")


def recursive_dynamics(chain: Model, state: State, control: Control, stab=None, block=SCAN_BLOCK):
    """Accelerations a (n,2) and rod tensions phi (n-1,) by the seed-000 recursion, O(n): massless rods by
    :func:`massless_dynamics`, rigid links by the generalised sweeps (:func:`_inertial_sweeps_c`); both differentiated
    implicitly (:func:`kkt_solve`, :func:`link_solve`)."""
    if not chain.has_links:
        return massless_dynamics(chain, state, control, stab, block)
    op, b = kkt_system(chain, state, control, stab, links=True)
    weight = link_gravity(chain)  # the links' own weight on their end points
    ax, ay, yr, _, _ = link_solve(op, (b[0] + weight[:, 0], b[1] + weight[:, 1]) + b[2:])
    return jnp.stack([ax, ay], -1), -yr
