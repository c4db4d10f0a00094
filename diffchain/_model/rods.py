"""A chain's state from its joint angles (:func:`from_joint_angles`), and whether a state is on its rods and sliders:
:func:`constraint_violation`, :func:`check_state` (the start check of :func:`diffchain.rollout` and
:func:`diffchain.check_event_state`)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
from jax.typing import ArrayLike

from .._state import State
from .checks import compiled, runtime_checks
from .geometry import links, perp
from .model import Model


def from_joint_angles(chain: Model, theta: npt.ArrayLike, theta_dot: npt.ArrayLike | None = None,
                      base: npt.ArrayLike = (0.0, 0.0), base_velocity: npt.ArrayLike = (0.0, 0.0),
                      t: ArrayLike = 0.0) -> State:
    """The Cartesian :class:`State` of a chain given its joint angles theta (n-1,) and rates (n-1,), and point 1.

    Point 1 is at ``base`` moving with ``base_velocity``; phi = cumsum(theta) are the link angles.
    """
    l = chain.l
    if np.shape(theta) != l.shape:
        raise ValueError(f"from_joint_angles: theta must have shape (n-1,) = {l.shape}, got {np.shape(theta)}")
    if theta_dot is not None and np.shape(theta_dot) != l.shape:
        raise ValueError(f"from_joint_angles: theta_dot must have shape (n-1,) = {l.shape}, got "
                         f"{np.shape(theta_dot)}")
    return _cartesian(l, theta, theta_dot, base, base_velocity, t)


@jax.jit
def _cartesian(l, theta, theta_dot, base, base_velocity, t):
    """:func:`from_joint_angles`' state (one compiled program, not one per operation)."""
    theta = jnp.asarray(theta, l.dtype)
    theta_dot = jnp.zeros_like(theta) if theta_dot is None else jnp.asarray(theta_dot, l.dtype)
    phi, phi_dot = jnp.cumsum(theta), jnp.cumsum(theta_dot)
    u = jnp.stack([jnp.cos(phi), jnp.sin(phi)], -1)
    base = jnp.asarray(base, l.dtype)
    base_velocity = jnp.asarray(base_velocity, l.dtype)
    x = jnp.concatenate([base[None], base + jnp.cumsum(l[:, None] * u, 0)])
    v = jnp.concatenate([base_velocity[None], base_velocity + jnp.cumsum((l * phi_dot)[:, None] * perp(u), 0)])
    return State(x, v, t)


@compiled
def constraint_violation(chain: Model, state: State) -> tuple[jax.Array, jax.Array]:
    """Largest rod-length error |‖x_{i+1}-x_i‖ - l_i| and rod-stretch-rate |r_i^T (v_{i+1}-v_i)|, and the slider errors.
    A rod between two guided points is switched off (their prescribed motion wins, seed §6.1) and not counted."""
    _, rho, r = links(state.x)
    # the masks multiply (a NaN state gives NaN): with a mask known at compile time to be all off (a chain without
    # sliders) jnp.where would make the term a batch-sized constant, which XLA folds slowly (seconds at 64k copies)
    on, on_line = chain.rod_on.astype(rho.dtype), chain.slider_mask.astype(rho.dtype)
    length = jnp.max(jnp.abs(rho - chain.l) * on, initial=0.0)
    rate = jnp.max(jnp.abs(jnp.sum(r * (state.v[1:] - state.v[:-1]), -1)) * on, initial=0.0)
    line = jnp.max(jnp.abs(jnp.sum(chain.s * state.x, -1) - chain.c) * on_line, initial=0.0)
    line_rate = jnp.max(jnp.abs(jnp.sum(chain.s * state.v, -1)) * on_line, initial=0.0)
    return jnp.maximum(length, line), jnp.maximum(rate, line_rate)


def check_state(chain: Model, state: State, tol: float = 1e-6) -> State:
    """Raise if ``state`` is off the constraint manifold or not finite; returns the state so it can be threaded on.

    Allowed: a rod-length or slider-line error of tol * max(l) + 8 eps max|x| and a stretch rate (or speed off a
    slider line) of tol (1 + max|v|) + 8 eps max|v| (1 + max|x| / min(l)), with eps the machine epsilon of the
    state's dtype: the terms in eps are the round-off of a state computed in that dtype (float32 positions far from
    the origin carry errors far above 1e-6 of a short rod). Values known now raise a :class:`diffchain.InputError`
    now; traced ones (under ``jit``/``vmap``) when the program runs (:func:`diffchain._model.checks.runtime_checks`).
    """
    return State(runtime_checks((state.x,), state_checks(chain, state, tol))[0], state.v, state.t)


def state_checks(chain, state: State, tol: float = 1e-6) -> list:
    """The checks of :func:`check_state`, for :func:`diffchain._model.checks.runtime_checks`."""
    if state.x.shape != (chain.n, 2):
        raise ValueError(f"check_state: x must have shape (n, 2) = ({chain.n}, 2) for this chain, got {state.x.shape}")
    pos, vel = constraint_violation(chain, state)
    eps = float(jnp.finfo(jnp.result_type(state.x, chain.m)).eps)
    size = jnp.max(jnp.abs(state.x), initial=0.0)
    speed = jnp.max(jnp.abs(state.v), initial=0.0)
    if chain.n > 1:
        longest, shortest = jnp.max(chain.l), jnp.min(chain.l)
    else:  # a lone point: absolute tolerances
        longest = shortest = 1.0
    pos_tol = tol * longest + 8 * eps * size
    vel_tol = tol * (1.0 + speed) + 8 * eps * speed * (1.0 + size / shortest)
    return [
        (~jnp.all(jnp.isfinite(state.x)) | ~jnp.all(jnp.isfinite(state.v)),
         "check_state: the state must be finite, but x or v holds NaN or inf: max|x|, max|v| are",
         jnp.stack([size, speed])),
        (pos > pos_tol, "check_state: the state is off the constraint manifold (a rod length or a slider line is "
         "violated beyond tol): the largest error and the allowed one are", jnp.stack([pos, pos_tol])),
        (vel > vel_tol, "check_state: the velocities violate the constraints (a rod stretches or a slider leaves its "
         "line beyond tol): the largest rate and the allowed one are", jnp.stack([vel, vel_tol]))]
