"""The Brax/MuJoCo Playground adapter: ``reset(rng) -> State``, ``step(state, action) -> State`` around any environment.
"""
from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .base import Environment, EnvParams


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
