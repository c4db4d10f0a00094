"""Functional control tasks on the seed's benchmark objects (seed 000 Part III), in the style of gymnax / Brax.

An environment is an immutable Equinox module; ``reset(key) -> (state, obs)`` and
``step(state, action) -> (state, obs, reward, done)`` are pure functions, so ``jax.jit`` and ``jax.vmap`` over
thousands of copies work directly:

    env = CartPoleBalance()
    state, obs = jax.vmap(env.reset)(jax.random.split(key, 4096))
    state, obs, reward, done = jax.jit(jax.vmap(env.step))(state, actions)

Each task wraps a :class:`diffchain.systems.Benchmark`: observations, rewards and termination are written in the
seed's coordinates (q, q'), the simulation is the chain model. Actions are clipped to [low, high]; ``done`` is True
once the task failed or ``max_steps`` were taken; ``step`` does not reset by itself (``auto_reset`` does). A step
integrates ``substeps`` quanta of length ``dt / substeps`` with the action (and friction terms) held, by RK4 unless
another integrator is chosen (``env.with_integrator(dc.SemiImplicitEuler())``).
Where the seed gives no bounds or termination rule (Acrobot, weightlifting, double and triple cart), the choices are
stated in each class and are parameters.
"""
from __future__ import annotations

import copy
from typing import Callable

import equinox as eqx
import jax
import jax.numpy as jnp

from . import systems
from .integrate import Backend, rollout
from .integrators import RK4, Integrator
from .lean import PointMajor
from .model import Chain, State
from .solvers import Recursive


class EnvState(eqx.Module):
    sim: State
    steps: jax.Array


class ChainEnv(eqx.Module):
    """Base class: a benchmark object, a time step, action bounds, an episode length and three task hooks."""

    chain: Chain
    to_state: Callable = eqx.field(static=True)
    to_control: Callable = eqx.field(static=True)
    to_q: Callable = eqx.field(static=True)
    low: jax.Array
    high: jax.Array
    dt: float = eqx.field(static=True)
    substeps: int = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)
    integrator: Integrator = RK4()
    backend: Backend | None = None

    def __init__(self, system: systems.Benchmark, low, high, dt, substeps, max_steps):
        self.chain, self.to_state, self.to_control, self.to_q = system.chain, system.to_state, system.to_control, system.to_q
        self.low, self.high = jnp.atleast_1d(jnp.asarray(low, float)), jnp.atleast_1d(jnp.asarray(high, float))
        self.dt, self.substeps, self.max_steps = dt, substeps, max_steps
        # environments run in batches: the point-major backend wherever the chain allows it
        fits = PointMajor().supports(self.chain, None, dt / substeps, substeps, Recursive(), self.integrator) is None
        self.backend = PointMajor() if fits else None

    # task hooks, in the seed's coordinates ------------------------------------------------------------------------
    def initial(self, key):
        """(q, q') of a fresh episode."""
        raise NotImplementedError

    def reward(self, q, qd, action):
        raise NotImplementedError

    def failed(self, q, qd):
        return jnp.asarray(False)

    def observe(self, q, qd):
        return jnp.concatenate([q, qd])

    # API ----------------------------------------------------------------------------------------------------------
    def with_integrator(self, integrator: Integrator):
        """The same task integrated by ``integrator``."""
        new = copy.copy(self)
        object.__setattr__(new, "integrator", integrator)  # a frozen dataclass: copy, then set the one field
        return new

    @property
    def action_size(self) -> int:
        return self.low.shape[0]

    def reset(self, key):
        q, qd = self.initial(key)
        sim = self.to_state(q, qd)
        return EnvState(sim, jnp.asarray(0)), self.observe(*self.to_q(sim))

    def step(self, state: EnvState, action):
        action = jnp.clip(jnp.asarray(action, self.low.dtype).reshape(self.low.shape), self.low, self.high)
        u = self.to_control(*self.to_q(state.sim), action if self.action_size > 1 else action[0])
        h = self.dt / self.substeps
        sim, _ = rollout(self.chain, state.sim, lambda s: u, h, n_steps=self.substeps, integrator=self.integrator,
                         check=False, backend=self.backend)  # the input held over the substeps
        q, qd = self.to_q(sim)
        steps = state.steps + 1
        done = self.failed(q, qd) | (steps >= self.max_steps)
        return EnvState(sim, steps), self.observe(q, qd), self.reward(q, qd, action), done

    def auto_reset(self, state: EnvState, action, key):
        """``step``, then a fresh episode from ``key`` where the episode ended (the obs returned is the new one's)."""
        state, obs, reward, done = self.step(state, action)
        fresh, fresh_obs = self.reset(key)
        pick = lambda a, b: jnp.where(done, a, b)  # noqa: E731
        return jax.tree_util.tree_map(pick, fresh, state), pick(fresh_obs, obs), reward, done


def _noise(key, shape, scale):
    return scale * jax.random.normal(key, shape)


class PendulumSwingUp(ChainEnv):
    """Seed §13.1: theta'' = sin(theta) + tau, theta from the upright, |tau| <= 0.225 -- too weak to lift the pendulum
    directly, it must be swung up. Starts hanging (theta = pi, small noise); reward cos(theta); 200 steps of 0.1 s."""

    def __init__(self, tau_max=0.225, dt=0.1, substeps=10, max_steps=200):
        super().__init__(systems.single_pendulum(), -tau_max, tau_max, dt, substeps, max_steps)

    def initial(self, key):
        k1, k2 = jax.random.split(key)
        return jnp.pi + _noise(k1, (1,), 0.05), _noise(k2, (1,), 0.05)

    def observe(self, q, qd):
        return jnp.concatenate([jnp.cos(q), jnp.sin(q), qd])

    def reward(self, q, qd, action):
        return jnp.cos(q[0])


def _tip_height(q):
    """Height of the end of a pinned chain of unit links from its joint angles (theta_1 from +x)."""
    return jnp.sum(jnp.sin(jnp.cumsum(q)))


class AcrobotSwingUp(ChainEnv):
    """Seed §13.2 Acrobot (links m = 1, l = 1, l_c = 0.5, I = 1) with torques at the wrist (joint 1, the bar) and the
    hips (joint 2). Our choices: |tau_i| <= tau_max (1, 1; ``wrist=False`` fixes tau_1 = 0 as in Sutton's Acrobot);
    start hanging (theta = (-pi/2, 0) + noise); reward = tip height (from -2 to 2); 500 steps of 0.05 s."""

    def __init__(self, tau_max=(1.0, 1.0), wrist=True, dt=0.05, substeps=5, max_steps=500):
        high = jnp.asarray(tau_max, float) * jnp.array([1.0 if wrist else 0.0, 1.0])
        super().__init__(systems.acrobot(), -high, high, dt, substeps, max_steps)

    def initial(self, key):
        k1, k2 = jax.random.split(key)
        return jnp.array([-jnp.pi / 2, 0.0]) + _noise(k1, (2,), 0.05), _noise(k2, (2,), 0.05)

    def observe(self, q, qd):
        return jnp.concatenate([jnp.cos(q), jnp.sin(q), qd])

    def reward(self, q, qd, action):
        return _tip_height(q)


class Weightlifting(ChainEnv):
    """Seed §13.3 three-link arm (Rosenstein & Barto) lifting a payload ``payload`` at its end. Our choices: start
    hanging (theta = (-pi/2, 0, 0)); torque bounds (60, 30, 10) N m (holding the stretched arm horizontal with a unit
    payload takes 59 N m at the shoulder); reward = payload height - 1e-4 |tau|^2; 300 steps of 0.02 s."""

    def __init__(self, payload=1.0, tau_max=(60.0, 30.0, 10.0), dt=0.02, substeps=4, max_steps=300):
        high = jnp.asarray(tau_max, float)
        super().__init__(systems.weightlifting_arm(payload), -high, high, dt, substeps, max_steps)

    def initial(self, key):
        k1, k2 = jax.random.split(key)
        return jnp.array([-jnp.pi / 2, 0.0, 0.0]) + _noise(k1, (3,), 0.05), _noise(k2, (3,), 0.05)

    def observe(self, q, qd):
        return jnp.concatenate([jnp.cos(q), jnp.sin(q), qd])

    def reward(self, q, qd, action):
        return _tip_height(q) - 1e-4 * jnp.sum(action**2)


class CartPoleBalance(ChainEnv):
    """Seed §14.1 (Barto, Sutton & Anderson 1983) balance: F in [-10, 10], start within +-0.05 of upright at rest,
    +1 per step, fails when |theta| > 12 degrees or |x| > x_max = 2.4; 500 steps of 0.02 s."""

    def __init__(self, friction="barto", dt=0.02, substeps=2, max_steps=500, **params):
        super().__init__(systems.cartpole(friction, **params), -10.0, 10.0, dt, substeps, max_steps)

    def initial(self, key):
        v = jax.random.uniform(key, (4,), minval=-0.05, maxval=0.05)
        return v[:2], v[2:]

    def reward(self, q, qd, action):
        return jnp.asarray(1.0)

    def failed(self, q, qd):
        return (jnp.abs(q[0]) > 2.4) | (jnp.abs(q[1]) > 12 * jnp.pi / 180)


class CartPoleSwingUp(CartPoleBalance):
    """Seed §14.1, the swing-up variant (Doya): start hanging at rest, reward cos(theta), fails when |x| > 2.4."""

    def initial(self, key):
        return jnp.array([0.0, jnp.pi]) + _noise(key, (2,), jnp.array([0.0, 0.05])), jnp.zeros(2)

    def observe(self, q, qd):
        return jnp.stack([q[0], jnp.cos(q[1]), jnp.sin(q[1]), qd[0], qd[1]])

    def reward(self, q, qd, action):
        return jnp.cos(q[1])

    def failed(self, q, qd):
        return jnp.abs(q[0]) > 2.4


class _CartBalance(ChainEnv):
    """Multi-link cart balance: start within +-``spread`` of upright at rest, +1 per step, fails when |x| > x_max or
    some |theta_i| > theta_max (our choices: 2.4 m, 0.3 rad)."""

    def initial(self, key):
        k = self.chain.n - 1
        v = jax.random.uniform(key, (k + 1,), minval=-0.02, maxval=0.02)
        return v.at[0].set(0.0), jnp.zeros(k + 1)

    def reward(self, q, qd, action):
        return jnp.asarray(1.0)

    def failed(self, q, qd):
        return (jnp.abs(q[0]) > 2.4) | jnp.any(jnp.abs(q[1:]) > 0.3)


class DoubleCartPoleBalance(_CartBalance):
    """Seed §14.2 (Bogdanov 2004, Table 1) balance; our choices: cart force |u| <= 20 N, 1000 steps of 0.01 s."""

    def __init__(self, u_max=20.0, dt=0.01, substeps=2, max_steps=1000, **params):
        super().__init__(systems.double_cart_pendulum(**params), -u_max, u_max, dt, substeps, max_steps)


class TripleCartPoleBalance(_CartBalance):
    """Seed §14.3 (Si & Wang 2001) balance, input = motor voltage (cart force K_s u, K_s = 24.7 N/V), with viscous and
    Coulomb friction; our choices: |u| <= 1 V, 1000 steps of 0.01 s."""

    def __init__(self, u_max=1.0, dt=0.01, substeps=4, max_steps=1000, **params):
        super().__init__(systems.triple_cart_pendulum(**params), -u_max, u_max, dt, substeps, max_steps)


TASKS = {cls.__name__: cls for cls in (PendulumSwingUp, AcrobotSwingUp, Weightlifting, CartPoleBalance,
                                       CartPoleSwingUp, DoubleCartPoleBalance, TripleCartPoleBalance)}
