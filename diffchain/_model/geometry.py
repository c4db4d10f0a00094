"""Geometry of the chain and joint-space views computed from the Cartesian state (seed 000 §4.2–4.3, §8.1).

Conventions. phi_k is the absolute angle of link k, counter-clockwise from the world +x axis. The joint angle of
joint i is theta_i = phi_i - phi_{i-1} (theta_1 = phi_1: joint 1 is measured against the world), i = 1..n-1. The seed's
joint angular velocity omega_i^z = omega_i^o - omega_{i-1}^o and acceleration alpha_i^z (eq. 13) are defined for all n
joints with omega_0^o = omega_n^o = 0, so that sum_i tau_i omega_i^z is the power of the joint torques.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .._state import State


def perp(v):
    """v rotated by +90 degrees (seed's r^*)."""
    return jnp.stack([-v[..., 1], v[..., 0]], axis=-1)


@jax.custom_jvp
def _materialised(a, b):
    return a, b


@_materialised.defjvp
def _materialised_jvp(primals, tangents):
    """The identity, with the two tangents (and so, transposed, the two cotangents) stacked and multiplied by the 2 x 2
    identity matrix: exact, O(n), and a dot, which XLA CPU does not fuse."""
    t = jnp.dot(jnp.eye(2, dtype=tangents[0].dtype), jnp.stack(tangents))
    return primals, (t[0], t[1])


def rod_diff_c(X, Y):
    """X_{k+1} - X_k and Y_{k+1} - Y_k per rod k (positions or velocities by components).

    Their derivatives pass through a product with the identity matrix (:func:`_materialised`). In reverse mode every
    rod's contribution to the cotangents of its two points is then computed once: otherwise XLA CPU fuses the whole
    elementwise adjoint of a step into a few loops that re-evaluate each rod's share for every point and component it
    reaches, in scalar code. This makes batched reverse gradients cheaper; the values, and the gradient of one chain,
    are unaffected."""
    return _materialised(X[1:] - X[:-1], Y[1:] - Y[:-1])


def links_c(X, Y):
    """:func:`links` by components (X, Y the point coordinates): dX, dY, rho, 1/rho (1 where rho = 0), r_x, r_y.

    The component form keeps every quantity a per-point array, so that under ``vmap`` each operation is elementwise on
    batch-contiguous arrays instead of acting on a minor axis of length 2 (XLA CPU runs the latter as many tiny
    kernels); the solvers' hot paths use it, and the (n, 2) functions below are built on it."""
    dX, dY = rod_diff_c(X, Y)
    return (dX, dY) + rod_geometry(dX, dY)


def rod_geometry(dX, dY):
    """Length rho, 1/rho (1 where rho = 0) and unit direction r_x, r_y of rods dX, dY (elementwise: one rod or many)."""
    sq = dX * dX + dY * dY
    pos = sq > 0
    rho = jnp.where(pos, jnp.sqrt(jnp.where(pos, sq, 1.0)), 0.0)
    inv_rho = 1.0 / jnp.where(pos, rho, 1.0)
    return rho, inv_rho, dX * inv_rho, dY * inv_rho


def links(x):
    """Rod vectors x_{i+1} - x_i, their lengths rho_i and unit directions r_i (seed §3 step 4)."""
    dX, dY, rho, _, rx, ry = links_c(x[:, 0], x[:, 1])
    return jnp.stack([dX, dY], -1), rho, jnp.stack([rx, ry], -1)


def link_L(x):
    """L_i = r_i^* / l_i (seed §4.2), with the current rod length."""
    _, rho, r = links(x)
    return perp(r) / jnp.where(rho > 0, rho, 1.0)[:, None]


def link_omega_c(rx, ry, inv_rho, dU, dV):
    """omega_k^o = L_k^T (v_{k+1} - v_k) by components, L_k = r_k^* / rho_k (seed §4.2–4.3)."""
    return (rx * dV - ry * dU) * inv_rho


def _pad_diff(w):
    """w_i - w_{i-1} for i = 1..n from per-link values w_1..w_{n-1}, with w_0 = w_n = 0."""
    z = jnp.zeros((1,) + w.shape[1:], w.dtype)
    return jnp.concatenate([w, z]) - jnp.concatenate([z, w])


def wrap_angle(a):
    """a wrapped to [-pi, pi] (exactly, without the round trip through sin and cos)."""
    return a - 2.0 * jnp.pi * jnp.round(a / (2.0 * jnp.pi))


def link_angles(x: jax.Array) -> jax.Array:
    """Absolute link angles phi_k (n-1,), counter-clockwise from +x."""
    d = x[1:] - x[:-1]
    return jnp.arctan2(d[:, 1], d[:, 0])


def link_angular_velocities(x, v):
    """omega_k^o = L_k^T (v_{k+1} - v_k) (seed §4.3)."""
    return jnp.sum(link_L(x) * (v[1:] - v[:-1]), axis=-1)


def joint_angles(state: State) -> jax.Array:
    """Joint angles theta_i = phi_i - phi_{i-1}, i = 1..n-1, wrapped to (-pi, pi]; theta_1 = phi_1."""
    phi = link_angles(state.x)
    theta = jnp.concatenate([phi[:1], phi[1:] - phi[:-1]])
    return jnp.arctan2(jnp.sin(theta), jnp.cos(theta))


def wrapped_joint_angles(x, theta_ref=None):
    """Joint angles of all n joints (theta_n = -phi_{n-1}), (..., n), of x (..., n, 2): wrapped to (-pi, pi], or on
    the branch within pi of ``theta_ref`` (a joint's continuous angle, carried from quantum to quantum)."""
    if x.shape[-2] > 1:
        if x.ndim == 2:
            theta = wrap_angle(_pad_diff(link_angles(x)))
        else:  # leading axes (an EventState built from a batch of states)
            d = x[..., 1:, :] - x[..., :-1, :]
            phi = jnp.arctan2(d[..., 1], d[..., 0])
            z = jnp.zeros(phi.shape[:-1] + (1,), x.dtype)
            theta = wrap_angle(jnp.concatenate([phi, z], -1) - jnp.concatenate([z, phi], -1))
    else:
        theta = jnp.zeros(x.shape[:-1], x.dtype)
    return theta if theta_ref is None else theta_ref + wrap_angle(theta - theta_ref)


def joint_velocities(state: State) -> jax.Array:
    """omega_i^z = omega_i^o - omega_{i-1}^o for all n joints (seed §4.3); the first n-1 are d theta / dt."""
    return _pad_diff(link_angular_velocities(state.x, state.v))


def joint_accelerations(state: State, a: jax.Array) -> jax.Array:
    """alpha_i^z = L_i^T a_{i+1} - (L_i + L_{i-1})^T a_i + L_{i-1}^T a_{i-1} (seed §8.1 eq. 13), all n joints.

    Equal to d omega^z / dt along a motion that keeps the rod lengths (the L-dot terms vanish there).
    """
    return _pad_diff(link_angular_velocities(state.x, a))


