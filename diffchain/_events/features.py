"""What the event rollout sees of a model: its contact features and its limited angles, for a :class:`Chain` and a
:class:`Mechanism` alike (seed 000 §7, §12.1 on any model).

An event state has F features of each kind (its masks are (F,)): contact feature i is a point of the model, limit
feature j an angle. For a chain F = n: point i is the chain's point x_i, angle j its joint angle theta_j. For a
mechanism F = max(P, L, 1): point i is the mechanism's i-th point (an affine function of q, seed 003), angle j its
j-th angle stop (the relative angle of two bodies, :meth:`Mechanism.limit_angles`); features beyond P or L are padding
that never touches or hits anything. Over a sub-quantum with constant accelerations a point moves exactly on the
seed's quadratic (it is affine in q); an angle follows it to second order (its rate and acceleration below).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .._model.chain import State
from .._model.geometry import joint_accelerations, joint_velocities, wrap_angle
from .._model.mechanism import Mechanism


def is_mechanism(model) -> bool:
    return isinstance(model, Mechanism)


def n_features(model) -> int:
    """F: the length of an event state's masks."""
    if is_mechanism(model):
        return max(model.W.shape[0] // 2, model.limit_idx.shape[0], 1)
    return model.n


def _pad(y, F):
    return jnp.concatenate([y, jnp.zeros((F - y.shape[0],) + y.shape[1:], y.dtype)])


def contact_points(model, x):
    """The contact features' positions (F, 2) at the positions x of the state (a chain's points, a mechanism's
    coordinate points)."""
    if is_mechanism(model):
        return _pad(model.points(x.reshape(-1)), n_features(model))
    return x


def contact_rates(model, v):
    """The contact features' velocities (F, 2) (or accelerations, for a and the same linear map)."""
    if is_mechanism(model):
        return _pad((model.W @ v.reshape(-1)).reshape(-1, 2), n_features(model))
    return v


def free_contacts(model, events, stuck):
    """The contact features that may touch an obstacle now: those marked in ``events.contact``, not stuck (and for a
    chain not guided)."""
    if is_mechanism(model):
        return events.contact & ~stuck
    return events.contact & ~model.guided & ~stuck


def wrapped_angles(model, x, ref=None):
    """The limit features' angles (F,) in (-pi, pi] (padding: 0), or on the branch within pi of ``ref`` (an angle's
    continuous value, carried from quantum to quantum)."""
    from .detection import _angles
    if not is_mechanism(model):
        return _angles(x, ref)
    theta = _pad(model.limit_angles(x.reshape(-1)), n_features(model))
    return theta if ref is None else ref + wrap_angle(theta - ref)


def angle_rates(model, x, v, a=None):
    """The limit features' angular velocities omega (F,) and, with ``a``, angular accelerations alpha (F,):
    d theta / dt and d^2 theta / dt^2 along x(s) = x + s v + s^2 a / 2 at s = 0."""
    if not is_mechanism(model):
        st = State(x, v)
        return joint_velocities(st) if a is None else (joint_velocities(st), joint_accelerations(st, a))
    F = n_features(model)

    def rate(q, qd):
        return jax.jvp(model.limit_angles, (q,), (qd,))[1]

    q, qd = x.reshape(-1), v.reshape(-1)
    if a is None:
        return _pad(rate(q, qd), F)
    omega, alpha = jax.jvp(rate, (q, qd), (qd, a.reshape(-1)))
    return _pad(omega, F), _pad(alpha, F)


def length_scale(model):
    """A length of the model (its longest rod or body; 1 without), for tolerances."""
    if is_mechanism(model):
        return jnp.max(model.dist.L, initial=1.0) if model.dist.L.shape[0] else jnp.ones((), model.M.dtype)
    return jnp.max(model.l, initial=1.0)


def weight(model):
    """The model's weight m g (m g with g >= 1 for a chain), for the release tests' round-off threshold."""
    if is_mechanism(model):
        # f_g sums every point's gravity: its y components add up to -m g; without gravity, the mass scale
        return jnp.maximum(jnp.abs(jnp.sum(model.f_g[1::2])), jnp.trace(model.M) / 2)
    return jnp.sum(model.m) * jnp.maximum(model.g, 1.0)


def model_dtype(model):
    return model.M.dtype if is_mechanism(model) else model.m.dtype
