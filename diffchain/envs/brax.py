"""The Brax/MuJoCo Playground adapter: ``reset(rng) -> State``, ``step(state, action) -> State`` around any environment.

Where Brax can be imported, :func:`brax_env` makes a ``brax.envs.Env`` subclass whose states are Brax's ``State``
(``envs.BraxEnv`` is that class, imported on first use); otherwise a thin adapter with Brax's attribute names.
"""
from __future__ import annotations

import functools
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .base import Environment, EnvParams


class BraxState(eqx.Module):
    """Brax's / MuJoCo Playground's ``State`` where Brax is not installed: ``pipeline_state`` is the wrapped
    environment's state."""

    pipeline_state: Any
    obs: jax.Array
    reward: jax.Array
    done: jax.Array
    metrics: dict = eqx.field(default_factory=dict)
    info: dict = eqx.field(default_factory=dict)

    def replace(self, **changes) -> "BraxState":
        return eqx.tree_at(lambda s: [getattr(s, k) for k in changes], self, list(changes.values()),
                           is_leaf=lambda x: x is None)


class _Adapter:
    """An environment of this module in the Brax/Playground API: ``reset(rng) -> State``, ``step(state, action) ->
    State`` (reward and done as floats, the key carried in ``info["rng"]``).

    As a Brax environment, ``step`` neither resets nor ends an episode at the time limit: ``done`` is termination
    (failure) alone, and Brax's ``training.wrap(env, episode_length=env.episode_length)`` (``episode_length`` =
    ``params.max_steps``) ends episodes there, reporting truncation (``info["truncation"] = 1``) apart from
    termination. ``auto_reset=True``: ``step`` is the gymnax ``step`` (resets where the episode ended, the time limit
    included), with ``info["truncation"]`` as Brax's ``EpisodeWrapper`` sets it (1 at the time limit, unless
    terminated). Actions as the environment takes them: for Brax's trainers (actions in [-1, 1]) take a continuous
    environment (``envs.make("CartPole-v1", continuous=True)``).
    """

    _State = BraxState

    def __init__(self, env: Environment, params: EnvParams | None = None, auto_reset: bool = False):
        if not isinstance(env, Environment):
            raise TypeError(f"BraxEnv: env must be a diffchain.envs environment, got {type(env).__name__}")
        self.env, self.params, self.auto_reset = env, env.default_params if params is None else params, auto_reset

    def __repr__(self):
        return f"BraxEnv({self.env!r}, auto_reset={self.auto_reset})"

    @property
    def observation_size(self) -> int:
        return int(np.prod(self.env.observation_space(self.params).shape))

    @property
    def action_size(self) -> int:
        return self.env.num_actions

    @property
    def episode_length(self) -> int:
        """The episode length (``params.max_steps``), for ``training.wrap(env, episode_length=...)``."""
        return int(self.params.max_steps)

    @property
    def backend(self) -> str:
        return "diffchain"

    @property
    def unwrapped(self):
        return self

    def reset(self, rng):
        rng, key = jax.random.split(rng)
        obs, state = self.env.reset(key, self.params)
        zero = jnp.zeros((), obs.dtype)
        return self._State(state, obs, zero, zero, {}, {"rng": rng, "truncation": zero, "discount": zero + 1})

    def step(self, state, action):
        rng, key = jax.random.split(state.info["rng"])
        if self.auto_reset:
            obs, inner, reward, terminated, truncated, info = self.env.with_legacy_api(False).step(
                key, state.pipeline_state, action, self.params)
            done, truncation = terminated | truncated, truncated & ~terminated
        else:
            obs, inner, reward, terminated, info = self.env.with_legacy_api(False).step_env(
                key, state.pipeline_state, action, self.params)
            done, truncation = terminated, jnp.zeros_like(terminated)
        f = obs.dtype
        return state.replace(pipeline_state=inner, obs=obs, reward=reward.astype(f), done=done.astype(f),
                             info={**state.info, "rng": rng, "truncation": truncation.astype(f),
                                   "discount": info["discount"].astype(f)})


@functools.lru_cache(maxsize=None)
def brax_env() -> type:
    """The adapter class: a ``brax.envs.Env`` subclass (states: Brax's ``State``) where Brax can be imported, else the
    thin adapter (states: :class:`BraxState`)."""
    try:
        from brax.envs.base import Env, State
    except ImportError:  # Brax is optional
        return type("BraxEnv", (_Adapter,), {"__doc__": _Adapter.__doc__, "__module__": __name__})
    return type("BraxEnv", (_Adapter, Env), {"__doc__": _Adapter.__doc__, "__module__": __name__, "_State": State})
