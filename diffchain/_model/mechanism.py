"""Planar mechanisms in natural coordinates: model, builder, constraints Phi(q, t) and applied forces.

Seed 003 (Buśko, Frączek, Wojtyra) "natural coordinates": the unknowns are the Cartesian coordinates of points,
q = (x_1, y_1, ..., x_N, y_N). Every other point of the model is an *affine* function of q:
  * a ground point is a constant;
  * an attachment point fixed in a body with base points (p0, p1) at local (a, b) (a along p0->p1, b across) is
        p = N(alpha, beta) [p0; p1],  N = [(1 - alpha) I - beta R,  alpha I + beta R],  alpha = a/L, beta = b/L
    (diffchain._model.inertia; no extra coordinates).
So all points are P = W q + c with a constant W (2P x 2N). A rigid body between two points has the constant 4x4 mass
block of :func:`diffchain._model.inertia.link_mass_blocks`; in q it is W^T M_pts W, still constant: the equations of
motion are M q_dd = Q(q, q_d, t) + J^T lambda with no velocity-product terms in M q_dd. M and the gravity forces are
assembled from the point masses and the bodies' mass, centre of mass, inertia and length, all arrays of the model: they
are differentiable.

Constraints (rows of Phi(q, t), grouped by kind and vectorised, fixed shapes, a boolean ``on`` mask per row):
  * Distance(i, j, L):      (|p_i - p_j|^2 - L^2) / (2 L)   -> lambda is the tension in N (rigid bodies, massless rods)
  * Coincide(i, j):          p_i - p_j                       -> lambda is the force on p_i in N (revolute joint, pin)
  * OnLine(i, a, b):         cross(p_b - p_a, p_i - p_a) / L_ab -> lambda is the normal force (slider, prismatic joint)
  * Driver(kind, idx, f):    rheonomic constraints with a user function f(t) (distance, absolute angle, relative angle,
                             coordinate) for kinematic analysis and prescribed motion (seed 003 F^D(q, t)).
Applied forces: gravity, linear springs/dampers between points, motor torques and rotational viscous dampers between two
bodies, quadratic air drag on points, point forces.
"""
from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from .chain import Control, State
from .forces import _speed
from .checks import describe
from .geometry import wrap_angle
from .inertia import link_mass_blocks
from .model import GENERAL, Model
from .._constraints.mechanism import Coincide, Distance, OnLine, _cross


class Bodies(eqx.Module):
    """The rigid bodies' mass (seed 003): base points i, j (indices into the P points), mass, centre of mass (a, b)
    in body coordinates (a along i -> j, b to the left), moment of inertia about it and length |p_j - p_i| (B each)."""
    i: jax.Array
    j: jax.Array
    mass: jax.Array
    com: jax.Array
    inertia: jax.Array
    L: jax.Array


class Mechanism(Model):
    """A planar mechanism in natural coordinates (module docstring). Build it with :class:`MechanismBuilder`.

    W (2P, 2N), c (2P,): all P points as affine functions of the N coordinate points; m (P,) point masses, bodies
    (:class:`Bodies`) and g (gravity along -y), which give the constant mass matrix :attr:`M` (2N, 2N) and the
    generalized gravity :attr:`f_g` (2N,); constraint groups with ``on`` masks; springs (i, j, k, L0, c); motors
    (index quadruples i, j, k, l: the torque acts on body k->l and, reacting, on body i->j); angle stops (quadruples
    as the motors', the range [limit_lo, limit_hi] of their relative angle, for the event rollout); rotational dampers
    (quadruples as the motors', coefficients damper_c: torque -c times the relative angular velocity); air drag k_v
    (P,) on the points (force -k_v v |v|; None without drag); names for reports.
    """
    W: jax.Array
    c: jax.Array
    m: jax.Array
    bodies: Bodies
    g: jax.Array
    dist: Distance
    coin: Coincide
    line: OnLine
    drivers: tuple
    on: jax.Array
    spring_idx: jax.Array
    spring_k: jax.Array
    spring_L0: jax.Array
    spring_c: jax.Array
    motor_idx: jax.Array
    limit_idx: jax.Array
    limit_lo: jax.Array
    limit_hi: jax.Array
    damper_idx: jax.Array
    damper_c: jax.Array
    k_v: jax.Array | None
    point_names: tuple = eqx.field(static=True)
    row_names: tuple = eqx.field(static=True)
    joint_rows: tuple = eqx.field(static=True)   # ((name, (first_row, n_rows)), ...)
    limit_names: tuple = eqx.field(static=True, default=())
    nominal_rank: int = eqx.field(static=True, default=-1)

    @property
    def n(self):
        """Number of coordinates (2 per coordinate point)."""
        return self.W.shape[1]

    @property
    def n_rows(self):
        return self.on.shape[0]

    def _point_mass_matrix(self):
        """M_pts (2P, 2P): the point masses' and the bodies' blocks on the P points."""
        P = self.m.shape[0]
        b = self.bodies
        M11, M12, M22 = link_mass_blocks(b.mass, b.com, b.inertia, b.L)
        k = jnp.arange(P)
        Mp = jnp.zeros((P, P, 2, 2), self.m.dtype).at[k, k].add(self.m[:, None, None] * jnp.eye(2, dtype=self.m.dtype))
        Mp = Mp.at[b.i, b.i].add(M11).at[b.i, b.j].add(M12).at[b.j, b.i].add(M12.swapaxes(-1, -2)).at[b.j, b.j].add(M22)
        return Mp.transpose(0, 2, 1, 3).reshape(2 * P, 2 * P)

    @property
    def M(self):
        """The constant mass matrix (2N, 2N) in q: W^T M_pts W."""
        return self.W.T @ self._point_mass_matrix() @ self.W

    @property
    def f_g(self):
        """The generalized gravity forces (2N,): W^T M_pts (0, -g, 0, -g, ...)."""
        P = self.m.shape[0]
        down = jnp.zeros((P, 2), self.m.dtype).at[:, 1].set(-self.g).reshape(-1)
        return self.W.T @ (self._point_mass_matrix() @ down)

    def points(self, q):
        """All points (P, 2) for the flat coordinates q (2N,)."""
        return (self.W @ q + self.c).reshape(-1, 2)

    def point(self, name, q):
        return self.points(q)[self.point_names.index(name)]

    def phi(self, q, t):
        """Phi(q, t): all constraint rows (masked rows are 0)."""
        P = self.points(q)
        rows = [self.dist(P, t), self.coin(P, t), self.line(P, t)] + [d(P, t) for d in self.drivers]
        return jnp.concatenate([r.astype(q.dtype) for r in rows]) * self.on

    def applied_forces(self, q, qd, t, tau=None, F=None):
        """Q(q, q_d, t): gravity + springs/dampers + motor torques tau (n_motors,) + rotational dampers + drag + point
        forces F (P, 2)."""
        n_m, P = self.motor_idx.shape[0], self.W.shape[0] // 2
        if tau is not None and jnp.shape(tau) != (n_m,):
            raise ValueError(f"Mechanism: tau must hold one torque per motor, shape (n_motors,) = ({n_m},) (motors in "
                             f"the order of creation), got shape {jnp.shape(tau)}")
        if F is not None and jnp.shape(F) != (P, 2):
            raise ValueError(f"Mechanism: F must hold one force per point, shape (P, 2) = ({P}, 2) (points in the order "
                             f"of point_names), got shape {jnp.shape(F)}")
        Q = self.f_g
        si = self.spring_idx
        if si.shape[0]:
            def length(q_):
                P = self.points(q_)
                d = P[si[:, 1]] - P[si[:, 0]]
                return jnp.sqrt(jnp.sum(d * d, -1))
            ell, ell_dot = jax.jvp(length, (q,), (qd,))
            tension = self.spring_k * (ell - self.spring_L0) + self.spring_c * ell_dot
            Q = Q - jax.vjp(length, q)[1](tension)[0]
        if tau is not None and self.motor_idx.shape[0]:
            Q = Q + jax.grad(lambda q_: jnp.sum(jnp.asarray(tau) * self.motor_angles(q_)))(q)
        if self.damper_idx.shape[0]:
            def angles(q_):
                return _relative_angles(self.points(q_), self.damper_idx)
            omega = jax.jvp(angles, (q,), (qd,))[1]
            Q = Q + jax.vjp(angles, q)[1](-self.damper_c * omega)[0]
        if self.k_v is not None or F is not None:
            F_P = jnp.zeros((P, 2), q.dtype) if F is None else jnp.asarray(F, q.dtype)
            if self.k_v is not None:
                v = (self.W @ qd).reshape(-1, 2)
                F_P = F_P - self.k_v[:, None] * v * _speed(v[:, 0], v[:, 1])[:, None]
            Q = Q + self.W.T @ F_P.reshape(-1)
        return Q

    def motor_angles(self, q):
        """Relative angle of each motor: angle(k->l) - angle(i->j) (atan2 of the cross/dot pair, in (-pi, pi])."""
        return _relative_angles(self.points(q), self.motor_idx)

    def limit_angles(self, q):
        """Relative angle of each angle stop (L,), as :meth:`motor_angles`, in (-pi, pi]."""
        return _relative_angles(self.points(q), self.limit_idx)

    # -- the model interface (diffchain._model.model) ----------------------------------------------------------------
    topology = GENERAL

    @property
    def dtype(self):
        return self.m.dtype

    def default_solver(self):
        from .._solvers.dense import KKT
        return KKT()

    def check_inputs(self, state, control, who, steps=False):
        if state is not None:
            if not isinstance(state, State):
                raise TypeError(f"{who}: state must be a diffchain.State, got {describe(state)}")
            N = self.n // 2
            if state.x.shape != (N, 2):
                raise ValueError(f"{who}: the state must hold the mechanism's N = {N} coordinate points, x and v of "
                                 f"shape ({N}, 2), got x of shape {state.x.shape}")
        if control is None or callable(control) and not isinstance(control, Control):
            return
        if not isinstance(control, Control):
            raise TypeError(f"{who}: a mechanism's controls must be a diffchain.Control of the motor torques (and "
                            f"point forces), a policy returning one, or None; got {describe(control)}")
        n_m, P = self.motor_idx.shape[0], self.W.shape[0] // 2
        taus, forces = (f"(T, n_motors) = (T, {n_m})", f"(T, P, 2) = (T, {P}, 2)") if steps else \
            (f"(n_motors,) = ({n_m},)", f"(P, 2) = ({P}, 2)")
        if control.tau.shape[:-1] != control.tau.shape[:int(steps)] or control.tau.shape[-1:] != (n_m,):
            hint = (" (a Control given F alone has one zero torque per point: pass tau too)"
                    if control.F is not None and control.tau.shape[-1] == P else "")
            raise ValueError(f"{who}: a mechanism's controls hold one torque per motor, Control(tau=...) of shape "
                             f"{taus} (motors in the order of creation), got tau of shape {control.tau.shape}{hint}")
        if control.F is not None and control.F.shape[-2:] != (P, 2):
            raise ValueError(f"{who}: a mechanism's point forces hold one force per point, Control(F=...) of shape "
                             f"{forces} (points in the order of point_names), got F of shape {control.F.shape}")

    def zero_control(self, dtype):
        """No input: zero motor torques and point forces."""
        return Control(tau=jnp.zeros((self.motor_idx.shape[0],), dtype), F=jnp.zeros((self.W.shape[0] // 2, 2), dtype))

    def length_scale(self):
        return jnp.max(self.dist.L, initial=1.0) if self.dist.L.shape[0] else jnp.ones((), self.dtype)

    def weight(self):
        # f_g sums every point's gravity: its y components add up to -m g; without gravity, the mass scale
        return jnp.maximum(jnp.abs(jnp.sum(self.f_g[1::2])), jnp.trace(self.M) / 2)

    @property
    def n_features(self):
        """F = max(P, L, 1): the points and the angle stops, padded to a common length."""
        return max(self.W.shape[0] // 2, self.limit_idx.shape[0], 1)

    def contact_points(self, x):
        return pad(self.points(x.reshape(-1)), self.n_features)

    def contact_rates(self, v):
        return pad((self.W @ v.reshape(-1)).reshape(-1, 2), self.n_features)

    def free_contacts(self, contact, stuck):
        return contact & ~stuck

    def feature_angles(self, x, ref=None):
        theta = pad(self.limit_angles(x.reshape(-1)), self.n_features)
        return theta if ref is None else ref + wrap_angle(theta - ref)

    def angle_rates(self, x, v, a=None):
        def rate(q, qd):
            return jax.jvp(self.limit_angles, (q,), (qd,))[1]

        q, qd, F = x.reshape(-1), v.reshape(-1), self.n_features
        if a is None:
            return pad(rate(q, qd), F)
        omega, alpha = jax.jvp(rate, (q, qd), (qd, a.reshape(-1)))
        return pad(omega, F), pad(alpha, F)

    def energy(self, state: State):
        """Kinetic + gravitational + spring potential energy (conserved without dampers, drag, motors, drivers)."""
        q, qd = state.x.reshape(-1), state.v.reshape(-1)
        V = -self.f_g @ q
        if self.spring_idx.shape[0]:
            P = self.points(q)
            d = P[self.spring_idx[:, 1]] - P[self.spring_idx[:, 0]]
            V = V + 0.5 * jnp.sum(self.spring_k * (jnp.sqrt(jnp.sum(d * d, -1)) - self.spring_L0) ** 2)
        return 0.5 * qd @ self.M @ qd + V


def _relative_angles(P, idx):
    """angle(P[k] -> P[l]) - angle(P[i] -> P[j]) for each index quadruple (i, j, k, l) of ``idx``."""
    u, v = P[idx[:, 1]] - P[idx[:, 0]], P[idx[:, 3]] - P[idx[:, 2]]
    return jnp.arctan2(_cross(u, v), jnp.sum(u * v, -1))


def pad(y, F):
    """``y`` padded with zeros to F entries along its first axis (the features beyond a mechanism's points or stops)."""
    return jnp.concatenate([y, jnp.zeros((F - y.shape[0],) + y.shape[1:], y.dtype)])
