"""The position-level constraint kinds of a model in natural coordinates (seed 003): distance (bodies' rigidity,
massless rods), rod (a chain's), coincidence, point on a line and drivers. Each is a small record of vectorised rows;
:class:`diffchain.MechanismBuilder` and :func:`diffchain.Chain` group them into a :class:`diffchain.Model`.
"""
from __future__ import annotations

from typing import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np



_R = np.array([[0.0, -1.0], [1.0, 0.0]])


def _cross(u, v):
    return u[..., 0] * v[..., 1] - u[..., 1] * v[..., 0]


class Distance(eqx.Module):
    """Rows (|p_j - p_i|^2 - L^2) / (2L) (seed 003): rigid bodies and massless rods of a mechanism. lambda = rod
    tension (N, pulling together)."""
    i: jax.Array
    j: jax.Array
    L: jax.Array

    def __call__(self, P, t):
        d = P[self.j] - P[self.i]
        return (jnp.sum(d * d, -1) - self.L**2) / (2 * self.L)


class Rod(eqx.Module):
    """Rows |p_j - p_i| - L (seed 000 eq. 4; eps of its drift correction, eq. 33): a chain's rods, rod k joining
    points k and k+1, the form the recursion solves in closed form (:mod:`diffchain._constraints.chain`). The same
    constraint as :class:`Distance` with rows of unit gradient, also off the rod's length. lambda = rod tension (N)."""
    i: jax.Array
    j: jax.Array
    L: jax.Array

    def __call__(self, P, t):
        d = P[self.j] - P[self.i]
        return jnp.sqrt(jnp.sum(d * d, -1)) - self.L


class Coincide(eqx.Module):
    """Rows p_i - p_j (2 per joint): revolute joints between bodies and ground pins. lambda = force on p_i (N)."""
    i: jax.Array
    j: jax.Array

    def __call__(self, P, t):
        return (P[self.i] - P[self.j]).reshape(-1)


class OnLine(eqx.Module):
    """Rows cross(p_b - p_a, p_i - p_a) / L_ab: point i on the line through a, b (slider, prismatic joint)."""
    i: jax.Array
    a: jax.Array
    b: jax.Array
    L: jax.Array

    def __call__(self, P, t):
        return _cross(P[self.b] - P[self.a], P[self.i] - P[self.a]) / self.L


class Driver(eqx.Module):
    """One rheonomic constraint row (seed 003 F^D(q, t) = 0) with a user function f(t):
      "distance": |p_j - p_i| - f(t)            (linear actuator)
      "angle":    |d| sin(phi_ij - f(t)) / L0   (absolute angle of i->j, a motor against the ground)
      "relangle": sin(phi_kl - phi_ij - f(t))   (angle from body i->j to body k->l), times |u||v|/(L0 L1)
      "x", "y":   a coordinate of point i minus f(t)
    """
    kind: str = eqx.field(static=True)
    idx: tuple = eqx.field(static=True)
    f: Callable = eqx.field(static=True)
    scale: float = eqx.field(static=True, default=1.0)

    def __call__(self, P, t):
        ft = self.f(t)
        if self.kind in ("x", "y"):
            return (P[self.idx[0], "xy".index(self.kind)] - ft)[None]
        i, j = self.idx[:2]
        d = P[j] - P[i]
        if self.kind == "distance":
            return (jnp.sqrt(jnp.sum(d * d)) - ft)[None]
        if self.kind == "angle":
            e = jnp.stack([jnp.cos(ft), jnp.sin(ft)])
            return (_cross(e, d) / self.scale)[None]
        k, l = self.idx[2:]
        v = P[l] - P[k]
        Ru = jnp.cos(ft) * d + jnp.sin(ft) * jnp.stack([-d[1], d[0]])
        return (_cross(Ru, v) / self.scale)[None]
