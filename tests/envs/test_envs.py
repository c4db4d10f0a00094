"""Environments: the Gymnasium presets step for step against Gymnasium's own code, gymnax's API under jit and vmap
(auto-reset, batched params), the Brax adapter, the seed's tasks batched, and a controller designed on the textbook
model that balances the chain model."""
import functools
import importlib.util
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc
from diffchain import envs, systems
from diffchain.envs import TASKS, BraxEnv, CartPoleBalance

needs_gym = pytest.mark.skipif(importlib.util.find_spec("gymnasium") is None, reason="gymnasium not installed")
RTOL, ATOL = 1e-10, 1e-12  # Gymnasium computes in float64


# ------------------------------------------------------------------------------------------ Gymnasium, step for step

def _cartpole_actions(rng, s, episode):
    # odd episodes balance (a linear rule, 10 % random actions) until truncated; even ones are random
    if episode % 2 and rng.random() > 0.1:
        return int(np.dot([0.1, 0.3, 1.0, 0.5], s) > 0)
    return int(rng.integers(2))


def _acrobot_actions(rng, s, episode):
    # even episodes pump energy (torque with the elbow's rate, 30 % random) until the tip is up: termination;
    # odd ones mostly hold still (zero torque, 20 % random): truncation after 500 steps
    if episode % 2:
        return int(rng.integers(3)) if rng.random() < 0.2 else 1
    return int(rng.integers(3)) if rng.random() < 0.3 else (2 if s[3] > 0 else 0)


def _pendulum_actions(rng, s, episode):
    return np.array([rng.uniform(-3.0, 3.0)])  # beyond the bounds too: Gymnasium clips


def _pendulum_start(rng):
    return np.array([rng.uniform(-12.0, 12.0), rng.uniform(-9.0, 9.0)])  # unwrapped angles, rates to be clipped


CASES = {"CartPole-v1": (_cartpole_actions, None, 1500), "Acrobot-v1": (_acrobot_actions, None, 1300),
         "Pendulum-v1": (_pendulum_actions, _pendulum_start, 600)}


@functools.lru_cache(maxsize=None)
def _preset(name):
    """A Gymnasium preset, its default params and its ``jax.jit(env.step_env)``, compiled once for the module."""
    env, params = envs.make(name)
    return env, params, jax.jit(env.step_env)


@needs_gym
@pytest.mark.parametrize("name", list(CASES))
def test_preset_matches_gymnasium_step_for_step(name):
    """From the same state (Gymnasium's ``env.unwrapped.state`` set to ours before every step), the same action:
    the same next state (<= 1e-10 relative), observation (Gymnasium's float32 cast, bit for bit), reward,
    terminated and truncated (Gymnasium's TimeLimit), over whole episodes of random actions."""
    import gymnasium as gym

    policy, start, n_steps = CASES[name]
    env, params, step = _preset(name)
    genv = gym.make(name)
    rng = np.random.default_rng(0)
    key = jax.random.PRNGKey(0)
    counts = {"terminated": 0, "truncated": 0}
    state, episode = None, -1
    for i in range(n_steps):
        if state is None:
            episode += 1
            key, k = jax.random.split(key)
            obs, state = env.reset(k, params)
            if start is not None and episode % 2:  # every second Pendulum episode from a wide start
                state = envs.GymState(jnp.asarray(start(rng)), state.steps)
            genv.reset(seed=i)
        s0 = np.array(state.s, dtype=np.float64)
        genv.unwrapped.state = s0.copy()
        a = policy(rng, s0, episode)
        g_obs, g_reward, g_term, g_trunc, _ = genv.step(a)
        key, k = jax.random.split(key)
        obs, state, reward, terminated, info = step(k, state, jnp.asarray(a), params)
        np.testing.assert_allclose(np.asarray(state.s), np.asarray(genv.unwrapped.state, np.float64), rtol=RTOL,
                                   atol=ATOL, err_msg=f"{name} step {i}")
        np.testing.assert_array_equal(np.asarray(obs, np.float32), g_obs, err_msg=f"{name} step {i}")
        np.testing.assert_allclose(float(reward), g_reward, rtol=1e-12, atol=0, err_msg=f"{name} step {i}")
        assert (bool(info["terminated"]), bool(info["truncated"])) == (g_term, g_trunc), f"{name} step {i}"
        assert bool(terminated) == g_term  # gymnax >= 1.0: step_env's flag is termination alone
        counts["terminated"] += g_term
        counts["truncated"] += g_trunc
        if g_term or g_trunc:
            state = None
    # the episodes ended both ways where the task has both
    assert counts["truncated"] >= 1 and (name == "Pendulum-v1" or counts["terminated"] >= 2), counts


@needs_gym
def test_cartpole_params_vary_under_vmap_as_gymnasiums_attributes():
    """A batch of CartPole-v1 params (g, masses, half-length, force) stepped in one vmap: each element is Gymnasium's
    CartPoleEnv with those attributes set, from the same state; also the semi-implicit update rule."""
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv

    rng = np.random.default_rng(1)
    n = 6
    g, m_c, m_p, l, F = (rng.uniform(lo, hi, n) for lo, hi in ((5, 15), (0.5, 2), (0.05, 0.5), (0.2, 1), (5, 20)))
    for integrator in ("euler", "semi-implicit"):
        env, params = envs.make("CartPole-v1", kinematics_integrator=integrator)
        batch = jax.vmap(lambda *v: params.replace(g=v[0], m_c=v[1], m_p=v[2], l=v[3], force_mag=v[4]))(g, m_c, m_p,
                                                                                                      l, F)
        s = rng.uniform(-0.2, 0.2, (n, 4))
        actions = rng.integers(2, size=n)
        state = envs.GymState(jnp.asarray(s), jnp.zeros(n, jnp.int32))
        obs, new, reward, done, info = jax.jit(jax.vmap(env.step_env))(jax.random.split(jax.random.PRNGKey(0), n),
                                                                      state, jnp.asarray(actions), batch)
        for i in range(n):
            ref = CartPoleEnv()
            ref.kinematics_integrator = integrator
            ref.gravity, ref.masscart, ref.masspole, ref.length, ref.force_mag = g[i], m_c[i], m_p[i], l[i], F[i]
            ref.total_mass, ref.polemass_length = m_p[i] + m_c[i], m_p[i] * l[i]
            ref.state = s[i].copy()
            ref.step(int(actions[i]))
            np.testing.assert_allclose(np.asarray(new.s[i]), ref.state, rtol=RTOL, atol=ATOL, err_msg=integrator)


# ------------------------------------------------------------------------------------------ gymnax's API

def test_gymnax_api_under_jit_and_vmap_with_auto_reset():
    """As gymnax's README: ``jax.vmap(env.step, in_axes=(0, 0, 0, None))`` under ``jax.jit``, gymnax >= 1.0's
    ``(obs, state, reward, terminated, truncated, info)``. A batched step is each element's ``step_env`` where the
    episode goes on; where it ends (termination or truncation), the state and observation are a fresh episode's from
    the key split off the step's key, reward, flags and info the ending step's (Gymnasium's rule: +1 on the
    terminating step), and ``info["final_observation"]`` is the ending step's observation."""
    env, params, step_env = _preset("CartPole-v1")
    n = 8
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    assert obs.shape == (n, 4) and float(jnp.max(jnp.abs(obs))) <= 0.05 and env.num_actions == 2
    # element 0 about to leave the track, element 1 at its last step
    s = state.s.at[0].set(jnp.array([2.399, 1.0, 0.0, 0.0]))
    state = envs.GymState(s, state.steps.at[1].set(params.max_steps - 1))
    actions = jnp.arange(n) % 2
    vstep = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))
    out = vstep(keys, state, actions, params)
    assert len(out) == 6
    b_obs, b_state, b_reward, b_term, b_trunc, b_info = out
    assert b_obs.shape == (n, 4) and b_reward.shape == b_term.shape == b_trunc.shape == (n,)
    assert sorted(b_info) == ["discount", "final_observation", "terminated", "truncated"]
    for i in range(n):
        obs_i, state_i, reward_i, term_i, info_i = step_env(jax.random.split(keys[i])[0],
                                                            jax.tree.map(lambda a: a[i], state), actions[i], params)
        info_i = {**info_i, "final_observation": obs_i}
        if i < 2:  # reset: the fresh episode of the split-off key
            obs_i, state_i = env.reset(jax.random.split(keys[i])[1], params)
        for b, o in zip(jax.tree.leaves((b_obs, b_state, b_reward, b_term, b_trunc, b_info)),
                        jax.tree.leaves((obs_i, state_i, reward_i, term_i, info_i["truncated"], info_i))):
            np.testing.assert_allclose(b[i], o, rtol=1e-12, atol=1e-15)
    assert b_term.tolist() == [True] + [False] * (n - 1)
    assert b_trunc.tolist() == [False, True] + [False] * (n - 2)
    assert b_info["terminated"].tolist() == b_term.tolist() and b_info["truncated"].tolist() == b_trunc.tolist()
    assert b_info["discount"].tolist() == [0.0] + [1.0] * (n - 1)
    assert b_reward.tolist() == [1.0] * n
    assert b_state.steps.tolist() == [0, 0] + [1] * (n - 2) and float(jnp.max(jnp.abs(b_obs[:2]))) <= 0.05
    # the others moved on by one explicit Euler step of Gymnasium's equations (x += dt x'), and so did the final
    # observations, also of the two that ended (element 0 past the edge of the track: 2.399 + 0.02 * 1.0)
    np.testing.assert_allclose(b_state.s[2:, 0], s[2:, 0] + 0.02 * s[2:, 1], rtol=1e-14)
    np.testing.assert_allclose(b_info["final_observation"][:, 0], s[:, 0] + 0.02 * s[:, 1], rtol=1e-14)
    np.testing.assert_array_equal(b_info["final_observation"][2:], b_obs[2:])


def test_legacy_api_is_gymnax_before_1_0():
    """``with_legacy_api()``: gymnax's API before 1.0, ``(obs, state, reward, done, info)`` with done = terminated or
    truncated (also ``step_env``'s), the same values as the current API's."""
    env, params, _ = _preset("CartPole-v1")
    old = env.with_legacy_api()
    assert old.legacy_api and not env.legacy_api and "legacy_api=True" in repr(old)
    edge = envs.GymState(jnp.array([[2.399, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]),
                         jnp.array([0, params.max_steps - 1, 0], jnp.int32))  # terminates, truncated, goes on
    keys = jax.random.split(jax.random.PRNGKey(2), 3)

    def both(e):
        return (jax.vmap(e.step, in_axes=(0, 0, None, None))(keys, edge, 1, params),
                jax.vmap(e.step_env, in_axes=(0, 0, None, None))(keys, edge, 1, params))

    (new_step, new_env), (old_step, old_env) = jax.jit(lambda: (both(env), both(old)))()
    assert len(old_step) == 5 and len(old_env) == 5
    obs, state, reward, term, trunc, info = new_step
    assert old_step[3].tolist() == (term | trunc).tolist() == [True, True, False]
    assert old_env[3].tolist() == [True, True, False] and new_env[3].tolist() == [True, False, False]
    for a, b in zip(jax.tree.leaves(old_step), jax.tree.leaves((obs, state, reward, term | trunc, info))):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(TypeError, match="with_legacy_api: legacy must be a bool, got str"):
        env.with_legacy_api("yes")


def test_jit_of_the_bound_step_with_params_left_out():
    """``jax.jit(env.step)`` as users write it (the environment holds no arrays), params left out: the defaults."""
    env, params, step_env = _preset("Pendulum-v1")
    obs, state = env.reset(jax.random.PRNGKey(0))
    key, action = jax.random.PRNGKey(1), jnp.array([1.5])
    out = jax.jit(env.step)(key, state, action)
    r_obs, r_state, r_reward, r_term, r_info = step_env(jax.random.split(key)[0], state, action, params)
    ref = (r_obs, r_state, r_reward, r_term, r_info["truncated"], {**r_info, "final_observation": r_obs})
    # two programs (the defaults folded in as constants, or passed as arguments): the same values to round-off
    for b, o in zip(jax.tree.leaves(out), jax.tree.leaves(ref), strict=True):
        np.testing.assert_allclose(b, o, rtol=1e-15, atol=1e-15)
    assert int(out[1].steps) == 1 and not bool(out[3]) and not bool(out[4])


def test_spaces_params_and_bad_input():
    env, params = envs.make("Pendulum-v1")
    space = env.action_space(params)
    assert space.shape == (1,) and float(space.high[0]) == 2.0 and env.observation_space(params).shape == (3,)
    assert env.observation_space(params).dtype == env.reset(jax.random.PRNGKey(0))[0].dtype == jnp.result_type(float)
    assert bool(space.contains(space.sample(jax.random.PRNGKey(0))))
    assert envs.make("Acrobot-v1")[0].action_space().n == 3 and float(params.g) == 10.0 and int(params.max_steps) == 200
    assert float(params.replace(g=9.81, max_steps=100).g) == 9.81
    with pytest.raises(ValueError, match="unknown parameter 'gravity'"):
        params.replace(gravity=9.81)
    with pytest.raises(ValueError, match="make: name must be one of CartPole-v1, .*got 'CartPole-v0'"):
        envs.make("CartPole-v0")
    obs, state = env.reset(jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match=r"Pendulum-v1.step: action must have shape \(1,\), got shape \(2,\)"):
        env.step(jax.random.PRNGKey(0), state, jnp.zeros(2))
    cart, _ = envs.make("CartPole-v1")
    obs, state = cart.reset(jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match=r"CartPole-v1.step: action must be 0 \(push left\) or 1 \(push right\), "
                                         r"got 2"):
        cart.step(jax.random.PRNGKey(0), state, 2)


def test_brax_adapter_is_the_functional_step():
    """``BraxEnv``: reset(rng) -> State, step(state, action) -> State; each step is the functional ``step_env`` with
    the key split off ``info["rng"]`` (done: termination alone, Brax's wrappers keep the time limit);
    ``auto_reset=True`` makes it the gymnax ``step``."""
    env, params = envs.make("CartPole-v1")
    edge = envs.GymState(jnp.array([2.399, 1.0, 0.0, 0.0]), jnp.asarray(0, jnp.int32))  # leaves the track next step

    def run(rng):  # both adapters and the functional API, one compiled program
        out = []
        for auto in (False, True):
            brax = BraxEnv(env, params, auto_reset=auto)
            first = brax.reset(rng)
            state = brax.step(first.replace(pipeline_state=edge), 1)
            ref_reset = env.reset(jax.random.split(rng)[1], params)
            key = jax.random.split(first.info["rng"])[1]
            ref = (env.step if auto else env.step_env)(key, edge, 1, params)
            out.append((first, state, ref_reset, ref[:3]))
        return out

    assert BraxEnv(env).observation_size == 4 and BraxEnv(env).action_size == 2
    assert BraxEnv(env).episode_length == 500 and BraxEnv(env).unwrapped.env is env
    with pytest.raises(TypeError, match="BraxEnv: env must be a diffchain.envs environment, got tuple"):
        BraxEnv(envs.make("CartPole-v1"))
    for auto, (first, state, (obs0, _), (obs, ref, reward)) in zip((False, True),
                                                                     jax.jit(run)(jax.random.PRNGKey(0))):
        np.testing.assert_array_equal(first.obs, obs0)
        assert float(first.reward) == 0.0 and float(first.done) == 0.0
        np.testing.assert_array_equal(state.obs, obs)
        np.testing.assert_array_equal(state.pipeline_state.s, ref.s)
        assert float(state.done) == 1.0 and float(state.reward) == 1.0 and float(state.info["truncation"]) == 0.0
        np.testing.assert_array_equal(state.info["rng"], jax.random.split(first.info["rng"])[0])
        assert (float(jnp.abs(state.obs[0])) <= 0.05) == auto  # reset, or past the edge of the track


def _brax_training_wrap():
    """Brax's ``training.wrap`` where Brax is installed; else its three wrappers as Brax 0.14.2 writes them
    (brax/envs/wrappers/training.py: VmapWrapper, EpisodeWrapper with action_repeat 1, AutoResetWrapper)."""
    try:
        from brax.envs.wrappers.training import wrap
        return wrap
    except ImportError:  # Brax is optional
        pass

    class Wrapper:
        def __init__(self, env):
            self.env = env

        def __getattr__(self, name):
            return getattr(self.env, name)

    class Vmap(Wrapper):
        def reset(self, rng):
            return jax.vmap(self.env.reset)(rng)

        def step(self, state, action):
            return jax.vmap(self.env.step)(state, action)

    class Episode(Wrapper):
        def __init__(self, env, episode_length):
            super().__init__(env)
            self.episode_length = episode_length

        def reset(self, rng):
            state = self.env.reset(rng)
            state.info["steps"] = jnp.zeros(rng.shape[:-1])
            state.info["truncation"] = jnp.zeros(rng.shape[:-1])
            return state

        def step(self, state, action):
            state = self.env.step(state, action)
            steps = state.info["steps"] + 1
            one, zero = jnp.ones_like(state.done), jnp.zeros_like(state.done)
            episode_length = jnp.array(self.episode_length, dtype=jnp.int32)
            done = jnp.where(steps >= episode_length, one, state.done)
            state.info["truncation"] = jnp.where(steps >= episode_length, 1 - state.done, zero)
            state.info["steps"] = steps
            return state.replace(done=done)

    class AutoReset(Wrapper):
        def reset(self, rng):
            state = self.env.reset(rng)
            state.info["first_pipeline_state"] = state.pipeline_state
            state.info["first_obs"] = state.obs
            return state

        def step(self, state, action):
            if "steps" in state.info:
                state.info.update(steps=jnp.where(state.done, jnp.zeros_like(state.info["steps"]),
                                                  state.info["steps"]))
            state = state.replace(done=jnp.zeros_like(state.done))
            state = self.env.step(state, action)

            def where_done(x, y):
                done = state.done
                if done.shape:
                    done = jnp.reshape(done, [x.shape[0]] + [1] * (len(x.shape) - 1))
                return jnp.where(done, x, y)

            return state.replace(pipeline_state=jax.tree.map(where_done, state.info["first_pipeline_state"],
                                                             state.pipeline_state),
                                 obs=jax.tree.map(where_done, state.info["first_obs"], state.obs))

    def wrap(env, episode_length=1000):
        return AutoReset(Episode(Vmap(env), episode_length))

    return wrap


def test_brax_training_wrap_reports_truncation_and_termination():
    """Under Brax's ``training.wrap(env, episode_length=env.episode_length)`` (or its wrappers as Brax writes them),
    continuous CartPole-v1 with a 6-step limit, two copies pushed with a = 0: the one started past the edge of the
    track fails at the first step (done 1, truncation 0: termination, Gymnasium's |x| > 2.4), starts again and runs
    on; the other reaches the limit at step 6 (done 1, truncation 1). A ``brax.envs.Env`` where Brax is installed."""
    env, params = envs.make("CartPole-v1", continuous=True)
    adapter = BraxEnv(env, params.replace(max_steps=6))
    try:
        from brax.envs.base import Env, State
    except ImportError:  # Brax is optional: the thin adapter, Brax's names
        Env, State = object, envs.BraxState
    assert isinstance(adapter, Env) and isinstance(adapter.reset(jax.random.PRNGKey(0)), State)
    wrapped = _brax_training_wrap()(adapter, episode_length=adapter.episode_length)
    assert adapter.episode_length == 6 and adapter.action_size == 1 and adapter.backend == "diffchain"

    def run(rng):
        state = wrapped.reset(jax.random.split(rng, 2))
        inner = state.pipeline_state
        state = state.replace(pipeline_state=envs.GymState(inner.s.at[0].set(jnp.array([2.399, 1.0, 0.0, 0.0])),
                                                           inner.steps))

        def body(state, _):
            state = wrapped.step(state, jnp.zeros((2, 1)))
            return state, (state.done, state.info["truncation"], state.obs)

        return state.info["first_obs"], jax.lax.scan(body, state, length=6)[1]

    first_obs, (done, truncation, obs) = jax.jit(run)(jax.random.PRNGKey(0))
    assert done.tolist() == [[1, 0], [0, 0], [0, 0], [0, 0], [0, 0], [0, 1]]
    assert truncation.tolist() == [[0, 0], [0, 0], [0, 0], [0, 0], [0, 0], [0, 1]]
    np.testing.assert_array_equal(obs[0, 0], first_obs[0])  # the failed copy started again
    np.testing.assert_array_equal(obs[5, 1], first_obs[1])  # and so did the truncated one


def test_cartpole_pole_as_point_masses_moves_as_the_rigid_link():
    """``systems.gym_cartpole(pole="points")`` (m_p/4 at the pivot, 3 m_p/4 at 4l/3: the same mass, centre of mass
    and central inertia as the uniform pole) has the accelerations of the rigid-link model and of the seed's printed
    closed form (Barto et al., no friction), for random states, forces and parameters; ShortChain solves it."""
    rng = np.random.default_rng(5)
    n = 16
    q, qd = rng.uniform(-1.5, 1.5, (n, 2)), rng.uniform(-3.0, 3.0, (n, 2))
    u, g, m_c, m_p, l = (rng.uniform(lo, hi, n) for lo, hi in ((-10, 10), (5, 15), (0.5, 2), (0.05, 0.5), (0.2, 1)))

    def both(q, qd, u, g, m_c, m_p, l):
        link = systems.gym_cartpole(g, m_c, m_p, l).qdd(q, qd, u)
        points = systems.gym_cartpole(g, m_c, m_p, l, pole="points").qdd(q, qd, u, solver=dc.ShortChain())
        closed = systems.cartpole_closed_form(q, qd, u, g=g, m_c=m_c, m_p=m_p, l=l, mu_c=0.0, mu_p=0.0)
        return link, points, closed

    link, points, closed = jax.jit(jax.vmap(both))(q, qd, u, g, m_c, m_p, l)
    np.testing.assert_allclose(points, link, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(points, closed, rtol=1e-12, atol=1e-12)


def test_continuous_presets_are_the_discrete_ones_at_the_extreme_actions():
    """``continuous=True``: CartPole-v1's a = -1, +1 are actions 0, 1 (force -+ force_mag), Acrobot-v1's a = -1, 0,
    +1 are actions 0, 1, 2 (torque -1, 0, +1); beyond [-1, 1] an action is clipped; a Box action space."""
    for name, pairs in (("CartPole-v1", [(-1.0, 0), (1.0, 1), (3.0, 1)]),
                        ("Acrobot-v1", [(-1.0, 0), (0.0, 1), (1.0, 2), (-2.0, 0)])):
        discrete, params = envs.make(name)
        continuous = envs.make(name, continuous=True)[0]
        space = continuous.action_space(params)
        assert space.shape == (1,) and float(space.low[0]) == -1.0 and float(space.high[0]) == 1.0
        _, state = discrete.reset(jax.random.PRNGKey(3), params)
        state = envs.GymState(state.s + 0.05, state.steps)
        a_c = jnp.array([[a] for a, _ in pairs])
        a_d = jnp.array([d for _, d in pairs])
        key = jax.random.PRNGKey(4)
        c, d = jax.jit(lambda: (jax.vmap(continuous.step_env, in_axes=(None, None, 0, None))(key, state, a_c, params),
                                jax.vmap(discrete.step_env, in_axes=(None, None, 0, None))(key, state, a_d,
                                                                                           params)))()
        for x, y in zip(jax.tree.leaves(c), jax.tree.leaves(d), strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-14, atol=1e-15, err_msg=name)
        with pytest.raises(TypeError, match="continuous must be a bool, got str"):
            type(discrete)(continuous="yes")
    with pytest.raises(ValueError, match='gym_cartpole: pole must be "link" or "points", got \'rod\''):
        systems.gym_cartpole(pole="rod")


# ------------------------------------------------------------------------------------------ the seed's tasks

N_BATCH, N_STEPS = 64, 5


def _batch_params(env, name):
    params = jax.tree.map(lambda x: jnp.broadcast_to(x, (N_BATCH, *x.shape)), env.default_params)
    if name == "Weightlifting":  # physical parameters vary along the batch
        params = params.replace(payload=jnp.linspace(0.5, 2.0, N_BATCH))
    return params


@functools.lru_cache(maxsize=None)
def _task(name):
    """A seed task and two compiled programs: ``batch(key, params)`` resets N_BATCH copies (params batched too) and
    takes N_STEPS random steps by ``jax.vmap(env.step_env)``, returning the start states, the actions and every
    step's output; ``one`` is the one-environment ``jax.jit(env.step_env)``."""
    env = TASKS[name]()
    space = env.action_space()

    def batch(key, params):
        keys = jax.random.split(key, N_BATCH)
        _, start = jax.vmap(env.reset)(keys, params)

        def body(state, k):
            keys = jax.random.split(k, N_BATCH)
            action = jax.vmap(space.sample)(keys)
            out = jax.vmap(env.step_env)(keys, state, action, params)
            return out[1], (keys, action, out)

        return start, jax.lax.scan(body, start, jax.random.split(key, N_STEPS))[1]

    return env, jax.jit(batch), jax.jit(env.step_env)


@pytest.mark.slow
def test_random_action_batches_run_jitted():
    """Every seed task, 64 copies (params batched), 5 random steps of ``jax.vmap(env.step_env)`` under ``jax.jit``
    (CartPoleBalance: 256 copies for 500 steps in the LQR test below)."""
    for name in TASKS:
        if name == "CartPoleBalance":
            continue
        env, batch, _ = _task(name)
        start, (keys, action, (obs, state, reward, done, info)) = batch(jax.random.PRNGKey(0),
                                                                        _batch_params(env, name))
        assert obs.shape[:2] == (N_STEPS, N_BATCH) and reward.shape == done.shape == (N_STEPS, N_BATCH)
        assert bool(jnp.all(jnp.isfinite(obs))), name
        assert state.steps[-1].tolist() == [N_STEPS] * N_BATCH and not bool(jnp.any(done)), name


@pytest.mark.slow
def test_a_batched_step_is_each_environments_step():
    """Under vmap a plain point-mass chain (the pendulum, the weightlifting arm) steps by diffchain._xla.point_major's point-major
    program, not by the vmap of the one-chain program (as the other tasks do, which vmap itself guarantees): each
    element is still the environment's own step, also with the physical parameters batched (the payload)."""
    for name in ("PendulumSwingUp", "Weightlifting"):
        env, batch, one_step = _task(name)
        assert env.backend is not None
        params = _batch_params(env, name)
        start, (keys, action, batched) = batch(jax.random.PRNGKey(0), params)
        for i in (0, 45):
            pick = lambda a: a[i]  # noqa: E731
            one = one_step(keys[0, i], jax.tree.map(pick, start), action[0, i], jax.tree.map(pick, params))
            for b, o in zip(jax.tree.leaves(batched), jax.tree.leaves(one)):
                np.testing.assert_allclose(b[0, i], o, rtol=1e-10, atol=1e-12, err_msg=name)


def _lqr_gain(A, B, Q, R, dt, iters=5000):
    """Discrete-time LQR on the Euler discretisation of x' = A x + B u (Riccati iteration, numpy)."""
    Ad, Bd = np.eye(len(A)) + dt * A, dt * B
    P = Q.copy()
    for _ in range(iters):
        K = np.linalg.solve(R + Bd.T @ P @ Bd, Bd.T @ P @ Ad)
        P = Q + Ad.T @ P @ (Ad - Bd @ K)
    return K


def test_lqr_from_the_textbook_linearisation_balances_the_cart_pole():
    """The gain comes from the linearised Barto et al. equations (seed §14.1 without friction) around upright:
        theta'' = (g theta - F / (m_c + m_p)) / (l (4/3 - m_p / (m_c + m_p))),  x'' = (F - m_p l theta'') / (m_c + m_p),
    not from diffchain. Applied to the chain model (pole = uniform rigid link on a slider point, with friction) it must
    balance every one of 256 random starts for 10 s and bring the state close to rest."""
    g, m_c, m_p, l = 9.81, 1.0, 0.1, 0.5
    M = m_c + m_p
    den = l * (4.0 / 3.0 - m_p / M)
    # state (x, x', theta, theta'), input F
    A = np.zeros((4, 4))
    A[0, 1] = A[2, 3] = 1.0
    A[3, 2] = g / den
    A[1, 2] = -m_p * l * (g / den) / M
    B = np.zeros((4, 1))
    B[3, 0] = -1.0 / (M * den)
    B[1, 0] = (1.0 + m_p * l / (M * den)) / M
    env = CartPoleBalance(max_steps=500)
    params = env.default_params
    K = jnp.asarray(_lqr_gain(A, B, np.diag([1.0, 1.0, 10.0, 1.0]), np.array([[0.1]]), env.dt))

    def episode(key):
        obs, state = env.reset(key, params)

        def body(carry, _):
            state, obs, alive = carry
            # step_env: no reset at the end of the episode (obs = (q, q'))
            obs, state, reward, done, info = env.step_env(key, state, -K @ obs[jnp.array([0, 2, 1, 3])], params)
            return (state, obs, alive & ~info["terminated"]), None

        (state, obs, alive), _ = jax.lax.scan(body, (state, obs, jnp.asarray(True)), length=500)
        return alive, obs

    alive, final = jax.jit(jax.vmap(episode))(jax.random.split(jax.random.PRNGKey(3), 256))
    assert bool(jnp.all(alive))
    assert float(jnp.max(jnp.abs(final))) < 1e-2


def test_open_loop_pendulum_is_too_weak_to_lift_directly():
    """Seed §13.1: the maximal torque 0.225 < m g l = 1, so holding tau_max from hanging never gets the tip above the
    pivot's level... but it does raise it: tip height increases first (a check of the sign of the torque)."""
    env, _, step = _task("PendulumSwingUp")  # its one-environment step, compiled once
    params = env.default_params
    obs, state = env.reset(jax.random.PRNGKey(0))
    heights = []
    for _ in range(10):
        obs, state, reward, done, info = step(jax.random.PRNGKey(1), state, jnp.array([0.225]), params)
        heights.append(float(state.sim.x[1, 1] - state.sim.x[0, 1]))
    assert heights[0] > -1.0 and max(heights) < 0.0
    assert math.isclose(float(reward), heights[-1], rel_tol=1e-9)  # reward cos(theta from the upright) = height
