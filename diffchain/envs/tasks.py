"""The seed's control tasks (seed 000 Part III): the chain itself simulated, ``substeps`` quanta per step.
"""
from __future__ import annotations

import copy
import functools
import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from .. import systems
from .._simulate.rollout import rollout
from .._simulate.integrators import RK4, Integrator
from .._xla.point_major_backend import PointMajor
from .._solvers.recursive_solver import Recursive
from .base import Box, Environment, EnvParams, EnvState


class ChainEnv(Environment):
    """Base class of the seed's tasks: a :mod:`diffchain.systems` builder and its parameters, action bounds, a time
    step, substeps, an episode length and the task hooks (``initial``, ``reward``, ``failed``, ``observe``)."""

    def __init__(self, build: Callable, physics: dict, low, high, dt: float, substeps: int, max_steps: int,
                 task: dict | None = None, integrator: Integrator = RK4()):
        self.build, self.dt, self.substeps, self.integrator = build, dt, substeps, integrator
        low, high = np.atleast_1d(np.asarray(low, float)), np.atleast_1d(np.asarray(high, float))
        self._defaults = (dict(physics), {"low": low, "high": high, **(task or {})}, max_steps)
        self.action_size = low.shape[0]
        self.backend = self._backend()

    def _backend(self):
        # environments run in batches: the point-major backend wherever the chain allows it
        chain = self.build(**self._defaults[0]).chain
        fits = PointMajor().supports(chain, None, self.dt / self.substeps, self.substeps, Recursive(),
                                     self.integrator) is None
        return PointMajor() if fits else None

    def __repr__(self):
        return f"{self.name}(dt={self.dt}, substeps={self.substeps}, integrator={type(self.integrator).__name__}())"

    @property
    def default_params(self):
        return EnvParams(*self._defaults)

    def system(self, params: EnvParams | None = None) -> systems.Benchmark:
        """The benchmark object (chain and coordinate maps) with ``params``' physics."""
        return self.build(**(self.default_params if params is None else params).physics)

    def with_integrator(self, integrator: Integrator):
        """The same task integrated by ``integrator``."""
        new = copy.copy(self)
        new.integrator = integrator
        new.backend = new._backend()
        return new

    # task hooks, in the seed's coordinates ------------------------------------------------------------------------
    def initial(self, key, params):
        """(q, q') of a fresh episode."""
        raise NotImplementedError

    def reward(self, q, qd, action, params):
        raise NotImplementedError

    def failed(self, q, qd, params):
        return jnp.asarray(False)

    def observe(self, q, qd):
        return jnp.concatenate([q, qd])

    # API ----------------------------------------------------------------------------------------------------------
    def reset_env(self, key, params):
        bench = self.build(**params.physics)
        sim = bench.to_state(*self.initial(key, params))
        return self.observe(*bench.to_q(sim)), EnvState(sim, jnp.asarray(0, jnp.int32))

    def transition(self, key, state, action, params):
        bench = self.build(**params.physics)
        action = jnp.clip(self._action(action, (self.action_size,)), params.low, params.high)
        u = bench.to_control(*bench.to_q(state.sim), action if self.action_size > 1 else action[0])
        held = jax.tree.map(lambda a: jnp.broadcast_to(a, (self.substeps,) + a.shape), u)  # the input held
        sim, _ = rollout(bench.chain, state.sim, held, self.dt / self.substeps, integrator=self.integrator,
                         check=False, backend=self.backend)
        q, qd = bench.to_q(sim)
        reward = jnp.asarray(self.reward(q, qd, action, params), sim.x.dtype)
        return self.observe(q, qd), EnvState(sim, state.steps + 1), reward, self.failed(q, qd, params)

    def action_space(self, params=None):
        p = self.default_params if params is None else params
        return Box(p.low, p.high, (self.action_size,))

    def observation_space(self, params=None):
        p = self.default_params if params is None else params
        shape = jax.eval_shape(lambda: self.reset_env(jax.random.PRNGKey(0), p)[0]).shape
        return Box(jnp.full(shape, -jnp.inf), jnp.full(shape, jnp.inf), shape)


def _noise(key, shape, scale):
    return scale * jax.random.normal(key, shape, dtype=jnp.result_type(float))


def _angles(q, qd):
    return jnp.concatenate([jnp.cos(q), jnp.sin(q), qd])


class PendulumSwingUp(ChainEnv):
    """Seed §13.1: theta'' = sin(theta) + tau, theta from the upright, |tau| <= 0.225 -- too weak to lift the pendulum
    directly, it must be swung up. Starts hanging (theta = pi, small noise); reward cos(theta); 200 steps of 0.1 s."""

    def __init__(self, tau_max=0.225, dt=0.1, substeps=10, max_steps=200):
        super().__init__(systems.single_pendulum, {}, -tau_max, tau_max, dt, substeps, max_steps)

    def initial(self, key, params):
        k1, k2 = jax.random.split(key)
        return jnp.pi + _noise(k1, (1,), 0.05), _noise(k2, (1,), 0.05)

    def observe(self, q, qd):
        return _angles(q, qd)

    def reward(self, q, qd, action, params):
        return jnp.cos(q[0])


def _tip_height(q):
    """Height of the end of a pinned chain of unit links from its joint angles (theta_1 from +x)."""
    return jnp.sum(jnp.sin(jnp.cumsum(q)))


class AcrobotSwingUp(ChainEnv):
    """Seed §13.2 Acrobot (links m = 1, l = 1, l_c = 0.5, I = 1) with torques at the wrist (joint 1, the bar) and the
    hips (joint 2). Our choices: |tau_i| <= tau_max (1, 1; ``wrist=False`` fixes tau_1 = 0 as in Sutton's Acrobot);
    start hanging (theta = (-pi/2, 0) + noise); reward = tip height (from -2 to 2); 500 steps of 0.05 s."""

    def __init__(self, tau_max=(1.0, 1.0), wrist=True, dt=0.05, substeps=5, max_steps=500, **physics):
        high = np.asarray(tau_max, float) * np.array([1.0 if wrist else 0.0, 1.0])
        super().__init__(systems.acrobot, {**systems.ACROBOT, **physics}, -high, high, dt, substeps, max_steps)

    def initial(self, key, params):
        k1, k2 = jax.random.split(key)
        return jnp.array([-jnp.pi / 2, 0.0]) + _noise(k1, (2,), 0.05), _noise(k2, (2,), 0.05)

    def observe(self, q, qd):
        return _angles(q, qd)

    def reward(self, q, qd, action, params):
        return _tip_height(q)


class Weightlifting(ChainEnv):
    """Seed §13.3 three-link arm (Rosenstein & Barto) lifting a payload ``payload`` at its end. Our choices: start
    hanging (theta = (-pi/2, 0, 0)); torque bounds (60, 30, 10) N m (holding the stretched arm horizontal with a unit
    payload takes 59 N m at the shoulder); reward = payload height - 1e-4 |tau|^2; 300 steps of 0.02 s."""

    def __init__(self, payload=1.0, tau_max=(60.0, 30.0, 10.0), dt=0.02, substeps=4, max_steps=300, g=9.81):
        high = np.asarray(tau_max, float)
        super().__init__(systems.weightlifting_arm, dict(payload=payload, g=g), -high, high, dt, substeps, max_steps)

    def initial(self, key, params):
        k1, k2 = jax.random.split(key)
        return jnp.array([-jnp.pi / 2, 0.0, 0.0]) + _noise(k1, (3,), 0.05), _noise(k2, (3,), 0.05)

    def observe(self, q, qd):
        return _angles(q, qd)

    def reward(self, q, qd, action, params):
        return _tip_height(q) - 1e-4 * jnp.sum(action**2)


class CartPoleBalance(ChainEnv):
    """Seed §14.1 (Barto, Sutton & Anderson 1983) balance: F in [-10, 10], start within +-0.05 of upright at rest,
    +1 per step, fails when |theta| > 12 degrees or |x| > x_max = 2.4; 500 steps of 0.02 s. ``friction`` and the
    physical parameters as in ``systems.cartpole`` (Barto's friction and g = 9.81; ``GymCartPole`` is Gymnasium's)."""

    def __init__(self, friction="barto", dt=0.02, substeps=2, max_steps=500, **physics):
        super().__init__(functools.partial(systems.cartpole, friction), {**systems.CARTPOLE, **physics}, -10.0, 10.0,
                         dt, substeps, max_steps, task=dict(x_max=2.4, theta_max=12 * math.pi / 180))

    def initial(self, key, params):
        v = jax.random.uniform(key, (4,), minval=-0.05, maxval=0.05, dtype=jnp.result_type(float))
        return v[:2], v[2:]

    def reward(self, q, qd, action, params):
        return 1.0

    def failed(self, q, qd, params):
        return (jnp.abs(q[0]) > params.x_max) | (jnp.abs(q[1]) > params.theta_max)


class CartPoleSwingUp(CartPoleBalance):
    """Seed §14.1, the swing-up variant (Doya): start hanging at rest, reward cos(theta), fails when |x| > 2.4."""

    def initial(self, key, params):
        return jnp.array([0.0, jnp.pi]) + _noise(key, (2,), jnp.array([0.0, 0.05])), jnp.zeros(2)

    def observe(self, q, qd):
        return jnp.stack([q[0], jnp.cos(q[1]), jnp.sin(q[1]), qd[0], qd[1]])

    def reward(self, q, qd, action, params):
        return jnp.cos(q[1])

    def failed(self, q, qd, params):
        return jnp.abs(q[0]) > params.x_max


class _CartBalance(ChainEnv):
    """Multi-link cart balance: start within +-0.02 of upright at rest, +1 per step, fails when |x| > x_max or
    some |theta_i| > theta_max (our choices: 2.4 m, 0.3 rad)."""

    def initial(self, key, params):
        k = self._links
        v = jax.random.uniform(key, (k + 1,), minval=-0.02, maxval=0.02, dtype=jnp.result_type(float))
        return v.at[0].set(0.0), jnp.zeros(k + 1)

    def reward(self, q, qd, action, params):
        return 1.0

    def failed(self, q, qd, params):
        return (jnp.abs(q[0]) > params.x_max) | jnp.any(jnp.abs(q[1:]) > params.theta_max)


class DoubleCartPoleBalance(_CartBalance):
    """Seed §14.2 (Bogdanov 2004, Table 1) balance; our choices: cart force |u| <= 20 N, 1000 steps of 0.01 s."""

    _links = 2

    def __init__(self, u_max=20.0, dt=0.01, substeps=2, max_steps=1000, **physics):
        super().__init__(systems.double_cart_pendulum, {**systems.BOGDANOV, **physics}, -u_max, u_max, dt, substeps,
                         max_steps, task=dict(x_max=2.4, theta_max=0.3))


class TripleCartPoleBalance(_CartBalance):
    """Seed §14.3 (Si & Wang 2001) balance, input = motor voltage (cart force K_s u, K_s = 24.7 N/V), with viscous and
    Coulomb friction; our choices: |u| <= 1 V, 1000 steps of 0.01 s."""

    _links = 3

    def __init__(self, u_max=1.0, dt=0.01, substeps=4, max_steps=1000, coulomb="velocity", **physics):
        super().__init__(functools.partial(systems.triple_cart_pendulum, coulomb), {**systems.SI_WANG, **physics},
                         -u_max, u_max, dt, substeps, max_steps, task=dict(x_max=2.4, theta_max=0.3))
