"""Train a linear policy on CartPole-v1 (diffchain's Gymnasium-exact preset) by evolution strategies, several seeds.

The policy picks ``argmax(obs @ W + b)`` (10 numbers). Each iteration perturbs them antithetically (``--pop``
perturbations of scale ``--sigma``), scores every perturbed policy by its mean return over ``--episodes`` episodes of
up to 500 steps, and moves along the rank-weighted sum of the perturbations with optax's Adam (OpenAI-ES, Salimans et
al. 2017). All policies, episodes and seeds run in one compiled program: ``jax.vmap`` over the environment's
functional ``step_env``, ``jax.lax.scan`` over time. The random policy (uniform actions) is scored the same way.
Writes the learning curves of all seeds to docs/train_policy.png (``--out`` to change) and prints, per seed, the
final policy's return against the random policy's; it fails (exit status 1) unless every seed beats the random policy
by ``MARGIN``. ``--quick`` (2 seeds, 30 iterations, 16 perturbations; writes examples/out/train_policy_quick.png) is
too short for that: there a seed may still be stuck near the random policy.

    python examples/train_policy.py [--seeds 5] [--iters 100] [--pop 32] [--quick]
"""
from __future__ import annotations

import argparse
import os
import time

import diffchain as dc

dc.set_xla_cpu_flags()  # this script's process: the recommended XLA CPU flags
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from diffchain import envs  # noqa: E402

MARGIN = 400.0  # every seed's final mean return must beat the random policy's by this much (the maximum is 500)
ENV, PARAMS = envs.make("CartPole-v1")
N_OBS, N_ACT = 4, ENV.num_actions


def act(theta, key, obs, random):
    """The linear policy's action, or a uniformly random one where ``random``."""
    W, b = theta[: N_OBS * N_ACT].reshape(N_OBS, N_ACT), theta[N_OBS * N_ACT:]
    return jnp.where(random, jax.random.randint(key, (), 0, N_ACT), jnp.argmax(obs @ W + b))


def episode_return(theta, random, key, horizon):
    """Undiscounted return of one episode (``step_env``: rewards counted until the episode ends)."""
    k0, k1 = jax.random.split(key)
    obs, state = ENV.reset(k0, PARAMS)

    def body(carry, k):
        obs, state, alive, total = carry
        ka, ks = jax.random.split(k)
        obs, state, reward, terminated, info = ENV.step_env(ks, state, act(theta, ka, obs, random), PARAMS)
        done = terminated | info["truncated"]
        return (obs, state, alive & ~done, total + jnp.where(alive, reward, 0.0)), None

    carry = (obs, state, jnp.asarray(True), jnp.zeros(()))
    (_, _, _, total), _ = jax.lax.scan(body, carry, jax.random.split(k1, horizon))
    return total


def score(theta, random, key, episodes, horizon):
    """Mean return over ``episodes`` episodes."""
    keys = jax.random.split(key, episodes)
    return jnp.mean(jax.vmap(lambda k: episode_return(theta, random, k, horizon))(keys))


def make_train(args, horizon):
    opt = optax.adam(args.lr)
    n_par = N_OBS * N_ACT + N_ACT

    def iteration(carry, key):
        theta, opt_state = carry
        k_eps, k_eval = jax.random.split(key)
        eps = jax.random.normal(k_eps, (args.pop // 2, n_par))
        eps = jnp.concatenate([eps, -eps])
        # the same episodes (keys) for every perturbation: common random numbers
        returns = jax.vmap(lambda e: score(theta + args.sigma * e, False, k_eval, args.episodes, horizon))(eps)
        ranks = jnp.argsort(jnp.argsort(returns)) / (args.pop - 1) - 0.5
        grad = -(ranks @ eps) / (args.pop * args.sigma)  # ascent on the return: descent on its negative
        updates, opt_state = opt.update(grad, opt_state)
        return (optax.apply_updates(theta, updates), opt_state), jnp.mean(returns)

    def train(seed_key):
        k_init, k_iter, k_final = jax.random.split(seed_key, 3)
        theta = 0.1 * jax.random.normal(k_init, (n_par,))
        (theta, _), curve = jax.lax.scan(iteration, (theta, opt.init(theta)), jax.random.split(k_iter, args.iters))
        # the trained policy and the random one, on different episodes (keys) of the same kind
        final, rand = jax.vmap(lambda r, k: score(theta, r, k, args.eval_episodes, horizon))(
            jnp.array([False, True]), jax.random.split(k_final))
        return theta, curve, final, rand

    return jax.jit(jax.vmap(train))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--iters", type=int, default=100)
    p.add_argument("--pop", type=int, default=32, help="perturbations per iteration (even)")
    p.add_argument("--episodes", type=int, default=8, help="episodes per score")
    p.add_argument("--eval-episodes", type=int, default=64)
    p.add_argument("--sigma", type=float, default=0.1)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--out", default=None, help="the picture (default docs/train_policy.png; "
                                               "examples/out/train_policy_quick.png with --quick)")
    p.add_argument("--quick", action="store_true", help="a smoke test: 2 seeds, 30 iterations, 16 perturbations")
    args = p.parse_args()
    horizon = int(PARAMS.max_steps)
    if args.quick:
        args.seeds, args.iters, args.pop, args.episodes, args.eval_episodes = 2, 30, 16, 4, 16
    if args.out is None:
        here = os.path.dirname(os.path.abspath(__file__))
        args.out = (os.path.join(here, "out", "train_policy_quick.png") if args.quick
                    else os.path.join(here, "..", "docs", "train_policy.png"))

    t0 = time.perf_counter()
    thetas, curves, final, rand = jax.block_until_ready(make_train(args, horizon)(
        jax.random.split(jax.random.PRNGKey(0), args.seeds)))
    seconds = time.perf_counter() - t0
    curves, final, rand = np.asarray(curves), np.asarray(final), np.asarray(rand)
    steps = args.seeds * args.iters * args.pop * args.episodes * horizon
    print(f"CartPole-v1, linear policy, evolution strategies: {args.seeds} seeds x {args.iters} iterations x "
          f"{args.pop} policies x {args.episodes} episodes, {seconds:.1f} s with compilation "
          f"(at most {steps:.2e} env steps)")
    for s in range(args.seeds):
        print(f"seed {s}: final policy {final[s]:6.1f}  random policy {rand[s]:5.1f}  "
              f"margin {final[s] - rand[s]:6.1f}   (mean over {args.eval_episodes} episodes)")
    margin = float(np.min(final - rand))
    print(f"worst seed beats the random policy by {margin:.1f} (required: {MARGIN:.0f}; the maximum return is "
          f"{horizon})")

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    it = np.arange(1, args.iters + 1)
    for s in range(args.seeds):
        ax.plot(it, curves[s], lw=1, alpha=0.6, label=f"seed {s}")
    ax.plot(it, curves.mean(0), "k", lw=2, label="mean over seeds")
    ax.axhline(rand.mean(), color="tab:red", ls="--", label=f"random policy ({rand.mean():.0f})")
    ax.set(xlabel="iteration", ylabel="mean return of the perturbed policies",
           title="CartPole-v1: a linear policy trained by evolution strategies")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {os.path.normpath(args.out)}")
    if not args.quick and margin < MARGIN:
        raise SystemExit(f"the policy did not learn: margin {margin:.1f} < {MARGIN}")


if __name__ == "__main__":
    main()
