"""diffchain's environments under PureJaxRL-style code written for gymnax >= 1.0: its ``LogWrapper`` (gymnax 1.0.1's
``gymnax.wrappers.purerl.LogWrapper``, with a NamedTuple for its flax dataclass) and a vectorised PPO loop (PureJaxRL's
``make_train``, with the value bootstrapped from ``info["final_observation"]`` at truncation), both written here, not
imported; nothing in them is adapted to diffchain. Also the program of a step: one host callback."""
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from diffchain import envs


# ------------------------------------------------------------------------------------------ gymnax 1.0.1's wrappers

class GymnaxWrapper:
    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        return getattr(self._env, name)


class LogEnvState(NamedTuple):
    env_state: Any
    episode_returns: jax.Array
    episode_lengths: jax.Array
    returned_episode_returns: jax.Array
    returned_episode_lengths: jax.Array
    returned_episode_valid: jax.Array


class LogWrapper(GymnaxWrapper):
    """gymnax.wrappers.purerl.LogWrapper (gymnax 1.0.1)."""

    @functools.partial(jax.jit, static_argnames=("self",))
    def reset(self, key, params=None):
        obs, env_state = self._env.reset(key, params)
        state = LogEnvState(env_state, jnp.array(0, dtype=jnp.float32), jnp.array(0, dtype=jnp.int32),
                            jnp.array(0, dtype=jnp.float32), jnp.array(0, dtype=jnp.int32),
                            jnp.array(False, dtype=jnp.bool_))
        return obs, state

    @functools.partial(jax.jit, static_argnames=("self",))
    def step(self, key, state, action, params=None):
        obs, env_state, reward, terminated, truncated, info = self._env.step(key, state.env_state, action, params)
        done = jnp.logical_or(terminated, truncated)
        new_episode_return = state.episode_returns + reward
        new_episode_length = state.episode_lengths + 1
        state = LogEnvState(
            env_state=env_state,
            episode_returns=new_episode_return * (1 - done),
            episode_lengths=new_episode_length * (1 - done),
            returned_episode_returns=state.returned_episode_returns * (1 - done) + new_episode_return * done,
            returned_episode_lengths=state.returned_episode_lengths * (1 - done) + new_episode_length * done,
            returned_episode_valid=jnp.logical_or(state.returned_episode_valid, done),
        )
        info["returned_episode_returns"] = state.returned_episode_returns
        info["returned_episode_lengths"] = state.returned_episode_lengths
        info["returned_episode"] = done
        info["returned_episode_valid"] = state.returned_episode_valid
        return obs, state, reward, terminated, truncated, info


# ------------------------------------------------------------------------------------------ PureJaxRL's PPO

CONFIG = dict(NUM_ENVS=16, NUM_STEPS=32, NUM_UPDATES=24, UPDATE_EPOCHS=4, NUM_MINIBATCHES=4, GAMMA=0.99,
              GAE_LAMBDA=0.95, CLIP_EPS=0.2, ENT_COEF=0.01, VF_COEF=0.5, LR=3e-3, MAX_GRAD_NORM=0.5, HIDDEN=32)


def _init(key, sizes):
    params = []
    for k, (m, n) in zip(jax.random.split(key, len(sizes) - 1), zip(sizes[:-1], sizes[1:])):
        params.append((jax.random.normal(k, (m, n)) * np.sqrt(2.0 / m), jnp.zeros(n)))
    return params


def _mlp(params, x):
    for w, b in params[:-1]:
        x = jnp.tanh(x @ w + b)
    w, b = params[-1]
    return x @ w + b


def actor_critic(params, obs):
    return _mlp(params["pi"], obs), _mlp(params["v"], obs)[..., 0]


def make_train(config, env, env_params):
    """PureJaxRL's ppo.py ``make_train`` for a discrete action space, in plain JAX and optax."""
    env = LogWrapper(env)
    n_act, n_obs = env.action_space(env_params).n, env.observation_space(env_params).shape[0]
    batch = config["NUM_ENVS"] * config["NUM_STEPS"]
    tx = optax.chain(optax.clip_by_global_norm(config["MAX_GRAD_NORM"]), optax.adam(config["LR"], eps=1e-5))

    def train(rng):
        rng, k_pi, k_v, k_env = jax.random.split(rng, 4)
        h = config["HIDDEN"]
        params = {"pi": _init(k_pi, [n_obs, h, h, n_act]), "v": _init(k_v, [n_obs, h, h, 1])}
        opt_state = tx.init(params)
        obsv, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_env, config["NUM_ENVS"]),
                                                                env_params)

        def update(runner, _):
            def env_step(runner, _):
                params, opt_state, env_state, last_obs, rng = runner
                rng, k_act, k_step = jax.random.split(rng, 3)
                logits, value = actor_critic(params, last_obs)
                action = jax.random.categorical(k_act, logits)
                log_prob = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], 1)[:, 0]
                obsv, env_state, reward, terminated, truncated, info = jax.vmap(
                    env.step, in_axes=(0, 0, 0, None))(jax.random.split(k_step, config["NUM_ENVS"]), env_state,
                                                       action, env_params)
                transition = dict(terminated=terminated, done=terminated | truncated, action=action, value=value,
                                  reward=reward, log_prob=log_prob, obs=last_obs,
                                  next_value=actor_critic(params, info["final_observation"])[1], info=info)
                return (params, opt_state, env_state, obsv, rng), transition

            runner, traj = jax.lax.scan(env_step, runner, None, config["NUM_STEPS"])
            params, opt_state, env_state, last_obs, rng = runner

            # GAE: bootstrapped from the true next observation (the final one where an episode ended), cut at
            # every episode's end, the bootstrap dropped only where it terminated
            def gae_step(gae, t):
                delta = t["reward"] + config["GAMMA"] * t["next_value"] * (1 - t["terminated"]) - t["value"]
                gae = delta + config["GAMMA"] * config["GAE_LAMBDA"] * (1 - t["done"]) * gae
                return gae, gae

            _, advantages = jax.lax.scan(gae_step, jnp.zeros(config["NUM_ENVS"]), traj, reverse=True)
            targets = advantages + traj["value"]

            def loss_fn(params, t, adv, target):
                logits, value = actor_critic(params, t["obs"])
                logp_all = jax.nn.log_softmax(logits)
                log_prob = jnp.take_along_axis(logp_all, t["action"][:, None], 1)[:, 0]
                v_clip = t["value"] + jnp.clip(value - t["value"], -config["CLIP_EPS"], config["CLIP_EPS"])
                v_loss = 0.5 * jnp.maximum((value - target) ** 2, (v_clip - target) ** 2).mean()
                ratio = jnp.exp(log_prob - t["log_prob"])
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                pg = -jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - config["CLIP_EPS"], 1 + config["CLIP_EPS"]) * adv)
                entropy = -(jnp.exp(logp_all) * logp_all).sum(-1).mean()
                return pg.mean() + config["VF_COEF"] * v_loss - config["ENT_COEF"] * entropy

            def epoch(carry, _):
                params, opt_state, rng = carry
                rng, k = jax.random.split(rng)
                perm = jax.random.permutation(k, batch)
                flat = jax.tree.map(lambda x: x.reshape((batch,) + x.shape[2:])[perm].reshape(
                    (config["NUM_MINIBATCHES"], -1) + x.shape[2:]),
                    ({k: traj[k] for k in ("obs", "action", "value", "log_prob")}, advantages, targets))

                def minibatch(carry, mb):
                    params, opt_state = carry
                    grads = jax.grad(loss_fn)(params, *mb)
                    updates, opt_state = tx.update(grads, opt_state)
                    return (optax.apply_updates(params, updates), opt_state), None

                (params, opt_state), _ = jax.lax.scan(minibatch, (params, opt_state), flat)
                return (params, opt_state, rng), None

            (params, opt_state, rng), _ = jax.lax.scan(epoch, (params, opt_state, rng), None,
                                                       config["UPDATE_EPOCHS"])
            return (params, opt_state, env_state, last_obs, rng), traj["info"]

        runner = (params, opt_state, env_state, obsv, rng)
        return jax.lax.scan(update, runner, None, config["NUM_UPDATES"])[1]

    return train


@functools.lru_cache(maxsize=None)
def _trained():
    """The PPO loop's per-step info (NUM_UPDATES, NUM_STEPS, NUM_ENVS) on CartPole-v1, in float32 as PureJaxRL runs."""
    with jax.enable_x64(False):
        env, env_params = envs.make("CartPole-v1")
        return jax.device_get(jax.jit(make_train(CONFIG, env, env_params))(jax.random.PRNGKey(0)))


def test_ppo_with_the_log_wrapper_trains_on_cartpole():
    """The loop runs unchanged (gymnax 1.0.1's LogWrapper unpacks six values, reads the two flags); the logged
    episodes follow Gymnasium's CartPole-v1 (reward 1 per step: each return is its length, at most 500 steps); and
    the policy learns: the episodes completed in the last four updates last over 100 steps on average, five times
    a uniformly random policy's mean on CartPole-v1 (about 22 steps), and four times those of the first update."""
    info = _trained()
    ended = info["returned_episode"]
    returns, lengths = info["returned_episode_returns"][ended], info["returned_episode_lengths"][ended]
    assert ended.sum() > 50
    np.testing.assert_array_equal(returns, lengths.astype(np.float32))
    assert lengths.min() >= 8 and lengths.max() <= 500  # CartPole cannot fail in under 8 steps from its start
    assert (ended == (info["terminated"] | info["truncated"])).all()
    first = info["returned_episode_lengths"][0][ended[0]]
    last = info["returned_episode_lengths"][-4:][ended[-4:]]
    assert last.mean() > max(100, 4 * first.mean()), (first.mean(), last.mean())


def test_log_wrapper_counts_episodes_across_the_auto_reset():
    """gymnax 1.0.1's LogWrapper over diffchain's CartPole-v1, 40 steps of 4 copies (one at its last step, one about
    to leave the track): an episode's logged length is the steps since its start, its return the same (reward 1 per
    step), and the final observation of the one that left the track is past the edge, 2.399 + 0.02 * 1.0."""
    with jax.enable_x64(False):  # as PureJaxRL runs (LogWrapper's returns are float32)
        _log_wrapper_counts_episodes()


def _log_wrapper_counts_episodes():
    env, params = envs.make("CartPole-v1")
    log = LogWrapper(env)
    keys = jax.random.split(jax.random.PRNGKey(1), 4)
    obs, state = jax.vmap(log.reset, in_axes=(0, None))(keys, params)
    inner = state.env_state
    inner = envs.GymState(inner.s.at[0].set(jnp.array([2.399, 1.0, 0.0, 0.0])),
                          inner.steps.at[1].set(params.max_steps - 1))
    state = state._replace(env_state=inner, episode_lengths=state.episode_lengths.at[1].set(params.max_steps - 1),
                           episode_returns=state.episode_returns.at[1].set(params.max_steps - 1.0))

    def body(state, k):
        obs, state, reward, terminated, truncated, info = jax.vmap(log.step, in_axes=(0, 0, None, None))(
            jax.random.split(k, 4), state, 1, params)
        return state, (terminated, truncated, info)

    state, (term, trunc, info) = jax.jit(lambda s: jax.lax.scan(body, s, jax.random.split(keys[0], 40)))(state)
    assert term[0].tolist() == [True, False, False, False] and trunc[0].tolist() == [False, True, False, False]
    assert info["returned_episode_lengths"][0, :2].tolist() == [1, params.max_steps]
    assert info["returned_episode_returns"][0, :2].tolist() == [1.0, float(params.max_steps)]
    assert float(info["final_observation"][0, 0, 0]) == pytest.approx(2.419, rel=1e-6)  # float32
    # always pushing right, every copy fails within the 40 steps; each logged length is the steps since its start
    ended = np.asarray(info["returned_episode"])
    for i in range(4):
        t = np.flatnonzero(ended[:, i])
        assert len(t) >= 1 + (i < 2)
        starts = np.concatenate([[-1], t[:-1]]) if i >= 2 else t[:-1]
        ends = t if i >= 2 else t[1:]
        np.testing.assert_array_equal(np.asarray(info["returned_episode_lengths"])[ends, i], ends - starts)
    assert bool(jnp.all(state.returned_episode_valid))


def test_a_step_calls_the_host_once():
    """A compiled CartPole-v1 step holds one host callback, the action's check: the physical parameters are checked
    by reset (bad ones raise there, naming the parameter), the state and the chain model are not checked per step."""
    env, params = envs.make("CartPole-v1")
    obs, state = env.reset(jax.random.PRNGKey(0), params)
    text = jax.jit(env.step).lower(jax.random.PRNGKey(0), state, 1, params).as_text()
    assert text.count("callback") == 1
    text = jax.jit(env.reset).lower(jax.random.PRNGKey(0), params).as_text()
    assert text.count("callback") == 1
    with pytest.raises(ValueError, match=r"CartPole-v1.reset: params.m_p must be positive and finite, got -0.1"):
        env.reset(jax.random.PRNGKey(0), params.replace(m_p=-0.1))
    with pytest.raises(Exception, match=r"CartPole-v1.reset: params.l must be positive and finite"):
        jax.block_until_ready(jax.jit(env.reset)(jax.random.PRNGKey(0), params.replace(l=jnp.nan)))
