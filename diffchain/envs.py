"""Functional control tasks on the seed's benchmark objects (seed 000 Part III), in the style of gymnax / Brax.

An environment is an immutable Equinox module; ``reset(key) -> (state, obs)`` and
``step(state, action) -> (state, obs, reward, done)`` are pure functions, so ``jax.jit`` and ``jax.vmap`` over
thousands of copies work directly:

    env = CartPoleBalance()
    state, obs = jax.vmap(env.reset)(jax.random.split(key, 4096))
    state, obs, reward, done = jax.jit(jax.vmap(env.step))(state, actions)

Actions are clipped to [low, high]. ``done`` is True once the task failed or ``max_steps`` were taken; ``step`` does not
reset by itself (``auto_reset`` wraps a step that does). Each step integrates ``substeps`` quanta of length
``dt / substeps`` with RK4.
"""
from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from .geometry import from_joint_angles, joint_angles, joint_velocities
from .integrate import RK4, step as chain_step
from .model import Chain, Control, State


class EnvState(eqx.Module):
    sim: State
    steps: jax.Array


def _wrap(a):
    return jnp.arctan2(jnp.sin(a), jnp.cos(a))


class ChainEnv(eqx.Module):
    """Base class: a chain, a time step, action bounds and an episode length; tasks fill in the five hooks."""

    chain: Chain
    dt: float = eqx.field(static=True)
    substeps: int = eqx.field(static=True)
    max_steps: int = eqx.field(static=True)
    low: jax.Array
    high: jax.Array

    # hooks -----------------------------------------------------------------------------------------------------
    def initial(self, key) -> State:
        raise NotImplementedError

    def control(self, sim: State, action) -> Control:
        raise NotImplementedError

    def observe(self, sim: State):
        raise NotImplementedError

    def reward(self, sim: State, action):
        raise NotImplementedError

    def failed(self, sim: State):
        return jnp.asarray(False)

    # API -------------------------------------------------------------------------------------------------------
    @property
    def action_size(self) -> int:
        return self.low.shape[0]

    def reset(self, key):
        sim = self.initial(key)
        return EnvState(sim, jnp.asarray(0)), self.observe(sim)

    def step(self, state: EnvState, action):
        action = jnp.clip(jnp.asarray(action, self.low.dtype).reshape(self.low.shape), self.low, self.high)
        u = self.control(state.sim, action)
        h = self.dt / self.substeps
        sim, _ = jax.lax.scan(lambda s, _: (chain_step(self.chain, s, u, h, integrator=RK4()), None), state.sim,
                              length=self.substeps)
        steps = state.steps + 1
        done = self.failed(sim) | (steps >= self.max_steps)
        return EnvState(sim, steps), self.observe(sim), self.reward(sim, action), done

    def auto_reset(self, state: EnvState, action, key):
        """``step``, then a fresh episode from ``key`` wherever the episode ended (the returned obs is the new one's)."""
        state, obs, reward, done = self.step(state, action)
        fresh, fresh_obs = self.reset(key)
        pick = lambda a, b: jnp.where(done, a, b)  # noqa: E731
        return jax.tree_util.tree_map(pick, fresh, state), pick(fresh_obs, obs), reward, done


def _angles_obs(sim):
    theta = joint_angles(sim)
    return jnp.concatenate([jnp.cos(theta), jnp.sin(theta), joint_velocities(sim)[:-1]])


class PendulumSwingUp(ChainEnv):
    """Seed §13.1: theta'' = sin(theta) + tau (unit mass at the tip of a unit rod, g = 1, theta from upright),
    tau in [-0.225, 0.225] -- too weak to lift the pendulum directly: it must be swung up. Starts hanging (theta = pi)
    with a small random offset; reward cos(theta) (the tip height), 200 steps of 0.1 s."""

    def __init__(self, dt=0.1, substeps=10, max_steps=200, tau_max=0.225):
        self.chain = Chain([1.0, 1.0], [1.0], guided=[True, False], g=1.0)
        self.dt, self.substeps, self.max_steps = dt, substeps, max_steps
        self.low, self.high = jnp.array([-tau_max]), jnp.array([tau_max])

    def initial(self, key):
        k1, k2 = jax.random.split(key)
        theta = jnp.pi + 0.05 * jax.random.normal(k1)
        return from_joint_angles(self.chain, (jnp.pi / 2 + theta)[None], 0.05 * jax.random.normal(k2, (1,)))

    def seed_state(self, sim):
        """(theta, theta_dot) in the seed's convention: from upright, counter-clockwise."""
        return _wrap(joint_angles(sim)[0] - jnp.pi / 2), joint_velocities(sim)[0]

    def control(self, sim, action):
        return Control(tau=jnp.array([action[0], 0.0]))

    def observe(self, sim):
        theta, omega = self.seed_state(sim)
        return jnp.stack([jnp.cos(theta), jnp.sin(theta), omega])

    def reward(self, sim, action):
        return jnp.cos(self.seed_state(sim)[0])


class CartPole(ChainEnv):
    """Seed §14.1 (Barto, Sutton & Anderson 1983): a cart (m_c = 1) on a rail with a uniform pole (m_p = 0.1, half
    length l = 0.5) hinged on it, pushed by F in [-10, 10]; cart friction mu_c sgn(x'), pole friction mu_p theta'.
    ``swing_up=False``: start near upright, +1 per step, fail when |theta| > 12 degrees or |x| > 2.4 (balance).
    ``swing_up=True``: start hanging, reward cos(theta), fail when |x| > 2.4. theta is measured from upright,
    positive towards +x (the seed's convention)."""

    mu_c: float = eqx.field(static=True)
    swing_up: bool = eqx.field(static=True)

    def __init__(self, swing_up=False, dt=0.02, substeps=2, max_steps=500, mu_c=0.0005, mu_p=0.000002):
        m_p, l = 0.1, 0.5
        self.chain = Chain([1.0, 0.0], [2 * l], slider=[True, False], s=[[0.0, 1.0], [0.0, 1.0]], c=0.0,
                           k_omega=[mu_p, 0.0], link_mass=[m_p], link_inertia=[m_p * (2 * l) ** 2 / 12])
        self.dt, self.substeps, self.max_steps = dt, substeps, max_steps
        self.low, self.high = jnp.array([-10.0]), jnp.array([10.0])
        self.mu_c, self.swing_up = mu_c, swing_up

    def initial(self, key):
        k1, k2 = jax.random.split(key)
        if self.swing_up:
            theta = jnp.pi + 0.05 * jax.random.normal(k1)
            x, xd, td = 0.0, 0.0, 0.0
        else:
            x, xd, theta, td = jax.random.uniform(k1, (4,), minval=-0.05, maxval=0.05)
        return from_joint_angles(self.chain, (jnp.pi / 2 - theta)[None], jnp.asarray(-td)[None],
                                 base=jnp.stack([x, 0.0]), base_velocity=jnp.stack([xd, 0.0]))

    def seed_state(self, sim):
        """(x, x', theta, theta') in the seed's convention."""
        return (sim.x[0, 0], sim.v[0, 0], _wrap(jnp.pi / 2 - joint_angles(sim)[0]), -joint_velocities(sim)[0])

    def control(self, sim, action):
        friction = -self.mu_c * jnp.sign(sim.v[0, 0])
        return Control(F=jnp.zeros((2, 2)).at[0, 0].set(action[0] + friction))

    def observe(self, sim):
        return jnp.stack(self.seed_state(sim))

    def reward(self, sim, action):
        return jnp.cos(self.seed_state(sim)[2]) if self.swing_up else jnp.asarray(1.0)

    def failed(self, sim):
        x, _, theta, _ = self.seed_state(sim)
        out = jnp.abs(x) > 2.4
        return out if self.swing_up else out | (jnp.abs(theta) > 12 * jnp.pi / 180)
