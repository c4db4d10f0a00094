"""The :class:`MechanismBuilder`: a :class:`~diffchain.Model` of any structure drawn by points, bodies, joints,
drivers, springs, motors and angle stops (seed 003 natural coordinates)."""
from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
from jax.typing import ArrayLike, DTypeLike

from .._kinds.torsion import TorsionalSprings
from .._state import State
from .chain import G
from .host import array
from .model import Bodies, Model
from .._constraints.kinds import _R, Coincide, Distance, Driver, OnLine, PointKinds, Polynomial


def _finite_float(value, name):
    if np.ndim(value) != 0:
        raise ValueError(f"{name} must be a finite number, got shape {np.shape(value)}")
    value = float(value)
    if not np.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value}")
    return value


def _finite_pair(value, name):
    arr = np.asarray(value, float)
    if arr.shape != (2,) or not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be two finite numbers, got {value!r}")
    return arr


class MechanismBuilder:
    """Build a mechanism (a :class:`Model`) the way an engineer draws it: points, bodies,
    joints, drivers, springs, motors.

        mb = MechanismBuilder()
        O, A = mb.ground("O", (0, 0)), mb.ground("A", (4, 0))
        B, C = mb.point("B", (0, 1)), mb.point("C", (4, 3))
        mb.body("crank", O, B, mass=1.0, inertia=0.1)      # rigid body between two points (revolute = shared point)
        mb.body("coupler", B, C, mass=2.0)
        mb.body("rocker", A, C, mass=1.0)
        mech, state = mb.build()

    Points are referred to by name. The initial positions given here define body lengths and attachment offsets and
    are the assembly guess. Joints with ``revolute``/``pin``/``slider``/``prismatic`` are constraints whose multipliers
    are reported as joint reactions (a shared point is a revolute joint without a reported reaction).
    """

    def __init__(self, g: float = G) -> None:
        self.g = _finite_float(g, "MechanismBuilder: g")
        self.names, self.pos, self.kind = [], [], []      # kind: ("coord", k) | ("ground",) | ("attach", p0, p1, al, be)
        self.mass = []                                    # point masses
        self.bodies = []                                  # (name, p0, p1, mass, com, inertia)
        self.dist, self.coin, self.line, self.drivers = [], [], [], []
        self.joint_names = []                             # (name, group, index in group)
        self.springs, self.motors, self.motor_names = [], [], []
        self.limits, self.limit_names = [], []            # (i, j, k, l, lo, hi)
        self.dampers, self.k_v = [], {}                   # (i, j, k, l, c); {point index: drag coefficient}
        self.torsion = []                                 # (i, j, k, l, k, theta0, c)
        self._nc = 0

    # ---- points ---------------------------------------------------------------------------------------------
    def _new(self, name, xy, kind, mass=0.0):
        if name in self.names:
            raise ValueError(f"MechanismBuilder: point name {name!r} is used twice")
        xy = np.asarray(xy, float)
        if xy.shape != (2,) or not np.all(np.isfinite(xy)):
            raise ValueError(f"MechanismBuilder: point {name!r} needs a finite (x, y), got {xy}")
        if not (np.isfinite(mass) and mass >= 0):
            raise ValueError(f"MechanismBuilder: point {name!r} mass must be finite and >= 0, got {mass}")
        self.names.append(name), self.pos.append(xy), self.kind.append(kind), self.mass.append(float(mass))
        return name

    def _idx(self, name):
        if name not in self.names:
            raise ValueError(f"MechanismBuilder: unknown point {name!r} (known: {self.names})")
        return self.names.index(name)

    def ground(self, name: str, xy: npt.ArrayLike) -> str:
        """A fixed point of the frame."""
        return self._new(name, xy, ("ground",))

    def point(self, name: str, xy: npt.ArrayLike, mass: float = 0.0) -> str:
        """A moving point (two coordinates), optionally with a lumped mass."""
        self._nc += 1
        return self._new(name, xy, ("coord", self._nc - 1), mass)

    def body(self, name: str, p0: str, p1: str, mass: float = 0.0, com: Sequence[float] | None = None,
             inertia: float = 0.0, length: float | None = None, rigid: bool = True) -> str:
        """A rigid body with base points p0, p1: distance constraint |p1 - p0| = L (``length``, default as drawn: the
        drawn positions are then only the assembly guess) and the constant mass
        block of a body of ``mass``, centre of mass ``com`` = (a, b) in body coordinates (default: midpoint) and moment
        of inertia ``inertia`` about the centre of mass."""
        i, j = self._idx(p0), self._idx(p1)
        who = f"MechanismBuilder: body {name!r}"
        L = float(np.linalg.norm(self.pos[j] - self.pos[i])) if length is None else _finite_float(length, who + " length")
        if not L > 1e-12:
            raise ValueError(f"MechanismBuilder: body {name!r} has coincident base points {p0!r}, {p1!r} "
                             f"or a non-positive length {length}")
        mass, inertia = _finite_float(mass, who + " mass"), _finite_float(inertia, who + " inertia")
        if not (mass >= 0 and inertia >= 0):
            raise ValueError(f"MechanismBuilder: body {name!r} needs mass >= 0 and inertia >= 0, got mass {mass}, "
                             f"inertia {inertia}")
        com = (L / 2, 0.0) if com is None else tuple(_finite_pair(com, who + " com (a, b)"))
        self.bodies.append((name, i, j, float(mass), com, float(inertia), L))
        if rigid and not (self.kind[i][0] == "ground" and self.kind[j][0] == "ground"):
            self.dist.append((i, j, L))
            self.joint_names.append((name, "dist", len(self.dist) - 1))
        return name

    def rod(self, name: str, p0: str, p1: str, length: float | None = None) -> str:
        """A massless rigid rod (a distance constraint; its multiplier is the rod tension, a two-force member)."""
        return self.body(name, p0, p1, mass=0.0, length=length)

    def attach(self, name: str, body: str, local: Sequence[float]) -> str:
        """A point fixed in ``body`` at local (a, b): a along base point 0 -> 1, b to the left. No new coordinates."""
        b = [bb for bb in self.bodies if bb[0] == body]
        if not b:
            raise ValueError(f"MechanismBuilder: unknown body {body!r}")
        _, i, j, _, _, _, L = b[0]
        local = _finite_pair(local, f"MechanismBuilder: attach {name!r} local (a, b)")
        al, be = local[0] / L, local[1] / L
        p0, p1 = self.pos[i], self.pos[j]
        xy = (1 - al) * p0 - be * _R @ p0 + al * p1 + be * _R @ p1
        return self._new(name, xy, ("attach", i, j, al, be))

    # ---- joints -----------------------------------------------------------------------------------------------
    def revolute(self, name: str, p: str, q: str) -> str:
        """Revolute joint: points p and q coincide (2 rows; lambda = force on p)."""
        self.coin.append((self._idx(p), self._idx(q)))
        self.joint_names.append((name, "coin", len(self.coin) - 1))
        return name

    def pin(self, name: str, p: str, xy: npt.ArrayLike | None = None) -> str:
        """Ground pin: point p held at the fixed point xy (default: where p is drawn)."""
        g = self.ground(name + "@ground", self.pos[self._idx(p)] if xy is None else xy)
        return self.revolute(name, p, g)

    def slider(self, name: str, p: str, a: str, b: str) -> str:
        """Point p slides on the line through points a, b (1 row; lambda = normal force)."""
        i, ia, ib = self._idx(p), self._idx(a), self._idx(b)
        L = float(np.linalg.norm(self.pos[ib] - self.pos[ia]))
        if L <= 1e-12:
            raise ValueError(f"MechanismBuilder: slider {name!r} line points {a!r}, {b!r} coincide")
        self.line.append((i, ia, ib, L))
        self.joint_names.append((name, "line", len(self.line) - 1))
        return name

    def prismatic(self, name: str, body_a: str, body_b: str) -> str:
        """Prismatic joint: both base points of body_b on the line of body_a's base points (2 rows)."""
        ba = [bb for bb in self.bodies if bb[0] == body_a]
        bb_ = [bb for bb in self.bodies if bb[0] == body_b]
        if not ba or not bb_:
            raise ValueError(f"MechanismBuilder: prismatic {name!r}: unknown body {body_a!r} or {body_b!r}")
        a0, a1 = self.names[ba[0][1]], self.names[ba[0][2]]
        self.slider(name + ".0", self.names[bb_[0][1]], a0, a1)
        self.slider(name + ".1", self.names[bb_[0][2]], a0, a1)
        return name

    def drive(self, name: str, kind: str, points: Sequence[str], f: Callable[[jax.Array], ArrayLike] | float) -> str:
        """A driving constraint with f(t): kind in {"distance", "angle", "relangle", "x", "y"} (see :class:`Driver`);
        ``f`` a function of time, or a number (a constant). A model file (:func:`diffchain.save`) holds drivers whose
        ``f`` is a :class:`diffchain.Polynomial` (or a constant); other Python functions cannot be saved."""
        if kind not in ("distance", "angle", "relangle", "x", "y"):
            raise ValueError(f"MechanismBuilder: driver {name!r}: unknown kind {kind!r}")
        need = {"distance": 2, "angle": 2, "relangle": 4, "x": 1, "y": 1}[kind]
        if len(points) != need:
            raise ValueError(f"MechanismBuilder: driver {name!r} of kind {kind!r} needs {need} points, got {points}")
        idx = tuple(self._idx(p) for p in points)
        pos = [self.pos[k] for k in idx]
        scale = 1.0
        if kind == "angle":
            scale = float(np.linalg.norm(pos[1] - pos[0]))
        if kind == "relangle":
            scale = float(np.linalg.norm(pos[1] - pos[0]) * np.linalg.norm(pos[3] - pos[2]))
        if not callable(f):
            f = Polynomial((_finite_float(f, f"MechanismBuilder: driver {name!r} f"),))
        self.drivers.append(Driver(kind, idx, f, scale))
        self.joint_names.append((name, "drv", len(self.drivers) - 1))
        return name

    def spring(self, name: str, p: str, q: str, k: float = 0.0, L0: float | None = None, c: float = 0.0) -> str:
        """Linear spring (stiffness k, free length L0, default as drawn) and damper c between points p and q."""
        i, j = self._idx(p), self._idx(q)
        who = f"MechanismBuilder: spring {name!r}"
        L0 = float(np.linalg.norm(self.pos[j] - self.pos[i])) if L0 is None else _finite_float(L0, who + " L0")
        if L0 < 0:
            raise ValueError(f"{who} L0 must be >= 0 (a free length), got {L0}")
        self.springs.append((i, j, _finite_float(k, who + " k"), L0, _finite_float(c, who + " c")))
        return name

    def _ends(self, name, bname):
        """The base points' indices of body ``bname``; "ground" is the frame's x axis (two ground points)."""
        if bname == "ground":
            ends = [f"{name}@g0", f"{name}@g1"]
            for e, xy in zip(ends, ((0.0, 0.0), (1.0, 0.0))):
                if e not in self.names:
                    self.ground(e, xy)
            return self._idx(ends[0]), self._idx(ends[1])
        b = [bb for bb in self.bodies if bb[0] == bname]
        if not b:
            raise ValueError(f"MechanismBuilder: {name!r}: unknown body {bname!r}")
        return b[0][1], b[0][2]

    def motor(self, name: str, body_a: str, body_b: str) -> str:
        """A torque tau acting on body_b and reacting on body_a (body_a may be "ground"); positive counter-clockwise.
        Each motor takes one entry of the ``tau`` vector, in the order of creation."""
        self.motors.append(self._ends(name, body_a) + self._ends(name, body_b))
        self.motor_names.append(name)
        return name

    def damper(self, name: str, body_a: str, body_b: str, c: float) -> str:
        """A rotational viscous damper: the torque -c (omega_b - omega_a) on body_b, reacting on body_a (body_a may be
        "ground"), omega the bodies' angular velocities (joint friction; a chain's ``k_omega``)."""
        c = _finite_float(c, f"MechanismBuilder: damper {name!r} c")
        if c < 0:
            raise ValueError(f"MechanismBuilder: damper {name!r} needs c >= 0, got {c}")
        self.dampers.append(self._ends(name, body_a) + self._ends(name, body_b) + (c,))
        return name

    def torsional_spring(self, name: str, body_a: str, body_b: str, k: float, theta0: float | None = None,
                         c: float = 0.0) -> str:
        """A torsional spring: the torque -k wrap(theta - theta0) - c omega on body_b, reacting on body_a (body_a may be
        "ground"), theta the relative angle of body_b against body_a (as a motor's, in (-pi, pi]), omega its rate;
        ``k`` in N m/rad, ``theta0`` the rest angle (default: as drawn), ``c`` a rotational damping
        (:class:`~diffchain._kinds.torsion.TorsionalSprings`)."""
        who = f"MechanismBuilder: torsional spring {name!r}"
        k, c = _finite_float(k, who + " k"), _finite_float(c, who + " c")
        if not (k >= 0 and c >= 0):
            raise ValueError(f"{who} needs k >= 0 and c >= 0, got k = {k}, c = {c}")
        idx = self._ends(name, body_a) + self._ends(name, body_b)
        if theta0 is None:
            u, v = self.pos[idx[1]] - self.pos[idx[0]], self.pos[idx[3]] - self.pos[idx[2]]
            theta0 = float(np.arctan2(u[0] * v[1] - u[1] * v[0], u @ v))
        self.torsion.append(idx + (k, _finite_float(theta0, who + " theta0"), c))
        return name

    def flexible_link(self, name: str, p0: str, p1: str, n_segments: int, E: float, I: float, rho_A: float,
                      damping: float = 0.0) -> list[str]:
        """A flexible link from point ``p0`` to point ``p1`` (both existing, as drawn: a straight uniform beam), as
        rigid finite elements (seed 004 §1.7): ``n_segments``
        torsional springs k = E I / h (h = |p1 - p0| / n_segments, ``E`` in Pa, ``I`` in m^4), with rotational
        dampers c = ``damping`` I / h (``damping``: the material's Kelvin–Voigt viscosity in Pa s), at the middles of
        n_segments equal segments; between them n_segments + 1 rigid uniform bars of mass ``rho_A`` (kg/m) times their
        length, the two at the ends half as long as the others.

        The springs' points are new moving points "{name}.1" .. "{name}.{n}" along p0 -> p1; the bars are bodies
        "{name}[0]" (p0 to "{name}.1") .. "{name}[{n}]" ("{name}.{n}" to p1), the springs
        :meth:`torsional_spring` "{name}.k1" .. (between consecutive bars, at rest as drawn). Joints at p0 and p1
        are the points' (shared with other bodies: revolute). A clamped end is its end bar held at its angle: a
        driver ``drive("clamp", "angle", [p0, "{name}.1"], angle)`` where p0 is a ground point, or
        ``drive("weld", "relangle", [a0, a1, p0, "{name}.1"], angle)`` against the body a0 -> a1. Returns the bars'
        body names, from p0 to p1."""
        from .flexible import check_rfe, rfe_elements

        who = f"MechanismBuilder: flexible link {name!r}"
        n = check_rfe(who, n_segments, E=_finite_float(E, who + " E"), I=_finite_float(I, who + " I"),
                      rho_A=_finite_float(rho_A, who + " rho_A"), damping=_finite_float(damping, who + " damping"))
        i, j = self._idx(p0), self._idx(p1)
        a, b = self.pos[i], self.pos[j]
        L = float(np.linalg.norm(b - a))
        if not L > 1e-12:
            raise ValueError(f"{who}: its end points {p0!r} and {p1!r} coincide")
        lengths, mass, inertia, k, c = rfe_elements(n, L, float(E), float(I), float(rho_A), float(damping))
        ends = [p0] + [self.point(f"{name}.{s}", a + (s - 0.5) / n * (b - a)) for s in range(1, n + 1)] + [p1]
        bars = [self.body(f"{name}[{e}]", ends[e], ends[e + 1], mass=mass[e], inertia=inertia[e], length=lengths[e])
                for e in range(n + 1)]
        for s in range(1, n + 1):
            self.torsional_spring(f"{name}.k{s}", bars[s - 1], bars[s], k, theta0=0.0, c=c)
        return bars

    def drag(self, p: str, k: float) -> str:
        """Quadratic air drag on point p: the force -k v |v| (a chain's ``k_v``)."""
        i, k = self._idx(p), _finite_float(k, f"MechanismBuilder: drag on {p!r} k")
        if k < 0:
            raise ValueError(f"MechanismBuilder: drag on {p!r} needs k >= 0, got {k}")
        self.k_v[i] = k
        return p

    def limit(self, name: str, body_a: str, body_b: str, lo: float | None = None, hi: float | None = None) -> str:
        """An angle stop: the relative angle of body_b against body_a (as a motor's, in (-pi, pi]; body_a may be
        "ground") stays in [lo, hi] (None: no stop on that side). The event rollout
        (:func:`diffchain.event_rollout`) stops it there inelastically and holds it while the stop pushes (seed 000
        §12.1); other simulations ignore it."""
        lo = -np.inf if lo is None else _finite_float(lo, f"MechanismBuilder: limit {name!r} lo")
        hi = np.inf if hi is None else _finite_float(hi, f"MechanismBuilder: limit {name!r} hi")
        within = all(-np.pi <= v <= np.pi for v in (lo, hi) if np.isfinite(v))
        if not (lo < hi and within) or (np.isinf(lo) and np.isinf(hi)):
            raise ValueError(f"MechanismBuilder: limit {name!r} needs -pi <= lo < hi <= pi (one may be None), got "
                             f"lo = {lo}, hi = {hi}")
        self.limits.append(self._ends(name, body_a) + self._ends(name, body_b) + (lo, hi))
        self.limit_names.append(name)
        return name

    # ---- assembly of the model --------------------------------------------------------------------------------
    def _affine(self):
        P, N = len(self.names), self._nc
        W, c = np.zeros((P, 2, 2 * N)), np.zeros((P, 2))
        for k, kind in enumerate(self.kind):   # attachments refer to earlier points only
            if kind[0] == "coord":
                W[k, :, 2 * kind[1]: 2 * kind[1] + 2] = np.eye(2)
            elif kind[0] == "ground":
                c[k] = self.pos[k]
            else:
                _, i, j, al, be = kind
                A0, A1 = (1 - al) * np.eye(2) - be * _R, al * np.eye(2) + be * _R
                W[k] = A0 @ W[i] + A1 @ W[j]
                c[k] = A0 @ c[i] + A1 @ c[j]
        return W.reshape(2 * P, 2 * N), c.reshape(-1)

    def build(self, dtype: DTypeLike = jnp.float64) -> tuple[Model, State]:
        """(the mechanism, a :class:`Model`; its State at the drawn positions, at rest). Raises ValueError for
        inconsistent input."""
        if self._nc == 0:
            raise ValueError("MechanismBuilder: the mechanism has no moving point")
        W, c = self._affine()
        ia = lambda rows, k: np.asarray([r[k] for r in rows], int)  # noqa: E731
        fa = lambda rows, k: np.asarray([r[k] for r in rows], float)  # noqa: E731
        dist = Distance(array(ia(self.dist, 0)), array(ia(self.dist, 1)), array(fa(self.dist, 2), dtype))
        coin = Coincide(array(ia(self.coin, 0)), array(ia(self.coin, 1)))
        line = OnLine(*(array(ia(self.line, k)) for k in range(3)), array(fa(self.line, 3), dtype))
        sizes = {"dist": 1, "coin": 2, "line": 1, "drv": 1}
        first = {"dist": 0, "coin": len(self.dist), "line": len(self.dist) + 2 * len(self.coin),
                 "drv": len(self.dist) + 2 * len(self.coin) + len(self.line)}
        joint_rows, row_names = [], []
        for (name, grp, k) in self.joint_names:
            joint_rows.append((name, (first[grp] + sizes[grp] * k, sizes[grp])))
        joint_rows.sort(key=lambda r: r[1][0])
        for name, (r0, nr) in joint_rows:
            row_names += [name] if nr == 1 else [f"{name}.x", f"{name}.y"]
        n_rows = len(row_names)
        sp = self.springs
        bd = self.bodies
        bodies = Bodies(array(ia(bd, 1)), array(ia(bd, 2)), array(fa(bd, 3), dtype),
                        array(np.asarray([b[4] for b in bd], float).reshape(-1, 2), dtype),
                        array(fa(bd, 5), dtype), array(fa(bd, 6), dtype))
        P, f = len(self.names), lambda v: array(v, dtype)  # noqa: E731
        ts = self.torsion
        forces = (TorsionalSprings(array(np.asarray([t[:4] for t in ts], int).reshape(-1, 4)), f(fa(ts, 4)),
                                   f(fa(ts, 5)), f(fa(ts, 6))),) if ts else ()
        mech = Model(
            W=f(W), offset=f(c), m=f(self.mass), bodies=bodies, g=f(self.g), dist=dist, coin=coin, line=line,
            drivers=tuple(self.drivers), on=array(np.ones((n_rows,), bool)),
            point_kinds=PointKinds(*(array(np.zeros((0,), bool)),) * 2, f(np.zeros((0, 2))), f(np.zeros((0,)))),
            spring_idx=array(np.asarray([s[:2] for s in sp], int).reshape(-1, 2)),
            spring_k=f(fa(sp, 2)), spring_L0=f(fa(sp, 3)), spring_c=f(fa(sp, 4)),
            motor_idx=array(np.asarray(self.motors, int).reshape(-1, 4)),
            damper_idx=array(np.asarray([d[:4] for d in self.dampers], int).reshape(-1, 4)),
            damper_c=f(fa(self.dampers, 4)), k_v=f([self.k_v.get(k, 0.0) for k in range(P)]) if self.k_v else None,
            limit_idx=array(np.asarray([lim[:4] for lim in self.limits], int).reshape(-1, 4)),
            limit_lo=f(fa(self.limits, 4)), limit_hi=f(fa(self.limits, 5)),
            point_names=tuple(self.names), row_names=tuple(row_names), joint_rows=tuple(joint_rows),
            limit_names=tuple(self.limit_names), forces=forces)
        x0 = np.zeros((self._nc, 2))
        for k, kind in enumerate(self.kind):
            if kind[0] == "coord":
                x0[kind[1]] = self.pos[k]
        state = State(array(x0, dtype))  # (at rest, t = 0)
        M, J = (np.asarray(v, float) for v in _mass_and_jacobian(mech, state))
        ev = np.linalg.eigvalsh(M)
        if ev[0] <= 1e-12 * max(ev[-1], 1e-300):
            massless = [self.names[k] for k, kd in enumerate(self.kind) if kd[0] == "coord"
                        and np.allclose(M[2 * kd[1]:2 * kd[1] + 2], 0)]
            raise ValueError("MechanismBuilder: the mass matrix is singular: every moving point needs mass "
                             f"(a point mass or a body with mass and inertia); massless points: {massless}")
        rank = int(np.linalg.matrix_rank(J, tol=1e-9 * max(1.0, np.abs(J).max())))
        return dataclasses.replace(mech, nominal_rank=rank), state

    def coordinates(self) -> list[str]:
        """Names of the coordinate points, in the order of q."""
        return [n for n, k in zip(self.names, self.kind) if k[0] == "coord"]


@eqx.filter_jit
def _mass_and_jacobian(mech: Model, state: State):
    """M and Phi_q at ``state``: the builder's checks, one compiled program instead of many single operations."""
    return mech.M, jax.jacfwd(mech.phi)(state.x.reshape(-1), state.t)
