"""The one model (:class:`Model`): points in the plane, their mass, constraints and forces (seed 003 natural
coordinates), built by :func:`~diffchain.Chain` (and :func:`~diffchain.pendulum`, ...) or
:class:`~diffchain.MechanismBuilder`.

The unknowns are the Cartesian coordinates of N coordinate points, q = (x_1, y_1, ..., x_N, y_N). Every point of the
model is an affine function of q, P = W q + offset (ground points are constants, a point fixed in a body is a fixed
combination of the body's base points); a chain's points are its coordinates (W = None). A rigid body between two
points has a constant 4x4 mass block (:func:`diffchain._model.inertia.link_mass_blocks`), so M = W^T M_pts W is
constant and the equations of motion M q_dd = Q(q, q_d, t) + J^T lambda have no velocity-product terms.

Constraints (rows of Phi(q, t), grouped by kind and vectorised, fixed shapes, a boolean ``on`` mask per row):
  * Distance(i, j, L):      (|p_i - p_j|^2 - L^2) / (2 L)   -> lambda is the tension in N (rigid bodies, massless rods)
  * Rod(i, j, L):           |p_j - p_i| - L                 -> the same, a chain's rods (seed 000 eq. 4)
  * Coincide(i, j):          p_i - p_j                       -> lambda is the force on p_i in N (revolute joint, pin)
  * OnLine(i, a, b):         cross(p_b - p_a, p_i - p_a) / L_ab -> lambda is the normal force (slider, prismatic joint)
  * Driver(kind, idx, f):    rheonomic constraints with a user function f(t) (distance, absolute angle, relative angle,
                             coordinate) for kinematic analysis and prescribed motion (seed 003 F^D(q, t));
and the point kinds of seed 000 §6 (guided points, points on fixed lines: a chain's), two acceleration rows per point.
:mod:`diffchain._constraints.system` assembles every model's rows, one drift correction for all.
Applied forces: gravity, linear springs/dampers between points, motor torques and rotational viscous dampers between two
bodies, quadratic air drag on points, point forces; a chain's joint torques and damping are its motors and dampers.
"""
from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.typing import ArrayLike, DTypeLike

from .._constraints.kinds import PointKinds, Rod
from .._state import Control, State
from .checks import compiled, describe
from .forces import _speed
from .geometry import joint_accelerations, joint_velocities, wrap_angle, wrapped_joint_angles
from .inertia import link_mass_blocks
from .inputs import check_general_inputs, check_path_inputs



class Bodies(eqx.Module):
    """The rigid bodies' mass (seed 003): base points i, j (indices into the P points), mass, centre of mass (a, b)
    in body coordinates (a along i -> j, b to the left), moment of inertia about it (B each) and length |p_j - p_i|
    (None: the lengths of the model's first B distance rows, a chain's rods)."""
    i: jax.Array
    j: jax.Array
    mass: jax.Array
    com: jax.Array
    inertia: jax.Array
    L: jax.Array | None = None


class Model(eqx.Module):
    """A planar model in natural coordinates (seed 003): points in the plane, their mass, constraints and forces.

    Every entry point (:func:`forward_dynamics`, :func:`step`, :func:`rollout`, :func:`project`,
    :func:`event_rollout`, :func:`diagnose`, :class:`Events`) takes a model. Two builders make one:

    * :func:`Chain` (and :func:`pendulum`, :func:`free_chain`, :func:`cart_chain`): points joined in a serial path
      by rods, with guided and sliding points, point masses and rigid links: a :attr:`serial` model, which the seed-000
      recursion needs;
    * :class:`MechanismBuilder`: any linkage, bodies and attachment points, closed loops, drivers, springs, motors,
      dampers and angle stops.

    Whether a model is serial is read off its kinds (:attr:`serial`): a solver that needs a path (:class:`Recursive`,
    :class:`ShortChain`) refuses other models with a clear error. The state of either is a :class:`State`: the N
    coordinate points x (N, 2), their velocities and the time.

    Points: ``W`` (2P, 2N), ``offset`` (2P,): all P points as P = W q + offset (None: the points are the coordinates).
    Mass: ``m`` (P,) point masses, ``bodies`` (:class:`Bodies`; a chain's links with distributed mass, None without),
    ``g`` gravity along -y; they give :attr:`M` and :attr:`f_g`.
    Constraints (each with its mask): ``dist`` distance rows (a chain's rods, rod i joining points i and i+1, lengths
    :attr:`l`), ``coin`` coincidences, ``line`` points on lines through two points, ``drivers`` (rows of f(t)) and
    ``on`` (the mask of these rows; None on a chain, whose rods are on unless both ends are guided); ``point_kinds``
    (:class:`~diffchain._constraints.kinds.PointKinds`) of the first G points (a chain's G = n, the mechanism
    builder's G = 0): :attr:`guided` (G,) points with a prescribed acceleration a^w (seed 000 §6.1), :attr:`slider`
    (G,) points on the fixed lines {x : s_i·x = c_i} (:attr:`s` (G, 2) unit normals, :attr:`c` (G,) offsets; seed 000
    §6.3).
    Forces: springs (``spring_idx`` point pairs, stiffness, free length, damper), motors (``motor_idx`` index
    quadruples i, j, k, l: the torque acts on body k->l and, reacting, on body i->j; indices -2, -1 are the world
    frame's (0, 0), (1, 0)), rotational dampers (``damper_idx`` as the motors', ``damper_c``: torque -c times the
    relative angular velocity), air drag ``k_v`` (P,) (force -k_v v |v|; None: none). A chain has a motor and a damper
    at every joint i (link i against link i-1; the first against the world, the last on link n-1 alone): its controls'
    ``tau`` and its ``k_omega``.
    Force kinds: ``forces``, a tuple of modules with ``energy(model, q)`` and ``force(model, q, qd)`` (the generalized
    force), e.g. :class:`~diffchain._kinds.torsion.TorsionalSprings`; every path adds them (:meth:`applied_forces`,
    a chain's :func:`~diffchain._model.forces.external_forces_c`, :meth:`energy`).
    Angle stops for the event rollout: ``limit_idx`` (quadruples as the motors'), ``limit_lo``, ``limit_hi``.

    Features, for the event rollout (seed 000 §7, §12.1 on any model): a model has F features of each kind (an event
    state's masks are (F,)). Contact feature i is a point of the model, limit feature j an angle: for a chain F = n,
    point i is x_i and angle j the joint angle theta_j; a mechanism pads its points and its angle stops to a common F.
    Over a sub-quantum with constant accelerations a contact point moves exactly on the seed's quadratic (it is affine
    in the coordinates); an angle follows it to second order (:meth:`angle_rates`).
    """

    W: jax.Array | None
    offset: jax.Array | None
    m: jax.Array
    bodies: Bodies | None
    g: jax.Array
    dist: eqx.Module
    coin: eqx.Module
    line: eqx.Module
    drivers: tuple
    on: jax.Array | None
    point_kinds: PointKinds
    spring_idx: jax.Array
    spring_k: jax.Array
    spring_L0: jax.Array
    spring_c: jax.Array
    motor_idx: jax.Array
    damper_idx: jax.Array
    damper_c: jax.Array
    k_v: jax.Array | None
    limit_idx: jax.Array
    limit_lo: jax.Array
    limit_hi: jax.Array
    forces: tuple = ()   # force kinds (diffchain._kinds: TorsionalSprings): energy(model, q), force(model, q, qd)
    point_names: tuple = eqx.field(static=True, default=())
    row_names: tuple = eqx.field(static=True, default=())
    joint_rows: tuple = eqx.field(static=True, default=())   # ((name, (first_row, n_rows)), ...)
    limit_names: tuple = eqx.field(static=True, default=())
    nominal_rank: int = eqx.field(static=True, default=-1)

    # -- structure, sizes and a chain's names ------------------------------------------------------------------------
    @property
    def serial(self) -> bool:
        """Whether the model is a serial chain, the structure of the seed-000 recursion (Part I, §3): its coordinates
        are its points (no point map ``W``) and its distance rows are the rods of a path
        (:class:`~diffchain._constraints.kinds.Rod`, rod i joining points i and i+1). Read off the model's kinds, not
        set by a builder: a model of any other structure takes the dense solvers."""
        return self.W is None and isinstance(self.dist, Rod)

    @property
    def n(self) -> int:
        """N, the number of coordinate points (a chain's points)."""
        return self.m.shape[0] if self.W is None else self.W.shape[1] // 2

    @property
    def n_points(self) -> int:
        """P, the number of points (ground and attached points included)."""
        return self.m.shape[0]

    @property
    def n_rows(self) -> int:
        return self.on.shape[0]

    @property
    def dtype(self) -> jnp.dtype:
        return self.m.dtype

    @property
    def l(self) -> jax.Array:
        """The distance rows' lengths: a chain's rod lengths (n-1,)."""
        return self.dist.L

    @property
    def k_omega(self) -> jax.Array:
        """A chain's joint viscous damping (n,): torque -k_omega_i omega_i^z at joint i (seed 000 §4.3); zeros for a
        chain built without dampers (:attr:`damper_idx` empty, nothing of them computed)."""
        return self.damper_c if self.damper_idx.shape[-2] else jnp.zeros_like(self.m)

    @property
    def has_links(self) -> bool:
        """Whether a chain's links carry distributed mass (decides the recursion at trace time)."""
        return self.bodies is not None

    @property
    def link_mass(self) -> jax.Array | None:
        return None if self.bodies is None else self.bodies.mass

    @property
    def link_com(self) -> jax.Array | None:
        return None if self.bodies is None else self.bodies.com

    @property
    def link_inertia(self) -> jax.Array | None:
        return None if self.bodies is None else self.bodies.inertia

    @property
    def guided(self) -> jax.Array:
        """Points with a prescribed acceleration (G,) (:attr:`point_kinds`)."""
        return self.point_kinds.guided

    @property
    def slider(self) -> jax.Array:
        """Points on a fixed line (G,) (:attr:`point_kinds`)."""
        return self.point_kinds.slider

    @property
    def s(self) -> jax.Array:
        """The sliders' unit normals (G, 2) (:attr:`point_kinds`, scaled to unit length: :attr:`PointKinds.lines`)."""
        return self.point_kinds.lines[0]

    @property
    def c(self) -> jax.Array:
        """The sliders' line offsets (G,): point i stays on {x : s_i·x = c_i} (:attr:`point_kinds`, with the unit
        normals of :attr:`s`)."""
        return self.point_kinds.lines[1]

    @property
    def slider_mask(self) -> jax.Array:
        """Points that move on a fixed line and are not guided."""
        return self.point_kinds.slider_mask

    @property
    def rod_on(self) -> jax.Array:
        """A chain's rods that are constraints (n-1,): a rod between two guided points is switched off, their
        prescribed accelerations win (seed §6.1)."""
        return ~(self.guided[:-1] & self.guided[1:])

    # -- points, mass and forces -----------------------------------------------------------------------------------
    def points(self, q: jax.Array) -> jax.Array:
        """All points (P, 2) for the flat coordinates q (2N,)."""
        return q.reshape(-1, 2) if self.W is None else (self.W @ q + self.offset).reshape(-1, 2)

    def point(self, name: str, q: jax.Array) -> jax.Array:
        return self.points(q)[self.point_names.index(name)]

    def point_velocities(self, qd: jax.Array) -> jax.Array:
        """The points' velocities (P, 2) (or accelerations) for the coordinates' qd (2N,): W qd."""
        return qd.reshape(-1, 2) if self.W is None else (self.W @ qd).reshape(-1, 2)

    def _to_coordinates(self, F):
        """W^T F: point forces (2P,) as generalized forces (2N,)."""
        return F if self.W is None else self.W.T @ F

    def _point_mass_matrix(self):
        """M_pts (2P, 2P): the point masses' and the bodies' blocks on the P points."""
        P, dtype = self.m.shape[0], self.m.dtype
        k = jnp.arange(P)
        Mp = jnp.zeros((P, P, 2, 2), dtype).at[k, k].add(self.m[:, None, None] * jnp.eye(2, dtype=dtype))
        b = self.bodies
        if b is not None:
            L = self.dist.L[: b.i.shape[0]] if b.L is None else b.L
            M11, M12, M22 = link_mass_blocks(b.mass, b.com, b.inertia, L)
            Mp = Mp.at[b.i, b.i].add(M11).at[b.i, b.j].add(M12).at[b.j, b.i].add(M12.swapaxes(-1, -2))
            Mp = Mp.at[b.j, b.j].add(M22)
        return Mp.transpose(0, 2, 1, 3).reshape(2 * P, 2 * P)

    @property
    def M(self) -> jax.Array:
        """The constant mass matrix (2N, 2N) in q: W^T M_pts W."""
        Mp = self._point_mass_matrix()
        return Mp if self.W is None else self.W.T @ Mp @ self.W

    @property
    def f_g(self) -> jax.Array:
        """The generalized gravity forces (2N,): W^T M_pts (0, -g, 0, -g, ...)."""
        down = jnp.zeros((self.m.shape[0], 2), self.dtype).at[:, 1].set(-self.g).reshape(-1)
        return self._to_coordinates(self._point_mass_matrix() @ down)

    @property
    def rows_on(self) -> jax.Array:
        """The mask of Phi's rows: the builder's ``on``; a chain's rods, on unless both ends are guided."""
        return self.rod_on if self.on is None else self.on

    def phi(self, q: jax.Array, t: ArrayLike) -> jax.Array:
        """Phi(q, t): the rows of ``dist``, ``coin``, ``line`` and the drivers (rows switched off are 0)."""
        return self.phi_points(self.points(q), t)

    def phi_points(self, P: jax.Array, t: ArrayLike) -> jax.Array:
        """Phi as a function of all the points P (P, 2) (:meth:`phi`)."""
        rows = [self.dist(P, t), self.coin(P, t), self.line(P, t)] + [d(P, t) for d in self.drivers]
        return jnp.concatenate([r.astype(P.dtype) for r in rows]) * self.rows_on

    def applied_forces(self, q: jax.Array, qd: jax.Array, t: ArrayLike, tau: ArrayLike | None = None,
                       F: ArrayLike | None = None) -> jax.Array:
        """Q(q, q_d, t): gravity + springs/dampers + motor torques tau (n_motors,) + rotational dampers + drag + point
        forces F (P, 2) + the force kinds' generalized forces (:attr:`forces`)."""
        n_m, P = self.motor_idx.shape[0], self.n_points
        if tau is not None and jnp.shape(tau) != (n_m,):
            raise ValueError(f"Model: tau must hold one torque per motor, shape (n_motors,) = ({n_m},) (motors in "
                             f"the order of creation), got shape {jnp.shape(tau)}")
        if F is not None and jnp.shape(F) != (P, 2):
            raise ValueError(f"Model: F must hold one force per point, shape (P, 2) = ({P}, 2) (points in the order "
                             f"of point_names), got shape {jnp.shape(F)}")
        Q = self.f_g
        si = self.spring_idx
        if si.shape[0]:
            def length(q_):
                p = self.points(q_)
                d = p[si[:, 1]] - p[si[:, 0]]
                return jnp.sqrt(jnp.sum(d * d, -1))
            ell, ell_dot = jax.jvp(length, (q,), (qd,))
            tension = self.spring_k * (ell - self.spring_L0) + self.spring_c * ell_dot
            Q = Q - jax.vjp(length, q)[1](tension)[0]
        if tau is not None and n_m:
            Q = Q + jax.grad(lambda q_: jnp.sum(jnp.asarray(tau) * self.motor_angles(q_)))(q)
        if self.damper_idx.shape[0]:
            def angles(q_):
                return relative_angles(self.points(q_), self.damper_idx)
            omega = jax.jvp(angles, (q,), (qd,))[1]
            Q = Q + jax.vjp(angles, q)[1](-self.damper_c * omega)[0]
        if self.k_v is not None or F is not None:
            F_P = jnp.zeros((P, 2), q.dtype) if F is None else jnp.asarray(F, q.dtype)
            if self.k_v is not None:
                v = self.point_velocities(qd)
                F_P = F_P - self.k_v[:, None] * v * _speed(v[:, 0], v[:, 1])[:, None]
            Q = Q + self._to_coordinates(F_P.reshape(-1))
        for f in self.forces:
            Q = Q + f.force(self, q, qd)
        return Q

    def motor_angles(self, q: jax.Array) -> jax.Array:
        """Relative angle of each motor: angle(k->l) - angle(i->j) (atan2 of the cross/dot pair, in (-pi, pi])."""
        return relative_angles(self.points(q), self.motor_idx)

    def limit_angles(self, q: jax.Array) -> jax.Array:
        """Relative angle of each angle stop (L,), as :meth:`motor_angles`, in (-pi, pi]."""
        return relative_angles(self.points(q), self.limit_idx)

    def energy(self, state: State) -> jax.Array:
        """Kinetic + gravitational + spring potential energy (conserved without dampers, drag, motors, drivers and
        guided motion) at ``state``, or along a trajectory (leading axes): (1/2) q_d^T M q_d - q·f_g plus
        (1/2) k (|p_j - p_i| - L0)^2 for every spring, plus the force kinds' potentials (:attr:`forces`). Gravity's
        potential is linear in q, so -q·f_g is g times the height of every mass (a chain's g sum_i m_i y_i plus its
        links' share)."""
        lead = state.x.shape[:-2]
        q, qd = state.x.reshape(lead + (-1,)), state.v.reshape(lead + (-1,))
        E = 0.5 * jnp.einsum("...i,ij,...j->...", qd, self.M, qd) - q @ self.f_g
        if self.spring_idx.shape[0]:
            P = jnp.vectorize(self.points, signature="(k)->(p,d)")(q)
            d = P[..., self.spring_idx[:, 1], :] - P[..., self.spring_idx[:, 0], :]
            E = E + 0.5 * jnp.sum(self.spring_k * (jnp.sqrt(jnp.sum(d * d, -1)) - self.spring_L0) ** 2, -1)
        for f in self.forces:
            E = E + jnp.vectorize(lambda q_, f=f: f.energy(self, q_), signature="(k)->()")(q)
        return E

    # -- what the entry points ask ---------------------------------------------------------------------------------
    def check_inputs(self, state: State | None, control: object, who: str, steps: bool = False) -> None:
        """TypeError / ValueError at trace time unless ``state`` (may be None) and ``control`` (a Control, with a
        leading time axis if ``steps``; anything else is a policy or None and skipped) fit the model."""
        (check_path_inputs if self.serial else check_general_inputs)(self, state, control, who, steps)

    def zero_control(self, dtype: DTypeLike) -> Control:
        """The control of no input (one step), every field an array (the event rollout caches it): zero torques (one
        per motor), point forces (one per point) and prescribed accelerations."""
        return Control(tau=jnp.zeros((self.motor_idx.shape[0],), dtype), F=jnp.zeros((self.n_points, 2), dtype))

    def length_scale(self) -> jax.Array:
        """A length of the model (its longest distance row; 1 without), for tolerances."""
        return jnp.max(self.dist.L, initial=1.0)

    def weight(self) -> jax.Array:
        """A force scale of the model (its weight), for round-off thresholds of forces."""
        if self.serial:
            return jnp.sum(self.m) * jnp.maximum(self.g, 1.0)  # (g >= 1: the mass scale without gravity)
        # f_g sums every point's gravity: its y components add up to -m g; without gravity, the mass scale
        return jnp.maximum(jnp.abs(jnp.sum(self.f_g[1::2])), jnp.trace(self.M) / 2)

    # -- features (class docstring) ----------------------------------------------------------------------------------
    @property
    def n_features(self) -> int:
        """F = max(P, L, 1): the points and the angle stops (a chain's joints), padded to a common length."""
        return max(self.n_points, self.limit_idx.shape[0], 1)

    def contact_points(self, x: jax.Array) -> jax.Array:
        """The contact features' positions (F, 2) at the coordinate points x (N, 2)."""
        return pad(self.points(x.reshape(-1)), self.n_features)

    def contact_rates(self, v: jax.Array) -> jax.Array:
        """The contact features' velocities (F, 2) (or their accelerations, for accelerations: the map is linear)."""
        return pad(self.point_velocities(v.reshape(-1)), self.n_features)

    def free_contacts(self, contact: jax.Array, stuck: jax.Array) -> jax.Array:
        """The contact features that may touch an obstacle now: marked in ``contact`` (F,), not guided, not
        ``stuck``."""
        return contact & ~pad(self.guided, self.n_features) & ~stuck

    def feature_angles(self, x: jax.Array, ref: jax.Array | None = None) -> jax.Array:
        """The limit features' angles (F,) in (-pi, pi], or on the branch within pi of ``ref`` (an angle's continuous
        value, carried from quantum to quantum)."""
        if self.serial:
            return wrapped_joint_angles(x, ref)
        theta = pad(self.limit_angles(x.reshape(-1)), self.n_features)
        return theta if ref is None else ref + wrap_angle(theta - ref)

    def angle_rates(self, x: jax.Array, v: jax.Array,
                    a: jax.Array | None = None) -> jax.Array | tuple[jax.Array, jax.Array]:
        """The limit features' angular velocities omega (F,) and, with ``a``, their angular accelerations alpha (F,):
        d theta / dt and d^2 theta / dt^2 along x(s) = x + s v + s^2 a / 2 at s = 0."""
        if self.serial:
            st = State(x, v)
            return joint_velocities(st) if a is None else (joint_velocities(st), joint_accelerations(st, a))

        def rate(q, qd):
            return jax.jvp(self.limit_angles, (q,), (qd,))[1]

        q, qd, F = x.reshape(-1), v.reshape(-1), self.n_features
        if a is None:
            return pad(rate(q, qd), F)
        omega, alpha = jax.jvp(rate, (q, qd), (qd, a.reshape(-1)))
        return pad(omega, F), pad(alpha, F)


def relative_angles(P, idx):
    """angle(P[k] -> P[l]) - angle(P[i] -> P[j]) for each index quadruple (i, j, k, l) of ``idx``; indices -2 and -1
    are the world frame's points (0, 0) and (1, 0)."""
    P = jnp.concatenate([P, jnp.asarray([[0.0, 0.0], [1.0, 0.0]], P.dtype)])
    u, v = P[idx[:, 1]] - P[idx[:, 0]], P[idx[:, 3]] - P[idx[:, 2]]
    return jnp.arctan2(u[:, 0] * v[:, 1] - u[:, 1] * v[:, 0], jnp.sum(u * v, -1))


def pad(y, F):
    """``y`` padded with zeros to F entries along its first axis (the features beyond a mechanism's points or stops)."""
    return jnp.concatenate([y, jnp.zeros((F - y.shape[0],) + y.shape[1:], y.dtype)])


@compiled
def energy(model: Model, state: State) -> jax.Array:
    """The total energy of ``model`` at ``state`` (a chain's or a mechanism's; a trajectory gives one per step):
    kinetic plus gravitational and spring potential energy, conserved without damping, drag, torques, drivers and
    guided motion."""
    return check_model(model, "energy").energy(state)


def check_model(model, who: str):
    """``model``, after a TypeError naming it unless it is a :class:`Model`."""
    if not isinstance(model, Model):
        raise TypeError(f"{who}: model must be a diffchain model (a Chain, pendulum(...), ..., or a mechanism from "
                        f"MechanismBuilder), got {describe(model)}")
    return model
