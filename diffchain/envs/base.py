"""The gymnax API: spaces, :class:`EnvParams` (the physical and task parameters, batchable arrays), the states and the
:class:`Environment` base with ``reset``/``step`` (auto-reset, the final observation in the info) and ``step_env``.
"""
from __future__ import annotations

import copy
import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._state import State
from .._model.checks import runtime_check


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

    @property
    def dtype(self):
        """The dtype of the bounds (gymnax's ``Box.dtype``; an environment's observations are in its state's)."""
        return jnp.result_type(self.low, self.high)

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


class Environment:
    """Base class with gymnax's API (gymnax >= 1.0; ``with_legacy_api()``: the API before 1.0). Subclasses define
    ``default_params``, ``reset_env``, ``transition`` (the step: obs, state, reward, terminated), ``action_space`` and
    ``observation_space``. Instances are immutable, hashable Python objects holding no arrays."""

    dt: float
    legacy_api: bool = False

    @property
    def name(self) -> str:
        return type(self).__name__

    def __repr__(self):
        return f"{self.name}(dt={self.dt}{', legacy_api=True' if self.legacy_api else ''})"

    @property
    def default_params(self) -> EnvParams:
        raise NotImplementedError

    @property
    def num_actions(self) -> int:
        """Discrete: the number of actions; continuous: the size of an action."""
        space = self.action_space()
        return space.n if isinstance(space, Discrete) else int(np.prod(space.shape))

    def with_legacy_api(self, legacy: bool = True) -> "Environment":
        """A copy with gymnax's API before 1.0 (``legacy=True``): ``step`` returns ``(obs, state, reward, done,
        info)`` and ``step_env``'s ``done`` includes truncation."""
        if not isinstance(legacy, bool):
            raise TypeError(f"{self.name}.with_legacy_api: legacy must be a bool, got {type(legacy).__name__}")
        new = copy.copy(self)
        new.legacy_api = legacy
        return new

    def reset(self, key, params: EnvParams | None = None):
        """``(obs, state)`` of a fresh episode; the physical parameters are checked here (also under jit, when the
        program runs), not in ``step``."""
        params = self.default_params if params is None else params
        obs, state = self.reset_env(key, params)
        return self.check_params(obs, params), state

    def step(self, key, state, action, params: EnvParams | None = None):
        """``(obs, state, reward, terminated, truncated, info)`` as gymnax's; where the episode ended (terminated or
        truncated), obs and state are those of a fresh episode (from a key split off ``key``), reward and the flags
        those of the step that ended it, and ``info["final_observation"]`` is its last observation (to bootstrap a
        value at truncation). ``info`` also holds ``terminated``, ``truncated`` and ``discount`` (0 where
        terminated). With ``with_legacy_api()``: ``(obs, state, reward, done, info)``."""
        params = self.default_params if params is None else params
        key_step, key_reset = jax.random.split(key)
        obs_st, state_st, reward, terminated = self.transition(key_step, state, action, params)
        truncated = self.is_truncated(state_st, params)
        done = terminated | truncated
        obs_re, state_re = self.reset_env(key_reset, params)
        state = jax.tree.map(lambda a, b: jnp.where(done, a, b), state_re, state_st)
        obs = jnp.where(done, obs_re, obs_st)
        info = {**self._info(terminated, truncated), "final_observation": obs_st}
        if self.legacy_api:
            return obs, state, reward, done, info
        return obs, state, reward, terminated, truncated, info

    def step_env(self, key, state, action, params: EnvParams):
        """The step without the reset: ``(obs, state, reward, terminated, info)`` as gymnax's (with
        ``with_legacy_api()``: ``done`` = terminated or truncated in place of ``terminated``); ``info`` holds
        ``terminated``, ``truncated`` and ``discount``."""
        obs, state, reward, terminated = self.transition(key, state, action, params)
        truncated = self.is_truncated(state, params)
        return (obs, state, reward, (terminated | truncated) if self.legacy_api else terminated,
                self._info(terminated, truncated))

    def is_truncated(self, state, params: EnvParams):
        """Whether ``state`` (after a step) reached the episode length ``params.max_steps``."""
        return state.steps >= params.max_steps

    def transition(self, key, state, action, params: EnvParams):
        """One step of the dynamics and the task: ``(obs, state, reward, terminated)``, the step count advanced."""
        raise NotImplementedError

    def check_params(self, obs, params: EnvParams):
        """``obs`` after the checks of ``params`` (none here; the Gymnasium presets check their physics)."""
        return obs

    def reset_env(self, key, params: EnvParams):
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
