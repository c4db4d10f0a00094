"""Gymnasium-exact presets: CartPole-v1, Acrobot-v1 and Pendulum-v1 with Gymnasium's state vector, update rule,
observations, rewards and termination; accelerations from the chain model (:mod:`diffchain.systems`).
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from .. import systems
from .._model.checks import runtime_checks
from .._xla.small_chain import ShortChain
from .base import Box, Discrete, Environment, EnvParams, GymState


def _wrap(x, low, high):
    """Gymnasium's ``wrap``: x shifted by whole periods (high - low) into [low, high] (unchanged inside)."""
    period = high - low
    x = jnp.where(x > high, x - period * jnp.ceil((x - high) / period), x)
    return jnp.where(x < low, x + period * jnp.ceil((low - x) / period), x)


def _flag(value, who, name):
    if not isinstance(value, bool):
        raise TypeError(f"{who}: {name} must be a bool, got {type(value).__name__}")
    return value


class _GymPreset(Environment):
    """A Gymnasium preset: ``reset`` checks the physical parameters (finite; masses, lengths and inertias
    positive), as the chain model would; ``step`` trusts them (a program without host callbacks for them)."""

    _positive: tuple = ()

    def check_params(self, obs, params):
        checks = [(~((params.physics[k] > 0) & jnp.isfinite(params.physics[k])),
                   f"{self.name}.reset: params.{k} must be positive and finite", params.physics[k])
                  for k in self._positive]
        checks += [(~jnp.all(jnp.isfinite(v)), f"{self.name}.reset: params.{k} must be finite", v)
                   for k, v in {**params.physics, **params.task}.items() if k not in self._positive]
        checks.append((~(params.max_steps > 0), f"{self.name}.reset: params.max_steps must be positive",
                       params.max_steps))
        return runtime_checks((obs,), checks)[0]


class GymCartPole(_GymPreset):
    """Gymnasium's CartPole-v1: actions 0 (force -force_mag) and 1 (+force_mag) on the cart, explicit Euler
    (``kinematics_integrator="euler"``; anything else: Gymnasium's semi-implicit Euler) with dt = 0.02; state and
    observation (x, x', theta, theta'); reward 1 per step (``sutton_barto_reward``: 0, and -1 on termination);
    terminates when |x| > 2.4 or |theta| > 12 degrees; truncated after 500 steps. Accelerations from
    ``systems.gym_cartpole(g, m_c, m_p, l, pole="points")`` (the pole as its equivalent point masses) by
    :class:`diffchain.ShortChain`. ``continuous=True``: an action a in [-1, 1] (shape (1,), clipped) pushes with
    a force_mag (a = -1, +1: actions 0, 1), as Brax's trainers act."""

    _positive = ("m_c", "m_p", "l")

    def __init__(self, kinematics_integrator: str = "euler", sutton_barto_reward: bool = False, dt: float = 0.02,
                 continuous: bool = False):
        self.kinematics_integrator, self.sutton_barto_reward, self.dt = kinematics_integrator, sutton_barto_reward, dt
        self.continuous = _flag(continuous, "GymCartPole", "continuous")

    name = "CartPole-v1"

    @property
    def default_params(self):
        return EnvParams(dict(g=9.8, m_c=1.0, m_p=0.1, l=0.5),
                         dict(force_mag=10.0, x_threshold=2.4, theta_threshold=12 * 2 * math.pi / 360), 500)

    def reset_env(self, key, params):
        s = jax.random.uniform(key, (4,), minval=-0.05, maxval=0.05, dtype=jnp.result_type(float))
        return s, GymState(s, jnp.asarray(0, jnp.int32))

    def transition(self, key, state, action, params):
        if self.continuous:
            force = jnp.clip(self._action(action, (1,))[0], -1.0, 1.0) * params.force_mag
        else:
            action = self._discrete(action, 2, "0 (push left) or 1 (push right)")
            force = jnp.where(action == 1, params.force_mag, -params.force_mag)
        x, x_dot, theta, theta_dot = state.s
        # the pole as its equivalent point masses, solved by ShortChain: the same motion as the rigid link's, a
        # program that compiles in a third of the time; the parameters are checked by reset
        bench = systems.gym_cartpole(**params.physics, check=False, pole="points")
        xacc, thetaacc = bench.qdd(jnp.stack([x, theta]), jnp.stack([x_dot, theta_dot]), force, solver=ShortChain(),
                                   check=False)
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
        return s, GymState(s, state.steps + 1), reward.astype(s.dtype), terminated

    def action_space(self, params=None):
        return Box(-jnp.ones(1), jnp.ones(1), (1,)) if self.continuous else Discrete(2)

    def observation_space(self, params=None):
        p = self.default_params if params is None else params
        high = jnp.stack([2 * p.x_threshold, jnp.inf, 2 * p.theta_threshold, jnp.inf])
        return Box(-high, high, (4,))


class GymAcrobot(_GymPreset):
    """Gymnasium's Acrobot-v1 ("book" dynamics): actions 0, 1, 2 = torques ``torques`` = (-1, 0, 1) at joint 2;
    one RK4 step of dt = 0.2 on (theta_1, theta_2, theta_1', theta_2') (theta_1 from hanging down), then the angles
    wrapped into [-pi, pi] and the rates clipped to 4 pi and 9 pi; observation (cos, sin of both angles, rates);
    reward -1, 0 on termination (tip above -cos theta_1 - cos(theta_1 + theta_2) > 1); truncated after 500 steps.
    Accelerations from ``systems.acrobot(...)`` (I_1, I_2 central, g = 9.8); Gymnasium's "nips" variant drops a
    Coriolis term of the true dynamics and has no chain model. ``continuous=True``: an action a in [-1, 1] (shape
    (1,), clipped) applies a times the largest torque (a = -1, 0, +1: actions 0, 1, 2), as Brax's trainers act."""

    _positive = ("m1", "m2", "l1", "l2", "I1", "I2")

    def __init__(self, dt: float = 0.2, continuous: bool = False):
        self.dt, self.continuous = dt, _flag(continuous, "GymAcrobot", "continuous")

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

    def transition(self, key, state, action, params):
        if self.continuous:
            torque = jnp.clip(self._action(action, (1,))[0], -1.0, 1.0) * jnp.max(params.torques)
        else:
            torque = params.torques[self._discrete(action, 3, "0, 1 or 2 (torque -1, 0, +1)")]
        bench = systems.acrobot(**params.physics, check=False)  # the parameters are checked by reset
        shift = jnp.array([math.pi / 2, 0.0])  # Gymnasium's theta_1 is diffchain's + pi/2

        def derivs(y):
            qdd = bench.qdd(y[:2] - shift, y[2:], jnp.stack([0.0 * torque, torque]), check=False)
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
        reward = jnp.where(terminated, 0.0, -1.0).astype(s.dtype)
        return self._obs(s), GymState(s, state.steps + 1), reward, terminated

    def action_space(self, params=None):
        return Box(-jnp.ones(1), jnp.ones(1), (1,)) if self.continuous else Discrete(3)

    def observation_space(self, params=None):
        p = self.default_params if params is None else params
        high = jnp.stack([1.0, 1.0, 1.0, 1.0, p.max_vel_1, p.max_vel_2])
        return Box(-high, high, (6,))


class GymPendulum(_GymPreset):
    """Gymnasium's Pendulum-v1: a torque in [-max_torque, max_torque] = [-2, 2] (clipped) at the pin of a uniform
    rod; theta from the upright; semi-implicit Euler with dt = 0.05, the rate clipped to max_speed = 8; observation
    (cos theta, sin theta, theta'); reward -(normalized theta^2 + 0.1 theta'^2 + 0.001 u^2) of the state before the
    step; never terminates, truncated after 200 steps; starts uniform in [-pi, pi] x [-1, 1]. Accelerations from
    ``systems.gym_pendulum(g, m, l)``."""

    _positive = ("m", "l")

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

    def transition(self, key, state, action, params):
        u = jnp.clip(self._action(action, (1,)), -params.max_torque, params.max_torque)[0]
        th, thdot = state.s
        costs = (jnp.mod(th + math.pi, 2 * math.pi) - math.pi) ** 2 + 0.1 * thdot**2 + 0.001 * u**2
        thdd = systems.gym_pendulum(**params.physics, check=False).qdd(th[None], thdot[None], u, check=False)[0]
        newthdot = jnp.clip(thdot + thdd * self.dt, -params.max_speed, params.max_speed)
        s = jnp.stack([th + newthdot * self.dt, newthdot])
        return self._obs(s), GymState(s, state.steps + 1), -costs, jnp.asarray(False)

    def action_space(self, params=None):
        p = self.default_params if params is None else params
        return Box(-p.max_torque[None], p.max_torque[None], (1,))

    def observation_space(self, params=None):
        p = self.default_params if params is None else params
        high = jnp.stack([1.0, 1.0, p.max_speed])
        return Box(-high, high, (3,))
