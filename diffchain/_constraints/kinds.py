"""The catalogue of a model's constraint kinds in natural coordinates (seed 003): at the position level distance
(bodies' rigidity, massless rods), rod (a chain's), coincidence, point on a line and drivers, each a small record of
vectorised rows of Phi(q, t); the point kinds of seed 000 §6 (guided points, points on fixed lines), rows at the
acceleration level; and the one-sided kinds the event rollout switches on, contacts (seed 000 §7) and angles held at
a limit (§12.1: a mechanism's stops, a chain's held joints). :class:`diffchain.MechanismBuilder` and :func:`diffchain.Chain` group them into a
:class:`diffchain.Model`; :mod:`diffchain._constraints.system` assembles their rows (J, J_dot q_dot, the drift
correction) for every model.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .._xla.linalg import row_norms



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


@dataclasses.dataclass(frozen=True)
class Polynomial:
    """f(t) = c_0 + c_1 t + ... + c_k t^k (Horner's rule): a driver's function of time
    (:meth:`diffchain.MechanismBuilder.drive`) that a model file can hold (:func:`diffchain.save`); a constant driver
    is a polynomial of degree 0. Equal coefficients make equal functions, so two models with the same drivers share
    their compiled programs.

        mb.drive("crank", "angle", ("O", "A"), dc.Polynomial((0.5, 2.0)))   # theta(t) = 0.5 + 2 t
    """
    coefficients: tuple

    def __post_init__(self):
        c = tuple(float(v) for v in np.ravel(np.asarray(self.coefficients, float)))
        if not c or not np.all(np.isfinite(c)):
            raise ValueError(f"Polynomial: coefficients must be one or more finite numbers, got {self.coefficients!r}")
        object.__setattr__(self, "coefficients", c)

    def __call__(self, t: ArrayLike) -> ArrayLike:
        c = self.coefficients
        y = c[-1] + 0.0 * t   # (a constant: the shape and dtype of t)
        for ck in c[-2::-1]:
            y = y * t + ck
        return y


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


def slider_rhs(sx, sy, c, X, Y, U, V, w):
    """A slider row's right-hand side s_i^T a_i = -eps/T^2 - 2 eps'/T, eps = s_i^T x_i - c_i (seed 000 §6.3, eq. 33),
    elementwise, w = 1/T (0: none)."""
    return -(sx * X + sy * Y - c) * w**2 - 2.0 * (sx * U + sy * V) * w


class PointKinds(eqx.Module):
    """The point kinds of seed 000 §6 on the first G points of a model (a chain's every point; the mechanism builder
    makes none), two candidate acceleration rows per point, S_i a_i = beta_i (the rows selected by a mask):

      guided (G,):  a prescribed acceleration a^w_i (§6.1): S_i = I, beta_i = a^w_i (a fixed pin: a^w = 0);
      slider (G,):  on the fixed line {x : s_i·x = c_i} (§6.3; ``s`` (G, 2) unit normals, ``c`` (G,) offsets):
                    S_i = [s_i^T; 0], beta_i = [the PD term of eq. 33; 0]; ``guided`` wins where both are set.

    Every form reads the lines through :attr:`lines`, scaled to a unit normal: a normal off the unit circle (a
    derivative along it, a traced value) still means the line {x : s·x = c}, the same for every solver.
    """
    guided: jax.Array
    slider: jax.Array
    s: jax.Array
    c: jax.Array

    @property
    def lines(self):
        """(s / |s|, c / |s|): the sliders' lines with unit normals (a zero normal is left as it is)."""
        r = row_norms(self.s)
        r = jnp.where(r > 0, r, 1.0)
        return self.s / r[..., None], self.c / r

    @property
    def slider_mask(self):
        """Points that move on a fixed line and are not guided."""
        return self.slider & ~self.guided

    def rows(self, P, V, a_w, w):
        """S (G, 2, 2), mask (G, 2) and beta (G, 2) at the points' positions P (G, 2), velocities V (G, 2) and
        prescribed accelerations a_w (G, 2), w = 1/T of the drift correction (0: none). The rows are orthonormal, so
        the admissible accelerations are a_i = P_i a + a0_i with P_i = I - sum_j S_ij^T S_ij and
        a0_i = sum_j S_ij^T beta_ij (:func:`diffchain._constraints.chain.projector`)."""
        guided, slider = self.guided, self.slider_mask
        (s, c), eye = self.lines, jnp.broadcast_to(jnp.eye(2, dtype=P.dtype), guided.shape + (2, 2))
        S = jnp.where(guided[:, None, None], eye, jnp.stack([s, jnp.zeros_like(s)], 1))
        mask = jnp.stack([guided | slider, guided], -1)
        beta_s = slider_rhs(s[:, 0], s[:, 1], c, P[:, 0], P[:, 1], V[:, 0], V[:, 1], w)
        beta = jnp.where(guided[:, None], a_w, jnp.stack([beta_s, jnp.zeros_like(beta_s)], -1))
        return S, mask, jnp.where(mask, beta, 0.0)

    def residual(self, P):
        """The rows' position errors (G, 2) at P (G, 2): a slider's s_i^T p_i - c_i, 0 elsewhere (a guided point is
        where its prescribed motion puts it)."""
        s, c = self.lines
        line = jnp.where(self.slider_mask, jnp.sum(s * P, -1) - c, 0.0)
        return jnp.stack([line, jnp.zeros_like(line)], -1)


def contact_jacobian(model, x):
    """W_i (F, 2, 2N): the contact points' rows of W (the points are affine in the coordinates x (N, 2); a chain's:
    the identity; features beyond the points: 0)."""
    n2 = 2 * x.shape[0]
    W = (jnp.eye(n2, dtype=x.dtype) if model.W is None else model.W).reshape(-1, 2, n2)
    return jnp.concatenate([W, jnp.zeros((model.n_features - W.shape[0], 2, n2), W.dtype)])


class Contacts(eqx.Module):
    """Contact points held on an obstacle line (seed 000 §7; one-sided: the event rollout releases a point the line
    would pull): the contact features marked ``on`` (F,), each at its ``pin`` (F, 2) on a line of unit ``normal``
    (F, 2). Two rows per feature, W_i q_dd = a^w_i (a point p_i = W_i q + c_i is affine in q), a^w_i the PD correction
    towards the pin (eq. 33); their multipliers are the obstacle's force on the point."""
    on: jax.Array
    pin: jax.Array
    normal: jax.Array

    def jacobian(self, model, x):
        """J (2F, 2N) and on (2F,) at the coordinate points x (N, 2)."""
        return contact_jacobian(model, x).reshape(2 * self.on.shape[0], -1), jnp.repeat(self.on, 2)

    def rows(self, model, x, v, w):
        """J (2F, 2N), gamma (2F,) and on (2F,) at x, v (N, 2), w = 1/T of the drift correction."""
        a_w = -(model.contact_points(x) - self.pin) * w**2 - 2.0 * model.contact_rates(v) * w
        J, on = self.jacobian(model, x)
        return J, a_w.reshape(-1), on


class Stops(eqx.Module):
    """Angles held at a limit (seed 000 §12.1, one-sided angle limits: a mechanism's stops, a chain's held joints in
    the impact rule and the projections; the recursion holds a chain's as its Part II active joints): the limit
    features marked ``on`` (F,) held at ``limit`` (F,), ``theta`` (F,) their angles on the continuous branch. One row
    per feature, G_j q_dd = -q_d^T H_j q_d - (theta_j - limit_j)/T^2 - 2 omega_j/T with G_j = d theta_j / dq (a
    chain's joint: the row of seed eq. 13); its multiplier is the holding torque."""
    on: jax.Array
    limit: jax.Array
    theta: jax.Array

    def jacobian(self, model, x):
        """G (F, 2N) and on (F,) at the coordinate points x (N, 2)."""
        return jax.jacfwd(lambda q: model.feature_angles(q.reshape(x.shape)))(x.reshape(-1)), self.on

    def rows(self, model, x, v, w):
        """G (F, 2N), gamma (F,) and on (F,) at x, v (N, 2), w = 1/T of the drift correction."""
        omega, vHv = model.angle_rates(x, v, jnp.zeros_like(v))  # (alpha with q_dd = 0: q_d^T H q_d)
        G, on = self.jacobian(model, x)
        return G, -vHv - (self.theta - self.limit) * w**2 - 2.0 * omega * w, on
