"""The benchmark's workloads: diffchain's programs and the plain-JAX reduced-coordinate code a user would write instead.

Every workload is the same model on every side: a chain of point masses pinned at its first point (5, 20 and 100
links: masses 1 kg, lengths 1 m), the cart-pole and the acrobot of :mod:`diffchain.systems`, a four-bar mechanism and
a free chain dropped onto the ground against joint limits. Every rollout steps dt = 1 ms with zero input from random
starts. Integrators: semi-implicit Euler (v += a dt, x += v dt) wherever a peer runs (MuJoCo's ``Euler`` is this
scheme); the drop runs the event rollout's default, velocity Verlet with contacts, limits and halving.
"""
from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import diffchain as dc
from diffchain import systems

DT = 1e-3
G = 9.81


class Workload(NamedTuple):
    name: str
    label: str
    points: int                        # points per copy (the work of a step grows with it)
    build: Callable                    # dtype -> (model, starts(B, seed) -> batched start)
    run: Callable                      # (model, starts, T) -> batched final states (the forward program)
    loss: Callable                     # (model, starts, T) -> scalar (its gradient: the backward program)
    reduced: Callable | None = None    # dtype -> (starts(B, seed), run(starts, T), loss(starts, T), check())
    mujoco: tuple | None = None        # (masses, lengths) of a MuJoCo pendulum chain (diffchain._bench.peers)
    costly_gradient: bool = False      # its gradient compiles in over a minute: in the full run, float32 only (GPU: both)


def cast(tree, dtype):
    """The floating-point leaves of ``tree`` in ``dtype``."""
    return jax.tree_util.tree_map(
        lambda a: a.astype(dtype) if isinstance(a, jax.Array) and jnp.issubdtype(a.dtype, jnp.floating) else a, tree)


def _chain_programs(integrator, backend=None):
    def run(model, starts, T):
        return jax.vmap(lambda s: dc.rollout(model, s, None, DT, n_steps=T, integrator=integrator,
                                             backend=backend)[0])(starts)

    def loss(model, starts, T):
        final = run(model, starts, T)
        return jnp.sum(final.x ** 2) + jnp.sum(final.v ** 2)

    return run, loss


# --------------------------------------------------------------------------------------------------------------------
# pinned chains of point masses, and their reduced-coordinate form in absolute link angles phi
def _pendulum(n_links):
    def build(dtype):
        chain = cast(dc.pendulum(n_links, mass=1.0, length=1.0), dtype)

        def starts(B, seed):
            th = np.random.default_rng(seed).uniform(-np.pi, np.pi, (B, n_links))
            return jax.jit(jax.vmap(lambda t: dc.from_joint_angles(chain, t)))(jnp.asarray(th, dtype))

        return chain, starts
    return build


def reduced_pendulum_accel(phi, omega, m, l, g=G):
    """phi_dd of a pinned chain of point masses in absolute link angles: M(phi) phi_dd = -c - dV/dphi with
    M_ij = mu_ij l_i l_j cos(phi_i - phi_j), c_i = sum_j mu_ij l_i l_j sin(phi_i - phi_j) omega_j^2,
    dV/dphi_i = g l_i cos(phi_i) sum_{k >= i} m_k, mu_ij = sum_{k >= max(i, j)} m_k (m_k: the mass at the tip of link k)."""
    tail = jnp.cumsum(m[::-1])[::-1]
    idx = jnp.arange(phi.shape[0])
    mu = tail[jnp.maximum(idx[:, None], idx[None, :])]
    d = phi[:, None] - phi[None, :]
    ll = l[:, None] * l[None, :]
    M = mu * ll * jnp.cos(d)
    c = jnp.sum(mu * ll * jnp.sin(d) * omega[None, :] ** 2, axis=1)
    return jnp.linalg.solve(M, -c - g * l * jnp.cos(phi) * tail)


def _reduced(accel, sample, check):
    """A plain-JAX baseline: ``accel(q, qd) -> q_dd`` stepped by semi-implicit Euler in ``jax.lax.scan``, vmapped."""
    def build(dtype):
        def starts(B, seed):
            q, qd = sample(np.random.default_rng(seed), B)
            return jnp.asarray(q, dtype), jnp.asarray(qd, dtype)

        def run(starts, T):
            def one(q, qd):
                def body(c, _):
                    q, qd = c
                    qd = qd + DT * accel(q, qd)
                    return (q + DT * qd, qd), None
                return jax.lax.scan(body, (q, qd), None, length=T)[0]
            return jax.vmap(one)(*starts)

        def loss(starts, T):
            q, qd = run(starts, T)
            return jnp.sum(q ** 2) + jnp.sum(qd ** 2)

        return starts, run, loss, check
    return build


def _pendulum_reduced(n_links):
    m, l = jnp.ones(n_links), jnp.ones(n_links)

    def sample(rng, B):
        return np.cumsum(rng.uniform(-np.pi, np.pi, (B, n_links)), -1), np.zeros((B, n_links))

    def check():
        """max |phi_dd(diffchain) - phi_dd(reduced)| at a random state, float64."""
        chain = dc.pendulum(n_links, mass=1.0, length=1.0)
        rng = np.random.default_rng(7)
        th, thd = rng.uniform(-np.pi, np.pi, n_links), rng.uniform(-2, 2, n_links)

        @jax.jit
        def difference(th, thd):
            s = dc.from_joint_angles(chain, th, thd)
            alpha = dc.joint_accelerations(s, dc.forward_dynamics(chain, s))[:n_links]
            return jnp.max(jnp.abs(jnp.cumsum(alpha) - reduced_pendulum_accel(jnp.cumsum(th), jnp.cumsum(thd), m, l)))

        return float(difference(jnp.asarray(th), jnp.asarray(thd)))

    return _reduced(lambda q, qd: reduced_pendulum_accel(q, qd, m.astype(q.dtype), l.astype(q.dtype)), sample, check)


# --------------------------------------------------------------------------------------------------------------------
# the seed's cart-pole and acrobot: diffchain's chains and their printed closed forms
def _system(bench, closed_form, n_u, spread, n_q=2):
    """A benchmark object of :mod:`diffchain.systems` (``bench``) and its printed closed form, inputs of size n_u."""

    def sample(rng, B):
        return rng.uniform(-spread, spread, (B, n_q)), rng.uniform(-1, 1, (B, n_q))

    def build(dtype):
        chain = cast(bench.chain, dtype)

        def starts(B, seed):
            q, qd = (jnp.asarray(a, dtype) for a in sample(np.random.default_rng(seed), B))
            return cast(jax.jit(jax.vmap(bench.to_state))(q, qd), dtype)  # (the maps' constants are float64 under x64)

        return chain, starts

    def check():
        """max |q_dd(diffchain) - q_dd(closed form)| at a random state, float64."""
        rng = np.random.default_rng(7)
        q, qd = (jnp.asarray(a[0]) for a in sample(rng, 1))
        u = jnp.zeros(n_u).reshape(() if n_u == 1 else (n_u,))
        return float(jax.jit(lambda q, qd, u: jnp.max(jnp.abs(bench.qdd(q, qd, u) - closed_form(q, qd, u))))(q, qd, u))

    def accel(q, qd):
        return closed_form(q, qd, jnp.zeros(() if n_u == 1 else (n_u,), q.dtype))

    return build, _reduced(accel, sample, check)


# --------------------------------------------------------------------------------------------------------------------
def _four_bar(dtype):
    mech, s0 = systems.four_bar(motor=False, g=G, dtype=dtype)  # (drawn assembled)
    s0, _ = eqx.filter_jit(dc.velocity_analysis)(mech, dc.State(s0.x, jnp.asarray([[-0.8, 0.5], [0.0, 0.0]], dtype)))

    def starts(B, seed):  # the assembled state, each copy with its own speed (J v = 0 is linear in v)
        k = jnp.asarray(np.random.default_rng(seed).uniform(-3, 3, (B, 1, 1)), dtype)
        return dc.State(jnp.broadcast_to(s0.x, (B,) + s0.x.shape), k * s0.v, jnp.zeros((B,), dtype))

    return mech, starts


def _drop(dtype):
    chain = cast(dc.free_chain(5, mass=1.0, length=0.3), dtype)
    free_first = np.array([np.inf, 1.0, 1.0, 1.0, 1.0])  # joint 1 (the first link against the world) is free
    events = dc.Events(chain, ground=0.0, theta_min=-free_first, theta_max=free_first, dtype=dtype)

    def starts(B, seed):
        rng = np.random.default_rng(seed)
        th = np.zeros((B, 5))
        th[:, 0] = rng.uniform(-1.2, -0.4, B)
        # a straight chain at angle th_0 whose lowest point (its tip) is 2 cm above the ground: it lands after ~64 ms
        # and tumbles, so that the measured quanta are mostly events
        s = jax.vmap(lambda t: dc.from_joint_angles(chain, t, base=(0.0, 0.02 - 1.5 * jnp.sin(t[0]))))(
            jnp.asarray(th, dtype))
        return dc.EventState(s)

    return (chain, events), starts


def _drop_run(model, starts, T):
    chain, events = model
    return jax.vmap(lambda es: dc.event_rollout(chain, events, es, None, DT, n_steps=T)[0].state)(starts)


def _drop_loss(model, starts, T):
    final = _drop_run(model, starts, T)
    return jnp.sum(final.x ** 2) + jnp.sum(final.v ** 2)


def workloads():
    """The benchmark's workloads, in the order of its table."""
    sie = _chain_programs(dc.SemiImplicitEuler())
    cart_build, cart_reduced = _system(systems.cartpole(friction="none", mu_p=0.0),  # (no input, no friction)
                                       functools.partial(systems.cartpole_closed_form, mu_c=0.0, mu_p=0.0), 1, 0.3)
    acro_build, acro_reduced = _system(systems.acrobot(), systems.acrobot_closed_form, 2, np.pi)
    out = [Workload(f"pendulum{k}", f"{k}-link pendulum", k + 1, _pendulum(k), *sie, _pendulum_reduced(k),
                    ([1.0] * (k + 1), [1.0] * k)) for k in (5, 20, 100)]
    out.insert(1, out[0]._replace(name="pendulum5pm", label="5-link pendulum, `backend=PointMajor()`",
                                  run=_chain_programs(dc.SemiImplicitEuler(), dc.PointMajor())[0],
                                  loss=_chain_programs(dc.SemiImplicitEuler(), dc.PointMajor())[1]))
    out += [Workload("cartpole", "cart-pole (seed §14)", 2, cart_build, *sie, cart_reduced),
            Workload("acrobot", "acrobot (seed §13)", 3, acro_build, *sie, acro_reduced),
            Workload("fourbar", "four-bar mechanism", 2, _four_bar, *sie),
            Workload("drop", "6-point chain dropped on the ground, joint limits (events)", 6, _drop, _drop_run,
                     _drop_loss, costly_gradient=True)]  # (its gradient compiles in 70-90 s)
    return out
