"""A force kind in one file: :class:`TorsionalSprings`, linear torsional springs (with optional rotational dampers)
between two bodies, or a body and the world.

A force kind is an equinox module in :attr:`diffchain.Model.forces` with two methods, ``energy(model, q)`` (its
potential, a scalar) and ``force(model, q, qd)`` (its generalized force on the coordinates q, (2N,)). Every path adds
them: :meth:`Model.applied_forces` (a mechanism's dense solvers), :func:`diffchain._model.forces.external_forces_c`
(a chain's recursion, banded solve, projections and events) and :meth:`Model.energy`. Both methods work on any model
through :meth:`Model.points` and automatic differentiation; no solver knows the kind.
"""
from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from .._model.model import relative_angles


def wrap(d):
    """d wrapped to (-pi, pi] as atan2(sin d, cos d): smooth in d everywhere (derivative 1), also at the branch cut."""
    return jnp.arctan2(jnp.sin(d), jnp.cos(d))


class TorsionalSprings(eqx.Module):
    """K torsional springs, each between body i->j and body k->l of an index quadruple of ``idx`` (K, 4), indices into
    the model's points as a motor's (:attr:`Model.motor_idx`; -2, -1 are the world frame's (0, 0), (1, 0)).

    Spring s acts on the relative angle theta_s = angle(k->l) - angle(i->j) (:func:`relative_angles`) with stiffness
    ``k`` (K,) in N m/rad, rest angle ``theta0`` (K,) in rad and optional rotational damping ``c`` (K,) in N m s/rad
    (None: none). Its potential and its torque on body k->l (reacting on body i->j) are

        E_s   = (1/2) k_s wrap(theta_s - theta0_s)^2,
        tau_s = -k_s wrap(theta_s - theta0_s) - c_s omega_s,      omega_s = d theta_s / dt,

    with wrap(d) = atan2(sin d, cos d) in (-pi, pi] (:func:`wrap`, smooth at the branch cut). The generalized force is
    Q = -dE/dq - J^T (c omega) = J^T tau with J = d theta / dq, by automatic differentiation through
    :meth:`Model.points` (as the model's rotational dampers)."""

    idx: jax.Array
    k: jax.Array
    theta0: jax.Array
    c: jax.Array | None = None

    def angles(self, model, q):
        """theta (K,): the springs' relative angles at the coordinates q (2N,), in (-pi, pi]."""
        return relative_angles(model.points(q), self.idx)

    def energy(self, model, q):
        """sum_s (1/2) k_s wrap(theta_s - theta0_s)^2 at the coordinates q (2N,) (a scalar)."""
        d = wrap(self.angles(model, q) - self.theta0)
        return 0.5 * jnp.sum(self.k * d * d)

    def force(self, model, q, qd):
        """The generalized force (2N,) at q, qd (2N,): J^T tau with tau = -k wrap(theta - theta0) - c omega (the
        class docstring), i.e. -dE/dq minus the damping's J^T c omega; omega = J qd by ``jax.jvp``, J^T by
        ``jax.vjp``."""
        theta, pullback = jax.vjp(lambda q_: self.angles(model, q_), q)
        tau = -self.k * wrap(theta - self.theta0)
        if self.c is not None:
            omega = jax.jvp(lambda q_: self.angles(model, q_), (q,), (qd,))[1]
            tau = tau - self.c * omega
        return pullback(tau.astype(q.dtype))[0]

