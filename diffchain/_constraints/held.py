"""Held (active) joints: prescribed joint angular accelerations enforced by unknown torques (seed 000 Part II, §9–§12.2).

An *active* joint i has its angular acceleration (seed eq. 13, conventions of :mod:`diffchain._model.geometry`: L_0 =
L_n = 0)
    alpha_i^z = L_i^T a_{i+1} - (L_i + L_{i-1})^T a_i + L_{i-1}^T a_{i-1}
prescribed to alpha_i^w. It is enforced by an unknown torque tau_i^w that acts exactly like an ordinary joint torque
(:func:`diffchain._model.forces.torque_forces`): L_{i-1} tau on point i-1, -(L_{i-1} + L_i) tau on point i, L_i tau on
point i+1. The generalized force of that torque is the transposed row of eq. 13, so in the KKT form the multiplier of
the active row *is* tau_i^w (same sign convention as the rod tensions).

Joint 1 is measured against the world (a base motor); joint n (L_n = 0) prescribes minus the absolute angular
acceleration of the last link (a torque between the world and link n-1 alone). Every solver supports both.
A chain of one point has no joints: ``active`` is ignored there.

Off the constraint manifold (rods not exactly at length, stretching velocities) the exact second derivative of the joint
angle has the extra terms of dL/dt (:func:`active_terms`); every solver uses the same right-hand side, so they agree
off-manifold too, as the rod equations of :func:`diffchain._constraints.chain.rod_terms_c` do.
"""
from __future__ import annotations

import jax.numpy as jnp

from .._model.model import Model
from .._state import State
from .._model.geometry import _pad_diff, link_L, link_omega_c, links_c, wrap_angle
from .chain import _inv


def _active_mask(chain: Model, active):
    active = jnp.asarray(active, bool)
    if active.shape != (chain.n,):
        raise ValueError(f"active must have one flag per joint (n = {chain.n}), got shape {active.shape}")
    return active if chain.n > 1 else jnp.zeros_like(active)


def _per_joint(chain: Model, value, name):
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


def active_terms(chain: Model, state: State, alpha_w, theta_bar=None, stab=None):
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
        theta = _pad_diff(jnp.arctan2(dY, dX))  # the link angles (:func:`diffchain._model.geometry.link_angles`)
        err = theta - _per_joint(chain, theta_bar, "theta_bar")
        err = wrap_angle(err)
        w = _inv(stab)
        target = target - err * w**2 - 2.0 * _pad_diff(omega) * w
    return target - _pad_diff(kappa)
