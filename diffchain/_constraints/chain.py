"""A chain's constraints in closed form, by components, for the O(n) solvers of a path (seed 000 §3, §5–6, §12.2):
the same rows as the dense assembly's (:mod:`diffchain._constraints.system`), written out.

Rod k (points k, k+1) keeps its length:   r_k^T (a_k - a_{k+1}) = e_k   (seed eq. 4; the distance row |d| - l_k)
Point i may be constrained:               S_i a_i = beta_i  (rows of S_i selected by a mask)
  guided (seed §6.1):  S_i = I,          beta_i = a^w_i
  slider (seed §6.3):  S_i = [s_i^T; 0], beta_i = [PD term; 0]
With the PD drift correction of seed §12.2 eq. (33) every violated quantity y - y_bar = eps obeys
eps'' = -eps/T^2 - 2 eps'/T, so the corrections simply enter the right-hand sides e_k and beta_i.
"""
from __future__ import annotations

import jax.numpy as jnp

from .._model.geometry import links_c, rod_diff_c
from .._model.model import Model
from .kinds import slider_rhs


def _inv(stab):
    """1/T for the PD correction, 0 (no correction) when ``stab`` is None."""
    return 0.0 if stab is None else 1.0 / stab


def rod_terms_c(chain: Model, X, Y, U, V, stab=None):
    """Rod directions r_x, r_y (n-1,) and link-equation right-hand sides e (n-1,) by components.

    e_k = r_dot^T (v_{k+1} - v_k) + eps/T^2 + 2 eps'/T with eps = |x_{k+1} - x_k| - l_k, eps' = r_k^T (v_{k+1} - v_k).
    On the constraint manifold r_dot^T dv = |dv|^2 / l_k, the seed's centripetal term (eq. 3); off it we keep the exact
    derivative |dv_perp|^2 / |d| so that every solver differentiates the same constraint.
    """
    _, _, rho, inv_rho, rx, ry = links_c(X, Y)
    return rx, ry, rod_rhs(rx, ry, rho, inv_rho, *rod_diff_c(U, V), chain.l, _inv(stab))


def rod_rhs(rx, ry, rho, inv_rho, dU, dV, l, w):
    """e_k of :func:`rod_terms_c` from rod k's geometry (:func:`diffchain._model.geometry.rod_geometry`), its velocity
    difference dU, dV, length l and 1/T = w (elementwise)."""
    eps_dot = rx * dU + ry * dV
    return (dU * dU + dV * dV - eps_dot**2) * inv_rho + (rho - l) * w**2 + 2.0 * eps_dot * w


def _slider_rhs(chain: Model, X, Y, U, V, stab):
    """PD right-hand side of a slider row s_i^T a_i = -eps/T^2 - 2 eps'/T, eps = s_i^T x_i - c_i (seed §6.3, eq. 33)."""
    return slider_rhs(chain.s[:, 0], chain.s[:, 1], chain.c, X, Y, U, V, _inv(stab))


def point_projector_c(chain: Model, X, Y, U, V, a_w, stab=None):
    """The point constraints as a_i = P_i a + a0_i by components: P_11, P_12, P_22, a0_x, a0_y (n,).

    Free: P = I, a0 = 0; slider: P = I - s s^T, a0 = s beta (beta of :func:`_slider_rhs`); guided: P = 0, a0 = a^w."""
    beta = _slider_rhs(chain, X, Y, U, V, stab)
    return projector(chain.guided, chain.slider_mask, chain.s[:, 0], chain.s[:, 1], beta, a_w[:, 0], a_w[:, 1])


def projector(g, sl, sx, sy, beta, awx, awy):
    """P_11, P_12, P_22, a0_x, a0_y of :func:`point_projector_c` elementwise: g guided, sl on a line (not guided)
    with normal s and right-hand side beta, a^w = (awx, awy)."""
    p11 = jnp.where(g, 0.0, jnp.where(sl, 1.0 - sx * sx, 1.0))
    p12 = jnp.where(g | ~sl, 0.0, -sx * sy)
    p22 = jnp.where(g, 0.0, jnp.where(sl, 1.0 - sy * sy, 1.0))
    a0x = jnp.where(g, awx, jnp.where(sl, sx * beta, 0.0))
    a0y = jnp.where(g, awy, jnp.where(sl, sy * beta, 0.0))
    return p11, p12, p22, a0x, a0y
