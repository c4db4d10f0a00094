"""Rigid links with distributed mass in natural coordinates (seed 003).

A body point at (a, b) in the frame of link k (a along r_k from point k, b across, along r_k^*) sits at
    p = x_k + (a/l) d + (b/l) R d,      d = x_{k+1} - x_k,  R = rotation by +90 degrees,
which is linear in the two end points: p = N(alpha, beta) [x_k; x_{k+1}] with alpha = a/l, beta = b/l and
    N = [(1 - alpha) I - beta R,  alpha I + beta R].
The kinetic energy of the link is therefore (1/2) [v_k; v_{k+1}]^T M_link [v_k; v_{k+1}] with the *constant* 4x4
    M_link = integral N^T N dm = [[M11, M12], [M21, M22]],
    M11 = (mu - 2 S_a + Q) I,   M12 = (S_a - Q) I + S_b R,   M21 = M12^T,   M22 = Q I,
where mu is the link mass, S_a = integral alpha dm = mu a_c / l, S_b = mu b_c / l and
Q = integral (alpha^2 + beta^2) dm = (J_c + mu (a_c^2 + b_c^2)) / l^2 (J_c the moment of inertia about the centre of
mass (a_c, b_c)). A constant mass matrix means no velocity-product terms: the only change to the equations of motion is
M a instead of diag(m) a. Lumped point masses are the special case mu = 0.
A force f at the body point (a, b) acts on the end points as the generalized forces N^T f.
"""
from __future__ import annotations

import jax.numpy as jnp

from .geometry import perp


def link_mass_blocks(mu, com, J, l):
    """M11, M12, M22 (each (..., 2, 2)) of links with mass mu, centre of mass com = (a_c, b_c), inertia J, length l."""
    a_c, b_c = com[..., 0], com[..., 1]
    S_a, S_b = mu * a_c / l, mu * b_c / l
    Q = (J + mu * (a_c**2 + b_c**2)) / l**2
    eye = jnp.eye(2, dtype=mu.dtype)
    R = jnp.array([[0.0, -1.0], [1.0, 0.0]], mu.dtype)
    s = lambda c: c[..., None, None]  # noqa: E731
    return s(mu - 2 * S_a + Q) * eye, s(S_a - Q) * eye + s(S_b) * R, s(Q) * eye


def body_point_weights(com, l):
    """(alpha, beta) of body points given in link coordinates (a, b): p = x_k + alpha d + beta R d."""
    return com[..., 0] / l, com[..., 1] / l


def force_on_ends(f, com, l):
    """Generalized forces N^T f on (point k, point k+1) of a force f (..., 2) applied at body point com of link k."""
    alpha, beta = body_point_weights(com, l)
    Rf = perp(f)
    return ((1 - alpha)[..., None] * f + beta[..., None] * Rf, alpha[..., None] * f - beta[..., None] * Rf)


def chain_link_blocks(chain):
    """M11, M12, M22 (n-1, 2, 2) of every link of ``chain``."""
    return link_mass_blocks(chain.link_mass, chain.link_com, chain.link_inertia, chain.l)


def point_mass_blocks(chain):
    """Diagonal 2x2 blocks of the chain's mass matrix: m_i I + M22 of link i-1 + M11 of link i (n, 2, 2)."""
    eye = jnp.eye(2, dtype=chain.m.dtype)
    diag = chain.m[:, None, None] * eye
    if not chain.has_links:
        return diag
    M11, _, M22 = chain_link_blocks(chain)
    return diag.at[:-1].add(M11).at[1:].add(M22)


def link_gravity(chain):
    """Weights of the links as generalized forces on the points (n, 2) (N^T f at the centre of mass)."""
    f = jnp.stack([jnp.zeros_like(chain.link_mass), -chain.g * chain.link_mass], -1)
    on_k, on_k1 = force_on_ends(f, chain.link_com, chain.l)
    return jnp.zeros((chain.n, 2), f.dtype).at[:-1].add(on_k).at[1:].add(on_k1)
