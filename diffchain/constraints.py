"""The constraints of a chain at the acceleration level, shared by every solver (seed 000 §3, §5–6, §12.2; SPEC §8).

Rod k (points k, k+1) keeps its length:   r_k^T (a_k - a_{k+1}) = e_k                         (seed eq. 4)
Point i may be constrained:               S_i a_i = beta_i  (rows of S_i selected by a mask)
  guided (seed §6.1):  S_i = I,          beta_i = a^w_i
  slider (seed §6.3):  S_i = [s_i^T; 0], beta_i = [PD term; 0]
With the PD drift correction of seed §12.2 eq. (33) every violated quantity y - y_bar = eps obeys
eps'' = -eps/T^2 - 2 eps'/T, so the corrections simply enter the right-hand sides e_k and beta_i.
"""
from __future__ import annotations

import jax.numpy as jnp

from .geometry import links
from .model import Chain, State


def _inv(stab):
    """1/T for the PD correction, 0 (no correction) when ``stab`` is None."""
    return 0.0 if stab is None else 1.0 / stab


def rod_terms(chain: Chain, state: State, stab=None):
    """Unit rod directions r_k (n-1, 2) and link-equation right-hand sides e_k (n-1,).

    e_k = r_dot^T (v_{k+1} - v_k) + eps/T^2 + 2 eps'/T with eps = |x_{k+1} - x_k| - l_k, eps' = r_k^T (v_{k+1} - v_k).
    On the constraint manifold r_dot^T dv = |dv|^2 / l_k, the seed's centripetal term (eq. 3); off it we keep the exact
    derivative |dv_perp|^2 / |d| so that every solver differentiates the same constraint.
    """
    _, rho, r = links(state.x)
    dv = state.v[1:] - state.v[:-1]
    eps_dot = jnp.sum(r * dv, -1)
    e = (jnp.sum(dv * dv, -1) - eps_dot**2) / rho
    w = _inv(stab)
    return r, e + (rho - chain.l) * w**2 + 2.0 * eps_dot * w


def point_terms(chain: Chain, state: State, a_w, stab=None):
    """Point constraints as two candidate rows per point: S (n,2,2), active mask (n,2), right-hand side beta (n,2).

    Rows are orthonormal, so the affine set of admissible accelerations is a_i = P_i a + a0_i with
    P_i = I - sum_j S_ij^T S_ij and a0_i = sum_j S_ij^T beta_ij (see :func:`projector`).
    """
    guided, slider = chain.guided, chain.slider_mask
    n, dt = chain.n, chain.m.dtype
    eye = jnp.broadcast_to(jnp.eye(2, dtype=dt), (n, 2, 2))
    s_rows = jnp.stack([chain.s, jnp.zeros_like(chain.s)], 1)
    S = jnp.where(guided[:, None, None], eye, s_rows)
    mask = jnp.stack([guided | slider, guided], -1)
    w = _inv(stab)
    eps = jnp.sum(chain.s * state.x, -1) - chain.c
    eps_dot = jnp.sum(chain.s * state.v, -1)
    beta_slider = jnp.stack([-eps * w**2 - 2.0 * eps_dot * w, jnp.zeros_like(eps)], -1)
    beta = jnp.where(guided[:, None], a_w, beta_slider)
    return S, mask, jnp.where(mask, beta, 0.0)


def projector(S, mask, beta):
    """P_i = I - S_i^T diag(mask) S_i and a0_i = S_i^T (mask * beta_i): a_i = P_i a_free + a0_i."""
    Sm = S * mask[..., None]
    P = jnp.eye(2, dtype=S.dtype) - jnp.einsum("nji,njk->nik", Sm, Sm)
    a0 = jnp.einsum("nji,nj->ni", Sm, beta)
    return P, a0
