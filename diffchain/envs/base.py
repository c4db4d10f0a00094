"""The gymnax API: spaces, :class:`EnvParams` (the physical and task parameters, batchable arrays), the states and the
:class:`Environment` base with ``reset``/``step`` (auto-reset) and ``step_env``.
"""
from __future__ import annotations

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
