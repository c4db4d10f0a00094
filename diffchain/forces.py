"""External forces F^e on the points (seed 000 §4): gravity, joint torques, damping, drag, user point forces."""
from __future__ import annotations

import jax.numpy as jnp

from .geometry import _pad_diff, joint_velocities, link_L, safe_norm
from .inertia import link_energy, link_gravity
from .model import Chain, Control, State


def gravity(chain: Chain):
    """[0, -g m_i] on every point (seed §4.1)."""
    return jnp.stack([jnp.zeros_like(chain.m), -chain.g * chain.m], -1)


def torque_forces(x, tau):
    """Point forces equivalent to joint torques tau (n,) (seed §4.2, Fig. 1).

    tau_i puts L_{i-1} tau_i on point i-1, -L_{i-1} tau_i - L_i tau_i on point i and L_i tau_i on point i+1. Collected
    per rod k: f_k = L_k (tau_{k+1} - tau_k) pushes point k by +f_k and point k+1 by -f_k.
    """
    f = link_L(x) * (tau[1:] - tau[:-1])[:, None]
    return _pad_diff(f)


def damping_torques(chain: Chain, state: State):
    """Joint viscous damping -k_omega omega^z (seed §4.3)."""
    return -chain.k_omega * joint_velocities(state)


def drag_forces(chain: Chain, state: State):
    """Quadratic air drag -k_v v |v| (seed §4.3), with a finite gradient at v = 0."""
    return -chain.k_v[:, None] * state.v * safe_norm(state.v, keepdims=True)


def external_forces(chain: Chain, state: State, control: Control):
    """F^e: gravity + torques (applied and damping) + drag + user point forces."""
    tau = control.tau + damping_torques(chain, state)
    F = gravity(chain) + torque_forces(state.x, tau) + drag_forces(chain, state) + control.F
    return F + link_gravity(chain) if chain.has_links else F


def energy(chain: Chain, state: State):
    """Kinetic plus gravitational potential energy, (1/2) sum m_i |v_i|^2 + g sum m_i y_i and the links' share
    (conserved without damping, drag, torques and guided motion). Works on a trajectory (leading axes) too."""
    kinetic = 0.5 * jnp.sum(chain.m[:, None] * state.v**2, (-2, -1))
    E = kinetic + chain.g * jnp.sum(chain.m * state.x[..., 1], -1)
    return E + link_energy(chain, state) if chain.has_links else E
