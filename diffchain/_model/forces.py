"""External forces F^e on the points (seed 000 §4): gravity, joint torques, damping, drag, user point forces."""
from __future__ import annotations

import jax.numpy as jnp

from .geometry import _pad_diff, joint_velocities, link_omega_c, links_c, rod_diff_c
from .inertia import link_gravity
from .._state import Control, State


def _torque_forces_c(rx, ry, inv_rho, tau):
    """Point forces of joint torques by components: per rod k, f_k = L_k (tau_{k+1} - tau_k) with L_k = r_k^*/rho_k
    pushes point k by +f_k and point k+1 by -f_k (seed §4.2, Fig. 1)."""
    dtau = (tau[1:] - tau[:-1]) * inv_rho
    return _pad_diff(-ry * dtau), _pad_diff(rx * dtau)


def torque_forces(x, tau):
    """Point forces equivalent to joint torques tau (n,) (seed §4.2, Fig. 1).

    tau_i puts L_{i-1} tau_i on point i-1, -L_{i-1} tau_i - L_i tau_i on point i and L_i tau_i on point i+1. Collected
    per rod k: f_k = L_k (tau_{k+1} - tau_k) pushes point k by +f_k and point k+1 by -f_k.
    """
    _, _, _, inv_rho, rx, ry = links_c(x[:, 0], x[:, 1])
    return jnp.stack(_torque_forces_c(rx, ry, inv_rho, tau), -1)


def damping_torques(chain, state: State):
    """Joint viscous damping -k_omega omega^z (seed §4.3); zeros without dampers."""
    return -chain.k_omega * joint_velocities(state)


def _speed(U, V):
    """|v| with a finite gradient at v = 0 (double-``where``)."""
    sq = U * U + V * V
    pos = sq > 0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, sq, 1.0)), 0.0)


def drag_forces(chain, state: State):
    """Quadratic air drag -k_v v |v| (seed §4.3), with a finite gradient at v = 0; zeros without drag."""
    if chain.k_v is None:
        return jnp.zeros_like(state.v)
    return -chain.k_v[:, None] * state.v * _speed(state.v[:, 0], state.v[:, 1])[:, None]


def external_forces_c(chain, X, Y, U, V, control: Control):
    """F^e of the point masses by components (F_x, F_y): gravity + torques (applied and damping -k_omega omega^z)
    + drag + user point forces (seed §4) + the force kinds' generalized forces (``chain.forces``; a chain's points are
    its coordinates, so a kind's generalized force (2n,) is its point force (n, 2)). The links' own weight is added by
    :func:`external_forces`. A chain without dampers or drag (``damper_idx`` empty, ``k_v`` None) computes neither."""
    _, _, _, inv_rho, rx, ry = links_c(X, Y)
    tau = control.tau
    if chain.damper_idx.shape[0]:
        tau = tau - chain.damper_c * _pad_diff(link_omega_c(rx, ry, inv_rho, *rod_diff_c(U, V)))
    fx, fy = _torque_forces_c(rx, ry, inv_rho, tau)
    if chain.forces:
        q, qd = jnp.stack([X, Y], -1).reshape(-1), jnp.stack([U, V], -1).reshape(-1)
        Q = sum(f.force(chain, q, qd) for f in chain.forces).reshape(-1, 2)
        fx, fy = fx + Q[:, 0], fy + Q[:, 1]
    return point_forces(fx, fy, U, V, chain.m, chain.k_v, chain.g, *control.forces().T)


def point_forces(fx, fy, U, V, m, k_v, g, ux, uy):
    """F^e of :func:`external_forces_c` at a point (elementwise) from its torque forces fx, fy: gravity, drag, and the
    user force (ux, uy); ``k_v`` None: no drag."""
    drag = 0.0 if k_v is None else k_v * _speed(U, V)
    return fx - drag * U + ux, fy - g * m - drag * V + uy


def external_forces(chain, state: State, control: Control):
    """F^e (n,2): gravity + torques (applied and damping) + drag + user point forces (:func:`external_forces_c`), plus
    the links' weight."""
    F = jnp.stack(external_forces_c(chain, state.x[:, 0], state.x[:, 1], state.v[:, 0], state.v[:, 1], control), -1)
    return F + link_gravity(chain) if chain.has_links else F
