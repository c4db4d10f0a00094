"""Control environments with gymnax's functional API, a Brax/Playground adapter and Gymnasium-exact presets.

Every environment follows gymnax (>= 1.0)::

    env, params = envs.make("CartPole-v1")             # or envs.GymCartPole(), env.default_params
    obs, state = env.reset(key, params)
    obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)

``step`` resets an environment whose episode ended (terminated or truncated) from a fresh key, as gymnax does, and
keeps the ending step's observation in ``info["final_observation"]`` (to bootstrap a value at truncation); ``info``
also holds ``terminated``, ``truncated`` and ``discount`` (0 where terminated). ``step_env`` is the step alone:
``(obs, state, reward, terminated, info)``. ``env.with_legacy_api()`` (or ``make(name, legacy_api=True)``) has
gymnax's API before 1.0: ``step`` returns ``(obs, state, reward, done, info)``. The environment object holds only
its structure (hashable: ``jax.jit(env.step)`` works); the physical and task parameters are arrays in
:class:`EnvParams`, so ``jax.vmap`` over a batch of params varies them. ``params`` may be left out (the defaults).
The time step ``dt`` is part of the structure (it decides the compiled program).

Gymnasium presets (``GymCartPole``, ``GymAcrobot``, ``GymPendulum``; ``make("CartPole-v1")`` ...) have Gymnasium's
state vector, dynamics, update rule, action mapping, observations, rewards, termination and truncation; their
accelerations come from the diffchain chain model (:mod:`diffchain.systems`), in Gymnasium's coordinates, and are
advanced with Gymnasium's own update rule (explicit Euler for CartPole, one RK4 step with angle wrapping and velocity
clipping for Acrobot, semi-implicit Euler with velocity clipping for Pendulum), which no diffchain integrator
reproduces: those integrate the points' Cartesian coordinates. Observations are in the state's dtype (Gymnasium
casts them to float32). ``reset`` checks the physical parameters; ``step`` trusts them (its program has one host
callback, the action's check). CartPole and Acrobot take ``continuous=True``: an action in [-1, 1] scales the force
or torque (Brax's trainers act so).

The seed's tasks (seed 000 Part III: ``PendulumSwingUp``, ``AcrobotSwingUp``, ``Weightlifting``, ``CartPoleBalance``,
``CartPoleSwingUp``, ``DoubleCartPoleBalance``, ``TripleCartPoleBalance``) simulate the chain itself: a step
integrates ``substeps`` quanta of ``dt / substeps`` with the action (and friction terms) held, by RK4 unless another
integrator is chosen (``env.with_integrator(dc.SemiImplicitEuler())``). Observations, rewards and failure rules are in
the seed's coordinates; where the seed gives none, each class states its choice.

:class:`BraxEnv` wraps any of them in the Brax/MuJoCo Playground API: ``reset(rng) -> State``,
``step(state, action) -> State``; where Brax is installed it is a ``brax.envs.Env`` (imported on first use), and
``brax.envs.training.wrap(BraxEnv(env), episode_length=...)`` reports the time limit as truncation.
"""
from __future__ import annotations

from .base import Box, Discrete, Environment, EnvParams, EnvState, GymState
from . import brax as _brax
from .gym import GymAcrobot, GymCartPole, GymPendulum
from .tasks import (AcrobotSwingUp, CartPoleBalance, CartPoleSwingUp, ChainEnv, DoubleCartPoleBalance, PendulumSwingUp,
                    TripleCartPoleBalance, Weightlifting)

TASKS = {cls.__name__: cls for cls in (PendulumSwingUp, AcrobotSwingUp, Weightlifting, CartPoleBalance,
                                       CartPoleSwingUp, DoubleCartPoleBalance, TripleCartPoleBalance)}
GYM = {"CartPole-v1": GymCartPole, "Acrobot-v1": GymAcrobot, "Pendulum-v1": GymPendulum}
REGISTERED = (*GYM, *TASKS)


def __getattr__(name):
    # the Brax adapter: a brax.envs.Env subclass where Brax is installed (imported on first use only)
    if name == "BraxEnv":
        return _brax.brax_env()
    if name == "BraxState":
        return _brax.brax_env()._State
    raise AttributeError(f"module 'diffchain.envs' has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), "BraxEnv", "BraxState"})


def make(name: str, **kwargs):
    """``(env, env.default_params)`` as gymnax's ``make``: a Gymnasium preset ("CartPole-v1", "Acrobot-v1",
    "Pendulum-v1") or a seed task by class name; ``kwargs`` go to its constructor (``legacy_api=True``: gymnax's API
    before 1.0, :meth:`Environment.with_legacy_api`)."""
    cls = GYM.get(name) or TASKS.get(name)
    if cls is None:
        raise ValueError(f"make: name must be one of {', '.join(REGISTERED)}, got {name!r}")
    legacy = kwargs.pop("legacy_api", False)
    env = cls(**kwargs).with_legacy_api(legacy)
    return env, env.default_params


__all__ = ["make", "REGISTERED", "GYM", "TASKS", "Environment", "EnvParams", "EnvState", "GymState", "Discrete", "Box",
           "GymCartPole", "GymAcrobot", "GymPendulum", "ChainEnv", "PendulumSwingUp", "AcrobotSwingUp", "Weightlifting",
           "CartPoleBalance", "CartPoleSwingUp", "DoubleCartPoleBalance", "TripleCartPoleBalance", "BraxEnv",
           "BraxState"]
