"""Control environments with gymnax's functional API, a Brax/Playground adapter and Gymnasium-exact presets.

Every environment follows gymnax::

    env, params = envs.make("CartPole-v1")             # or envs.GymCartPole(), env.default_params
    obs, state = env.reset(key, params)
    obs, state, reward, done, info = env.step(key, state, action, params)

``step`` resets an environment whose episode ended (``done``: terminated or truncated) from a fresh key, as gymnax
does; ``step_env`` is the step alone. ``info`` holds ``terminated``, ``truncated`` and ``discount`` (0 where
terminated). The environment object holds only its structure (hashable: ``jax.jit(env.step)`` works); the physical
and task parameters are arrays in :class:`EnvParams`, so ``jax.vmap`` over a batch of params varies them. ``params``
may be left out (the defaults). The time step ``dt`` is part of the structure (it decides the compiled program).

Gymnasium presets (``GymCartPole``, ``GymAcrobot``, ``GymPendulum``; ``make("CartPole-v1")`` ...) have Gymnasium's
state vector, dynamics, update rule, action mapping, observations, rewards, termination and truncation; their
accelerations come from the diffchain chain model (:mod:`diffchain.systems`), in Gymnasium's coordinates, and are
advanced with Gymnasium's own update rule (explicit Euler for CartPole, one RK4 step with angle wrapping and velocity
clipping for Acrobot, semi-implicit Euler with velocity clipping for Pendulum), which no diffchain integrator
reproduces: those integrate the points' Cartesian coordinates. Observations are in the state's dtype (Gymnasium
casts them to float32).

The seed's tasks (seed 000 Part III: ``PendulumSwingUp``, ``AcrobotSwingUp``, ``Weightlifting``, ``CartPoleBalance``,
``CartPoleSwingUp``, ``DoubleCartPoleBalance``, ``TripleCartPoleBalance``) simulate the chain itself: a step
integrates ``substeps`` quanta of ``dt / substeps`` with the action (and friction terms) held, by RK4 unless another
integrator is chosen (``env.with_integrator(dc.SemiImplicitEuler())``). Observations, rewards and failure rules are in
the seed's coordinates; where the seed gives none, each class states its choice.

:class:`BraxEnv` wraps any of them in the Brax/MuJoCo Playground API: ``reset(rng) -> State``,
``step(state, action) -> State``.
"""
from __future__ import annotations

import copy
import functools
import math
from typing import Any, Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import systems
from .integrate import rollout
from .integrators import RK4, Integrator
from .lean import PointMajor
from .model import State, runtime_check
from .solvers import Recursive


# ------------------------------------------------------------------------------------------------ spaces and params

class Discrete(eqx.Module):
    """Actions 0 .. n-1 (an integer scalar)."""

    n: int = eqx.field(static=True)
    shape: tuple = eqx.field(static=True, default=())
    dtype: Any = eqx.field(static=True, default=jnp.int32)

    def sample(self, key):
        return jax.random.randint(key, self.shape, 0, self.n).astype(self.dtype)

    def contains(self, x):
        x = jnp.asarray(x)
        return (x.shape == self.shape) & jnp.all((x >= 0) & (x < self.n) & (x == jnp.round(x)))


class Box(eqx.Module):
    """Real vectors of ``shape`` with ``low <= x <= high``."""

    low: jax.Array
    high: jax.Array
    shape: tuple = eqx.field(static=True)

    def sample(self, key):
        low, high = jnp.broadcast_to(self.low, self.shape), jnp.broadcast_to(self.high, self.shape)
        bounded = jnp.isfinite(low) & jnp.isfinite(high)
        u = jax.random.uniform(key, self.shape, minval=jnp.where(bounded, low, -1.0),
                               maxval=jnp.where(bounded, high, 1.0))
        return jnp.where(bounded, u, jax.random.normal(key, self.shape))

    def contains(self, x):
        x = jnp.asarray(x)
        return (x.shape == self.shape) & jnp.all((x >= self.low) & (x <= self.high))


class EnvParams(eqx.Module):
    """The parameters of an environment, as arrays: ``physics`` (the model's, by the names of its
    :mod:`diffchain.systems` builder), ``task`` (action bounds, thresholds, ...) and ``max_steps`` (the episode
    length; an episode is truncated after it). Read any of them as an attribute (``params.g``,
    ``params.max_steps``); ``params.replace(g=9.0, max_steps=200)`` returns a copy with new values."""

    physics: dict
    task: dict
    max_steps: jax.Array

    def __init__(self, physics: dict, task: dict, max_steps):
        self.physics = {k: jnp.asarray(v) for k, v in physics.items()}
        self.task = {k: jnp.asarray(v) for k, v in task.items()}
        self.max_steps = jnp.asarray(max_steps)

    def __getattr__(self, name):
        if name not in ("physics", "task"):
            for group in (self.physics, self.task):
                if name in group:
                    return group[name]
        raise AttributeError(f"EnvParams has no parameter {name!r}; it has max_steps, "
                             f"{', '.join([*self.physics, *self.task])}")

    def replace(self, **changes) -> "EnvParams":
        physics, task, max_steps = dict(self.physics), dict(self.task), self.max_steps
        for name, value in changes.items():
            if name == "max_steps":
                max_steps = value
            elif name in physics:
                physics[name] = value
            elif name in task:
                task[name] = value
            else:
                raise ValueError(f"EnvParams.replace: unknown parameter {name!r}; the parameters are max_steps, "
                                 f"{', '.join([*physics, *task])}")
        return EnvParams(physics, task, max_steps)


class EnvState(eqx.Module):
    """State of a seed task: the chain's Cartesian state and the steps taken in this episode."""

    sim: State
    steps: jax.Array


class GymState(eqx.Module):
    """State of a Gymnasium preset: Gymnasium's state vector (``env.unwrapped.state``) and the steps taken."""

    s: jax.Array
    steps: jax.Array


# ------------------------------------------------------------------------------------------------ the gymnax API

class Environment:
    """Base class with gymnax's API. Subclasses define ``default_params``, ``reset_env``, ``step_env``,
    ``action_space`` and ``observation_space``. Instances are immutable, hashable Python objects holding no arrays."""

    dt: float

    @property
    def name(self) -> str:
        return type(self).__name__

    def __repr__(self):
        return f"{self.name}(dt={self.dt})"

    @property
    def default_params(self) -> EnvParams:
        raise NotImplementedError

    @property
    def num_actions(self) -> int:
        """Discrete: the number of actions; continuous: the size of an action."""
        space = self.action_space()
        return space.n if isinstance(space, Discrete) else int(np.prod(space.shape))

    def reset(self, key, params: EnvParams | None = None):
        """``(obs, state)`` of a fresh episode."""
        return self.reset_env(key, self.default_params if params is None else params)

    def step(self, key, state, action, params: EnvParams | None = None):
        """``(obs, state, reward, done, info)``; where ``done``, obs and state are those of a fresh episode (from a
        key split off ``key``, as in gymnax), reward and info those of the step that ended the episode."""
        params = self.default_params if params is None else params
        key, key_reset = jax.random.split(key)
        obs_st, state_st, reward, done, info = self.step_env(key, state, action, params)
        obs_re, state_re = self.reset_env(key_reset, params)
        state = jax.tree.map(lambda a, b: jnp.where(done, a, b), state_re, state_st)
        return jnp.where(done, obs_re, obs_st), state, reward, done, info

    def reset_env(self, key, params: EnvParams):
        raise NotImplementedError

    def step_env(self, key, state, action, params: EnvParams):
        """The step without the reset: ``(obs, state, reward, done, info)``."""
        raise NotImplementedError

    def action_space(self, params: EnvParams | None = None):
        raise NotImplementedError

    def observation_space(self, params: EnvParams | None = None):
        raise NotImplementedError

    def _info(self, terminated, truncated):
        return {"terminated": terminated, "truncated": truncated,
                "discount": jnp.where(terminated, 0.0, 1.0).astype(jnp.result_type(float))}

    def _action(self, action, shape):
        """``action`` as a float array of ``shape``: a ValueError naming the shapes otherwise."""
        action = jnp.asarray(action)
        if action.size != math.prod(shape):
            raise ValueError(f"{self.name}.step: action must have shape {shape}, got shape {action.shape}")
        return action.reshape(shape).astype(jnp.result_type(float))

    def _discrete(self, action, n, meaning):
        """A discrete ``action`` (0 .. n-1) as an int32 scalar, checked when the program runs."""
        action = jnp.asarray(action)
        if action.size != 1:
            raise ValueError(f"{self.name}.step: action must be one integer ({meaning}), got shape {action.shape}")
        action = action.reshape(())
        bad = (action < 0) | (action > n - 1) | (action != jnp.round(action))
        action = runtime_check(action, bad, f"{self.name}.step: action must be {meaning}", action)
        return action.astype(jnp.int32)


def _wrap(x, low, high):
    """Gymnasium's ``wrap``: x shifted by whole periods (high - low) into [low, high] (unchanged inside)."""
    period = high - low
    x = jnp.where(x > high, x - period * jnp.ceil((x - high) / period), x)
    return jnp.where(x < low, x + period * jnp.ceil((low - x) / period), x)


# ------------------------------------------------------------------------------------------------ Gymnasium presets

class GymCartPole(Environment):
    """Gymnasium's CartPole-v1: actions 0 (force -force_mag) and 1 (+force_mag) on the cart, explicit Euler
    (``kinematics_integrator="euler"``; anything else: Gymnasium's semi-implicit Euler) with dt = 0.02; state and
    observation (x, x', theta, theta'); reward 1 per step (``sutton_barto_reward``: 0, and -1 on termination);
    terminates when |x| > 2.4 or |theta| > 12 degrees; truncated after 500 steps. Accelerations from
    ``systems.gym_cartpole(g, m_c, m_p, l)``."""

    def __init__(self, kinematics_integrator: str = "euler", sutton_barto_reward: bool = False, dt: float = 0.02):
        self.kinematics_integrator, self.sutton_barto_reward, self.dt = kinematics_integrator, sutton_barto_reward, dt

    name = "CartPole-v1"

    @property
    def default_params(self):
        return EnvParams(dict(g=9.8, m_c=1.0, m_p=0.1, l=0.5),
                         dict(force_mag=10.0, x_threshold=2.4, theta_threshold=12 * 2 * math.pi / 360), 500)

    def reset_env(self, key, params):
        s = jax.random.uniform(key, (4,), minval=-0.05, maxval=0.05, dtype=jnp.result_type(float))
        return s, GymState(s, jnp.asarray(0, jnp.int32))

    def step_env(self, key, state, action, params):
        action = self._discrete(action, 2, "0 (push left) or 1 (push right)")
        force = jnp.where(action == 1, params.force_mag, -params.force_mag)
        x, x_dot, theta, theta_dot = state.s
        bench = systems.gym_cartpole(**params.physics)
        xacc, thetaacc = bench.qdd(jnp.stack([x, theta]), jnp.stack([x_dot, theta_dot]), force)
        tau = self.dt
        if self.kinematics_integrator == "euler":
            x, x_dot, theta, theta_dot = (x + tau * x_dot, x_dot + tau * xacc, theta + tau * theta_dot,
                                          theta_dot + tau * thetaacc)
        else:
            x_dot = x_dot + tau * xacc
            x = x + tau * x_dot
            theta_dot = theta_dot + tau * thetaacc
            theta = theta + tau * theta_dot
        s = jnp.stack([x, x_dot, theta, theta_dot])
        terminated = ((x < -params.x_threshold) | (x > params.x_threshold) | (theta < -params.theta_threshold)
                      | (theta > params.theta_threshold))
        if self.sutton_barto_reward:
            reward = jnp.where(terminated, -1.0, 0.0)
        else:
            reward = jnp.ones_like(x)
        steps = state.steps + 1
        truncated = steps >= params.max_steps
        return s, GymState(s, steps), reward.astype(s.dtype), terminated | truncated, self._info(terminated, truncated)

    def action_space(self, params=None):
        return Discrete(2)

    def observation_space(self, params=None):
        p = self.default_params if params is None else params
        high = jnp.stack([2 * p.x_threshold, jnp.inf, 2 * p.theta_threshold, jnp.inf])
        return Box(-high, high, (4,))


class GymAcrobot(Environment):
    """Gymnasium's Acrobot-v1 ("book" dynamics): actions 0, 1, 2 = torques ``torques`` = (-1, 0, 1) at joint 2;
    one RK4 step of dt = 0.2 on (theta_1, theta_2, theta_1', theta_2') (theta_1 from hanging down), then the angles
    wrapped into [-pi, pi] and the rates clipped to 4 pi and 9 pi; observation (cos, sin of both angles, rates);
    reward -1, 0 on termination (tip above -cos theta_1 - cos(theta_1 + theta_2) > 1); truncated after 500 steps.
    Accelerations from ``systems.acrobot(...)`` (I_1, I_2 central, g = 9.8); Gymnasium's "nips" variant drops a
    Coriolis term of the true dynamics and has no chain model."""

    def __init__(self, dt: float = 0.2):
        self.dt = dt

    name = "Acrobot-v1"

    @property
    def default_params(self):
        return EnvParams({**systems.ACROBOT, "g": 9.8},
                         dict(torques=jnp.array([-1.0, 0.0, 1.0]), max_vel_1=4 * math.pi, max_vel_2=9 * math.pi),
                         500)

    def reset_env(self, key, params):
        s = jax.random.uniform(key, (4,), minval=-0.1, maxval=0.1, dtype=jnp.result_type(float))
        return self._obs(s), GymState(s, jnp.asarray(0, jnp.int32))

    @staticmethod
    def _obs(s):
        return jnp.stack([jnp.cos(s[0]), jnp.sin(s[0]), jnp.cos(s[1]), jnp.sin(s[1]), s[2], s[3]])

    def step_env(self, key, state, action, params):
        action = self._discrete(action, 3, "0, 1 or 2 (torque -1, 0, +1)")
        torque = params.torques[action]
        bench = systems.acrobot(**params.physics)
        shift = jnp.array([math.pi / 2, 0.0])  # Gymnasium's theta_1 is diffchain's + pi/2

        def derivs(y):
            qdd = bench.qdd(y[:2] - shift, y[2:], jnp.stack([0.0 * torque, torque]))
            return jnp.concatenate([y[2:], qdd])

        y0, dt = state.s, self.dt
        dt2 = dt / 2.0
        k1 = derivs(y0)
        k2 = derivs(y0 + dt2 * k1)
        k3 = derivs(y0 + dt2 * k2)
        k4 = derivs(y0 + dt * k3)
        ns = y0 + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        s = jnp.stack([_wrap(ns[0], -math.pi, math.pi), _wrap(ns[1], -math.pi, math.pi),
                       jnp.clip(ns[2], -params.max_vel_1, params.max_vel_1),
                       jnp.clip(ns[3], -params.max_vel_2, params.max_vel_2)])
        terminated = -jnp.cos(s[0]) - jnp.cos(s[1] + s[0]) > 1.0
        steps = state.steps + 1
        truncated = steps >= params.max_steps
        reward = jnp.where(terminated, 0.0, -1.0).astype(s.dtype)
        return self._obs(s), GymState(s, steps), reward, terminated | truncated, self._info(terminated, truncated)

    def action_space(self, params=None):
        return Discrete(3)

    def observation_space(self, params=None):
        p = self.default_params if params is None else params
        high = jnp.stack([1.0, 1.0, 1.0, 1.0, p.max_vel_1, p.max_vel_2])
        return Box(-high, high, (6,))


class GymPendulum(Environment):
    """Gymnasium's Pendulum-v1: a torque in [-max_torque, max_torque] = [-2, 2] (clipped) at the pin of a uniform
    rod; theta from the upright; semi-implicit Euler with dt = 0.05, the rate clipped to max_speed = 8; observation
    (cos theta, sin theta, theta'); reward -(normalized theta^2 + 0.1 theta'^2 + 0.001 u^2) of the state before the
    step; never terminates, truncated after 200 steps; starts uniform in [-pi, pi] x [-1, 1]. Accelerations from
    ``systems.gym_pendulum(g, m, l)``."""

    def __init__(self, dt: float = 0.05):
        self.dt = dt

    name = "Pendulum-v1"

    @property
    def default_params(self):
        return EnvParams(dict(g=10.0, m=1.0, l=1.0), dict(max_torque=2.0, max_speed=8.0), 200)

    def reset_env(self, key, params):
        dtype = jnp.result_type(float)
        s = jax.random.uniform(key, (2,), minval=jnp.array([-math.pi, -1.0]), maxval=jnp.array([math.pi, 1.0]),
                               dtype=dtype)
        return self._obs(s), GymState(s, jnp.asarray(0, jnp.int32))

    @staticmethod
    def _obs(s):
        return jnp.stack([jnp.cos(s[0]), jnp.sin(s[0]), s[1]])

    def step_env(self, key, state, action, params):
        u = jnp.clip(self._action(action, (1,)), -params.max_torque, params.max_torque)[0]
        th, thdot = state.s
        costs = (jnp.mod(th + math.pi, 2 * math.pi) - math.pi) ** 2 + 0.1 * thdot**2 + 0.001 * u**2
        thdd = systems.gym_pendulum(**params.physics).qdd(th[None], thdot[None], u)[0]
        newthdot = jnp.clip(thdot + thdd * self.dt, -params.max_speed, params.max_speed)
        s = jnp.stack([th + newthdot * self.dt, newthdot])
        steps = state.steps + 1
        terminated, truncated = jnp.asarray(False), steps >= params.max_steps
        return self._obs(s), GymState(s, steps), -costs, truncated, self._info(terminated, truncated)

    def action_space(self, params=None):
        p = self.default_params if params is None else params
        return Box(-p.max_torque[None], p.max_torque[None], (1,))

    def observation_space(self, params=None):
        p = self.default_params if params is None else params
        high = jnp.stack([1.0, 1.0, p.max_speed])
        return Box(-high, high, (3,))


# ------------------------------------------------------------------------------------------------ the seed's tasks

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

    def step_env(self, key, state, action, params):
        bench = self.build(**params.physics)
        action = jnp.clip(self._action(action, (self.action_size,)), params.low, params.high)
        u = bench.to_control(*bench.to_q(state.sim), action if self.action_size > 1 else action[0])
        sim, _ = rollout(bench.chain, state.sim, lambda s: u, self.dt / self.substeps, n_steps=self.substeps,
                         integrator=self.integrator, check=False, backend=self.backend)  # the input held
        q, qd = bench.to_q(sim)
        steps = state.steps + 1
        terminated, truncated = self.failed(q, qd, params), steps >= params.max_steps
        reward = jnp.asarray(self.reward(q, qd, action, params), sim.x.dtype)
        return (self.observe(q, qd), EnvState(sim, steps), reward, terminated | truncated,
                self._info(terminated, truncated))

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


# ------------------------------------------------------------------------------------------------ Brax adapter

class BraxState(eqx.Module):
    """Brax's / MuJoCo Playground's ``State``: ``pipeline_state`` is the wrapped environment's state."""

    pipeline_state: Any
    obs: jax.Array
    reward: jax.Array
    done: jax.Array
    metrics: dict = eqx.field(default_factory=dict)
    info: dict = eqx.field(default_factory=dict)

    def replace(self, **changes) -> "BraxState":
        return eqx.tree_at(lambda s: [getattr(s, k) for k in changes], self, list(changes.values()),
                           is_leaf=lambda x: x is None)


class BraxEnv:
    """An environment of this module in the Brax/Playground API: ``reset(rng) -> BraxState``,
    ``step(state, action) -> BraxState`` (reward and done as floats, the key carried in ``info["rng"]``,
    ``info["truncation"]`` as Brax's EpisodeWrapper sets it). As in Brax, ``step`` does not reset
    (``auto_reset=True``: it does, as the gymnax ``step``)."""

    def __init__(self, env: Environment, params: EnvParams | None = None, auto_reset: bool = False):
        self.env, self.params, self.auto_reset = env, env.default_params if params is None else params, auto_reset

    @property
    def observation_size(self) -> int:
        return int(np.prod(self.env.observation_space(self.params).shape))

    @property
    def action_size(self) -> int:
        return self.env.num_actions

    @property
    def unwrapped(self) -> Environment:
        return self.env

    def reset(self, rng) -> BraxState:
        rng, key = jax.random.split(rng)
        obs, state = self.env.reset(key, self.params)
        zero = jnp.zeros((), obs.dtype)
        return BraxState(state, obs, zero, zero, {}, {"rng": rng, "truncation": zero, "discount": zero + 1})

    def step(self, state: BraxState, action) -> BraxState:
        rng, key = jax.random.split(state.info["rng"])
        step = self.env.step if self.auto_reset else self.env.step_env
        obs, inner, reward, done, info = step(key, state.pipeline_state, action, self.params)
        f = obs.dtype
        return BraxState(inner, obs, reward.astype(f), done.astype(f), state.metrics,
                         {**state.info, "rng": rng, "truncation": info["truncated"].astype(f),
                          "discount": info["discount"].astype(f)})


# ------------------------------------------------------------------------------------------------ registry

TASKS = {cls.__name__: cls for cls in (PendulumSwingUp, AcrobotSwingUp, Weightlifting, CartPoleBalance,
                                       CartPoleSwingUp, DoubleCartPoleBalance, TripleCartPoleBalance)}
GYM = {"CartPole-v1": GymCartPole, "Acrobot-v1": GymAcrobot, "Pendulum-v1": GymPendulum}
REGISTERED = (*GYM, *TASKS)


def make(name: str, **kwargs):
    """``(env, env.default_params)`` as gymnax's ``make``: a Gymnasium preset ("CartPole-v1", "Acrobot-v1",
    "Pendulum-v1") or a seed task by class name; ``kwargs`` go to its constructor."""
    cls = GYM.get(name) or TASKS.get(name)
    if cls is None:
        raise ValueError(f"make: name must be one of {', '.join(REGISTERED)}, got {name!r}")
    env = cls(**kwargs)
    return env, env.default_params
