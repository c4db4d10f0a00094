"""Task environments: batched and jitted, and a controller designed on the textbook model balances the chain model."""
import jax
import jax.numpy as jnp
import numpy as np

from diffchain.envs import TASKS, CartPoleBalance, PendulumSwingUp


def _batch_run(env, n_envs=4096, n_steps=5):
    keys = jax.random.split(jax.random.PRNGKey(0), n_envs)
    state, obs = jax.vmap(env.reset)(keys)
    step = jax.jit(jax.vmap(env.step))
    key = jax.random.PRNGKey(1)
    for _ in range(n_steps):
        key, sub = jax.random.split(key)
        action = jax.random.uniform(sub, (n_envs, env.action_size), minval=env.low, maxval=env.high)
        state, obs, reward, done = step(state, action)
    return state, obs, reward, done


def test_random_action_batches_run_jitted():
    for name, cls in TASKS.items():
        env = cls()
        state, obs, reward, done = _batch_run(env)
        assert obs.shape[0] == 4096 and reward.shape == (4096,) and done.shape == (4096,)
        assert bool(jnp.all(jnp.isfinite(obs))), name
        assert int(state.steps[0]) == 5


def test_a_batched_step_is_each_environments_step():
    # under vmap a plain point-mass chain (the pendulum, the weightlifting arm) steps by diffchain.lean, the others
    # by the vmap of the one-chain program: either way each environment's own step, to round-off
    for name, cls in TASKS.items():
        env = cls()
        state, _ = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(2), 8))
        action = jax.random.uniform(jax.random.PRNGKey(3), (8, env.action_size), minval=env.low, maxval=env.high)
        batched = jax.jit(jax.vmap(env.step))(state, action)
        for i in (0, 5):
            one = jax.jit(lambda s, a: env.step(s, a))(jax.tree.map(lambda a: a[i], state), action[i])
            for b, o in zip(jax.tree.leaves(batched), jax.tree.leaves(one)):
                np.testing.assert_allclose(b[i], o, rtol=1e-5, atol=1e-5, err_msg=name)


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
    K = jnp.asarray(_lqr_gain(A, B, np.diag([1.0, 1.0, 10.0, 1.0]), np.array([[0.1]]), env.dt))

    def episode(key):
        state, obs = env.reset(key)

        def body(carry, _):
            state, obs, alive = carry
            state, obs, reward, done = env.step(state, -K @ obs[jnp.array([0, 2, 1, 3])])  # obs = (q, q')
            return (state, obs, alive & ~env.failed(*env.to_q(state.sim))), None

        (state, obs, alive), _ = jax.lax.scan(body, (state, obs, jnp.asarray(True)), length=env.max_steps)
        return alive, obs

    alive, final = jax.jit(jax.vmap(episode))(jax.random.split(jax.random.PRNGKey(3), 256))
    assert bool(jnp.all(alive))
    assert float(jnp.max(jnp.abs(final))) < 1e-2


def test_open_loop_pendulum_is_too_weak_to_lift_directly():
    """Seed §13.1: the maximal torque 0.225 < m g l = 1, so holding tau_max from hanging never gets the tip above the
    pivot's level... but it does raise it: tip height increases first (a check of the sign of the torque)."""
    env = PendulumSwingUp()
    state, obs = env.reset(jax.random.PRNGKey(0))
    heights = []
    for _ in range(10):
        state, obs, reward, done = env.step(state, jnp.array([0.225]))
        heights.append(float(state.sim.x[1, 1] - state.sim.x[0, 1]))
    assert heights[0] > -1.0 and max(heights) < 0.0
