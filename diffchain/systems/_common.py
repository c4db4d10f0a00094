"""What the benchmark objects share: the :class:`Benchmark` record and the maps between the seed's coordinates (pinned
chains: relative joint angles; carts: absolute angles from the upright, clockwise) and the chain's state and inputs.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import jax.numpy as jnp

from .._model.forces import external_forces
from .._model.rods import from_joint_angles
from .._model.geometry import (joint_accelerations, joint_angles, joint_velocities, link_angles,
                               link_angular_velocities)
from .._model.chain import Chain
from .._model.model import Model
from .._state import Control, State
from .._solvers.forward import forward_dynamics
from .._solvers.recursive_solver import Recursive


HALF_PI = jnp.pi / 2


def _wrap(a):
    return jnp.arctan2(jnp.sin(a), jnp.cos(a))


class Benchmark(NamedTuple):
    """A benchmark object: its chain and the maps between the seed's (q, qd, u) and diffchain's State/Control.

    to_state(q, qd) -> State;  to_control(q, qd, u) -> Control (inputs, gains and the friction terms that diffchain
    has no model feature for);  to_qdd(state, a) -> qdd (point accelerations a back to the seed's coordinates);
    to_q(state) -> (q, qd) (angles wrapped to (-pi, pi]; for policies in ``dc.rollout``).
    """

    chain: Model
    to_state: Callable
    to_control: Callable
    to_qdd: Callable
    to_q: Callable

    def qdd(self, q, qd, u, solver=Recursive(), check=None):
        """qdd of the seed's coordinates computed by diffchain's forward dynamics (the chain model); ``check`` as
        :func:`diffchain.forward_dynamics`'s (False: a program without host callbacks)."""
        state = self.to_state(q, qd)
        return self.to_qdd(state, forward_dynamics(self.chain, state, self.to_control(q, qd, u), solver=solver,
                                                   check=check))


def _pinned(chain: Model, offset=0.0) -> Benchmark:
    """Point 1 fixed; q = diffchain joint angles minus ``offset`` on theta_1; u = torques at joints 1..n-1."""
    shift = jnp.zeros(chain.n - 1).at[0].set(offset)

    def to_state(q, qd):
        return from_joint_angles(chain, jnp.asarray(q) + shift, qd)

    def to_control(q, qd, u):
        u = jnp.atleast_1d(jnp.asarray(u, chain.m.dtype))
        return Control(tau=jnp.concatenate([u, jnp.zeros(chain.n - u.shape[0], u.dtype)]))

    def to_qdd(state, a):
        return joint_accelerations(state, a)[:-1]

    def to_q(state):
        return _wrap(joint_angles(state) - shift), joint_velocities(state)[:-1]

    return Benchmark(chain, to_state, to_control, to_qdd, to_q)


def cart_state(chain: Model, q, qd) -> State:
    """State of a cart chain from q = [x, psi_1..psi_k] (psi absolute, clockwise from the upright) and qd."""
    q, qd = jnp.asarray(q, chain.m.dtype), jnp.asarray(qd, chain.m.dtype)
    phi, phid = HALF_PI - q[1:], -qd[1:]
    theta = jnp.concatenate([phi[:1], jnp.diff(phi)])
    theta_d = jnp.concatenate([phid[:1], jnp.diff(phid)])
    return from_joint_angles(chain, theta, theta_d, base=jnp.stack([q[0], 0.0 * q[0]]),
                             base_velocity=jnp.stack([qd[0], 0.0 * qd[0]]))


def cart_qdd(state: State, a):
    """[xdd, psidd_1..psidd_k] from point accelerations: xdd = a_1,x and psidd_k = -phidd_k = -L_k^T (a_{k+1} - a_k)."""
    return jnp.concatenate([a[0, :1], -link_angular_velocities(state.x, a)])


def cart_q(state: State):
    """(q, qd) = ([x, psi_1..psi_k], rates) of a cart chain's state (inverse of :func:`cart_state`)."""
    psi = _wrap(HALF_PI - link_angles(state.x))
    psid = -link_angular_velocities(state.x, state.v)
    return jnp.concatenate([state.x[0, :1], psi]), jnp.concatenate([state.v[0, :1], psid])


def cart_generalized_control(Q) -> Control:
    """Control realising generalized forces Q = [Q_x, Q_psi_1..Q_psi_k]: a force Q_x on the cart, a couple -Q_psi_k on
    link k. A couple T_k on link k alone is tau_k - tau_{k+1} = T_k (seed §4.2), so tau_k = sum_{j >= k} T_j."""
    Q = jnp.asarray(Q)
    T = -Q[1:]
    tau = jnp.concatenate([jnp.cumsum(T[::-1])[::-1], jnp.zeros(1, Q.dtype)])
    F = jnp.zeros((Q.shape[0], 2), Q.dtype).at[0, 0].set(Q[0])
    return Control(tau=tau, F=F)


def _cart_chain(m_cart, L, mass, com, inertia, k_omega=None, g=9.81, check=True) -> Model:
    k = len(L)
    s = jnp.zeros((k + 1, 2)).at[0].set(jnp.array([0.0, 1.0]))
    return Chain(jnp.array([m_cart] + [0.0] * k), jnp.asarray(L), slider=[True] + [False] * k, s=s, c=0.0,
                 link_mass=jnp.asarray(mass), link_com=jnp.stack([jnp.asarray(com), jnp.zeros(k)], -1),
                 link_inertia=jnp.asarray(inertia), k_omega=k_omega, g=g, check=check)


def rail_normal_force(chain: Model, state: State, control: Control, a):
    """Vertical force of the rail on the cart, N_c = sum over the points of (M a - F^e)_y: rods and joint torques
    are internal, so the y-components of all constraint forces sum to the rail's reaction (pins: none here)."""
    r = (chain.M @ a.reshape(-1)).reshape(-1, 2) - external_forces(chain, state, control)
    return jnp.sum(r[:, 1])
