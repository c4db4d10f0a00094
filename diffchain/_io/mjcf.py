"""Export a :class:`~diffchain.Model` to MuJoCo's MJCF (:func:`to_mjcf`): a kinematic tree of planar bodies, its
closed loops cut at a joint and closed by ``<equality><connect>``.

The plane: diffchain's (x, y) is MuJoCo's (x, z) (y_MuJoCo = 0), gravity g along -y is MuJoCo's (0, 0, -g); every
hinge turns about the axis (0, -1, 0), so that a positive angle is counter-clockwise as in diffchain and a joint torque
has diffchain's sign. Every MuJoCo body's frame is parallel to the world's in the reference configuration (qpos = 0).

The rigid parts are the model's distance rows (a chain's rods, a mechanism's bodies), each with the points fixed to it;
points that coincide (a shared point, a revolute joint, a pin) are one joint location. A spanning tree grows from the
world (the ground points, a chain's guided points): a part hangs from the part that reached a location first, by a
hinge there; a part that meets a location already taken closes a loop there, a ``connect`` of two sites (MuJoCo's
soft equality, as stiff as MuJoCo allows by default). A part not reached from the world is a root: slides along x
and z and a hinge (a free chain), or a slide along its line and a hinge (a chain's first point on a rail).

Mass: each part carries its bodies' mass (centre of mass, inertia about it) and the point masses at the locations it
owns, combined into one ``inertial`` by the parallel-axis theorem, exact. MuJoCo refuses a moving body whose mass or
inertia is below 1e-15 (a rod that only carries point masses has no inertia about its centre of mass): those get a
floor, 1e-15 of the model's mass (of its mass times its size squared), at least 2e-15 kg (kg m^2): accelerations
change by about 1e-15 relative for a model of about 1 kg m^2, more for a much smaller one. Rotations about the other
two axes never happen, so their inertia (set equal) has no effect.
"""
from __future__ import annotations

import os
from typing import Sequence
from xml.sax.saxutils import quoteattr

import numpy as np

from .._model.model import Model, check_model
from .._state import State

INTEGRATORS = ("Euler", "RK4", "implicit", "implicitfast")
STIFFEST = (0.9999, 0.9999, 0.001, 0.5, 2.0)   # solimp with MuJoCo's largest impedance (mjMAXIMP = 0.9999)
FLOOR = 1e-15             # relative floor of a body's mass and inertia (module docstring); MuJoCo's absolute: 1e-15


def to_mjcf(model: Model, state: State | None = None, *, path: str | os.PathLike[str] | None = None,
            timestep: float = 1e-3, integrator: str = "Euler", solimp: Sequence[float] | None = None,
            name: str = "diffchain") -> str:
    """The MJCF XML (a string) of ``model``, a chain or a mechanism, for MuJoCo; written to ``path`` too if given.

    ``state`` (a :class:`~diffchain.State`): where the model is. A mechanism needs it (its geometry, its loops'
    sites); a chain takes from it its guided points' positions (default for a chain without it: point 1 at the
    origin). The state becomes the keyframe "state" (``mujoco.mj_resetDataKeyframe(m, d, 0)``).

    Coordinates (``qpos``): a chain's reference configuration is the stretched chain along +x, so its hinges' qpos are
    its joint angles theta_1..theta_{n-1} (:func:`diffchain.joint_angles`) (a chain with guided points beyond point
    1 has a mechanism's); a free chain's first two qpos are point 1's (x, y), a chain on a rail's first is point 1's
    position along the rail (direction (-s_y, s_x), from the point c s of the line). A mechanism's reference
    configuration is ``state``: its hinges' qpos are the joint angles' changes from it. ``ctrl`` holds one entry per
    motor in the model's order (a chain's ``Control.tau``): a motor across a hinge is a joint motor, one between
    parts that no hinge joins (a chain's last joint, on link n-1 against the world) a torque on a site.

    Exported exactly: point masses, rigid bodies (mass, centre of mass, inertia), gravity, motors, rotational dampers
    and torsional springs (across a hinge: the joint's ``damping``, ``stiffness``, ``springref``; between bodies
    that no hinge joins, a loop's cut joint or a chain's last: a fixed tendon of the hinges between them, whose
    length is their relative angle; MuJoCo's spring is linear in the angle, diffchain's in the angle wrapped to
    (-pi, pi], the same while the angle stays within pi of its rest angle), linear springs and dampers between
    points (spatial tendons). Guided points are fixed at their position in ``state`` (a^w = 0). Loops are closed by
    MuJoCo's soft ``connect``: ``solimp`` (five numbers; default (0.9999, 0.9999, 0.001, 0.5, 2), the stiffest
    MuJoCo allows) sets how closely MuJoCo's accelerations follow the exact constraint's: the relative error is
    about 1 - d at impedance d (a few 1e-5 on the four-bar at 0.9999).

    Points on a fixed line (a chain's first point on a rail, a mechanism's slider on a line through two ground points)
    are a root's slide joint along the line, with a hinge for the bodies on the point.

    Refused, with a ValueError naming the kind (MuJoCo has no exact equivalent): air drag, drivers, points on a line
    other than these (a chain's other points, a line on a moving body, a prismatic joint), angle stops, bodies
    without their distance row (``rigid=False``) and force kinds other than torsional springs. A kind whose
    coefficients are all zero acts on nothing and is left out.

    ``timestep``, ``integrator`` ("Euler", "RK4", "implicit", "implicitfast"): MuJoCo's ``<option>``. Contacts are
    disabled (``<flag contact="disable"/>``, and no geom collides). Needs concrete arrays (call it outside ``jit``).
    """
    check_model(model, "to_mjcf")
    if integrator not in INTEGRATORS:
        raise ValueError(f"to_mjcf: integrator must be one of {INTEGRATORS}, got {integrator!r}")
    timestep = float(timestep)
    if not (np.isfinite(timestep) and timestep > 0):
        raise ValueError(f"to_mjcf: timestep must be a positive number of seconds, got {timestep}")
    solimp = STIFFEST if solimp is None else tuple(float(v) for v in solimp)
    if len(solimp) != 5:
        raise ValueError(f"to_mjcf: solimp must be MuJoCo's five numbers (dmin, dmax, width, midpoint, power), got "
                         f"{solimp}")
    if state is not None and not isinstance(state, State):
        raise TypeError(f"to_mjcf: state must be a diffchain State (or None for a chain), got {type(state).__name__}")
    if not isinstance(name, str):
        raise TypeError(f"to_mjcf: name must be a string (the MJCF model's name), got {type(name).__name__}")
    tree = _Tree(model, state)
    xml = tree.xml(name, timestep, integrator, solimp)
    if path is not None:
        with open(path, "w") as f:
            f.write(xml)
    return xml


def _np(value, what):
    try:
        return np.asarray(value)
    except Exception:  # a tracer
        raise TypeError(f"to_mjcf: {what} must be concrete arrays (call to_mjcf outside jit/vmap), got a traced "
                        f"value") from None


def _refuse(kind, why):
    raise ValueError(f"to_mjcf: the model has {kind}, which MuJoCo cannot express exactly ({why}); build the model "
                     "without it to export it")


def _angle(d):
    return np.arctan2(d[..., 1], d[..., 0])


def _wrap(a):
    return np.arctan2(np.sin(a), np.cos(a))


def _f(v):
    return repr(float(v))


def _xz(p):
    return f"{_f(p[0])} 0 {_f(p[1])}"


class _Tree:
    """The model's parts, joint locations and spanning tree (module docstring), then its XML."""

    def __init__(self, model, state):
        self.model = model
        self._refuse_kinds(model)
        m = _np(model.m, "the model's masses").astype(float)
        self.P = P = m.shape[0]
        self.g = float(_np(model.g, "g"))
        serial = model.serial
        if state is None and not serial:
            raise ValueError("to_mjcf: a mechanism needs its state (the positions that fix its geometry): "
                             "to_mjcf(model, state), e.g. the state MechanismBuilder.build returns")
        if state is not None:
            x, v = _np(state.x, "state.x").astype(float), _np(state.v, "state.v").astype(float)
            if x.shape != (model.n, 2):
                raise ValueError(f"to_mjcf: state.x must have shape (N, 2) = ({model.n}, 2), one position per "
                                 f"coordinate point, got {x.shape}")
        else:
            x, v = np.zeros((model.n, 2)), np.zeros((model.n, 2))
        if serial:
            key, vel = x, v
        else:
            key = np.asarray(model.points(x.reshape(-1)), float)
            vel = np.asarray(model.point_velocities(v.reshape(-1)), float)
        self.mass = list(m)
        # points: 'world' (ground) or 'coord'/'attached'; extra world points pin a chain's guided points
        world = np.zeros(P, bool)
        if not serial:
            W = _np(model.W, "W")
            world = np.all(W.reshape(P, -1) == 0, -1)
        parent = list(range(P))

        def find(a):
            while parent[a] != a:
                parent[a] = parent[parent[a]]
                a = parent[a]
            return a

        def union(a, b):
            parent[find(a)] = find(b)

        key, vel, world = list(key), list(vel), list(world)
        self.slider_line = {}
        rods_on = np.ones(_np(model.dist.i, "dist").shape[0], bool)
        if serial:
            rods_on = _np(model.rod_on, "the rods' mask")
            guided, slider = _np(model.guided, "guided"), _np(model.slider_mask, "slider")
            s, c = (_np(a, "the sliders' lines").astype(float) for a in (model.s, model.c))
            if guided[1:].any() and state is None:
                raise ValueError("to_mjcf: a chain with guided points beyond point 1 needs its state (their "
                                 "positions): to_mjcf(model, state)")
            for k in np.flatnonzero(guided):
                key.append(key[k]), vel.append(np.zeros(2)), world.append(True), self.mass.append(0.0)
                parent.append(len(parent))
                union(k, len(parent) - 1)
            for k in np.flatnonzero(slider):
                self.slider_line[int(k)] = (s[k], c[k])
        else:
            ci, cj = _np(model.coin.i, "coin"), _np(model.coin.j, "coin")
            for a, b in zip(ci, cj):
                union(int(a), int(b))
            for i, a, b in zip(*(_np(r, "line") for r in (model.line.i, model.line.a, model.line.b))):
                name = model.point_names[i]
                if not (world[a] and world[b]):
                    _refuse(f"a slider of point {name!r} on a moving line", "a point on a line is exported only as "
                            "a root's slide joint along a fixed line")
                if i in self.slider_line or world[i]:
                    _refuse(f"a second slider row on point {name!r} (a prismatic joint)", "a point on a line is "
                            "exported only as a root's slide joint, one per point")
                t = (key[b] - key[a]) / np.linalg.norm(key[b] - key[a])
                s_ = np.array([t[1], -t[0]])   # (the slide's axis (-s_y, s_x) is t)
                self.slider_line[int(i)] = (s_, float(s_ @ key[a]))
        self.key, self.vel, self.world = np.array(key), np.array(vel), np.array(world)
        # reference configuration: a chain stretched along +x from its first point, a mechanism as in its state
        ref = self.key.copy()
        if serial and not guided[1:].any():   # (pins beyond point 1: the state, as a mechanism's)
            l = _np(model.l, "l").astype(float)
            o = np.zeros(2)
            if guided[0]:
                o = self.key[0]
            elif 0 in self.slider_line:
                o = self.slider_line[0][0] * self.slider_line[0][1]
            ref[:model.n] = o + np.stack([np.concatenate([[0.0], np.cumsum(l)]), np.zeros(model.n)], -1)
        self.ref = ref
        if state is None:   # (a chain without a state: its keyframe is the reference configuration, at rest)
            self.key, self.vel = ref.copy(), np.zeros_like(ref)
        # parts: the distance rows (switched on), then the points fixed to them
        di, dj = _np(model.dist.i, "dist"), _np(model.dist.j, "dist")
        self.parts = [dict(base=(int(i), int(j)), pts={int(i), int(j)}) for i, j, on in zip(di, dj, rods_on) if on
                      and not (self.world[i] and self.world[j])]
        if not serial:
            self._attached(model, W, _np(model.offset, "offset"))
        self.loc = [find(p) for p in range(len(self.key))]
        self._grow()
        self._inertials(model)

    # -- what MuJoCo cannot express ---------------------------------------------------------------------------------
    def _refuse_kinds(self, model):
        from .._kinds.torsion import TorsionalSprings

        if model.k_v is not None and np.any(_np(model.k_v, "k_v") != 0):
            _refuse("air drag (k_v)", "its force -k_v v |v| on a point has no MuJoCo element")
        if model.drivers:
            _refuse("drivers", f"{[d.kind for d in model.drivers]}: prescribed motion f(t) is not an MJCF element")
        if _np(model.limit_idx, "limit_idx").shape[0]:
            _refuse("angle stops (limits)", "MuJoCo's joint limits are soft constraints, not the inelastic stop of "
                    "the event rollout")
        for f in model.forces:
            if not isinstance(f, TorsionalSprings):
                _refuse(f"the force kind {type(f).__name__}", "only TorsionalSprings has a MuJoCo equivalent")
        if model.serial:
            slider = _np(model.slider_mask, "slider")
            if slider[1:].any():
                _refuse(f"sliders at points {(np.flatnonzero(slider[1:]) + 1).tolist()} (beyond point 1)",
                        "a point on a fixed line other than the root has no MuJoCo equality")
        if model.bodies is not None and not model.serial:
            bi, bj = _np(model.bodies.i, "bodies"), _np(model.bodies.j, "bodies")
            pairs = {frozenset((int(i), int(j))) for i, j in zip(_np(model.dist.i, "dist"), _np(model.dist.j, "dist"))}
            W = _np(model.W, "W").reshape(model.n_points, -1)
            for i, j in zip(bi, bj):
                if frozenset((int(i), int(j))) not in pairs and not (np.all(W[i] == 0) and np.all(W[j] == 0)):
                    _refuse(f"a body between points {model.point_names[i]!r} and {model.point_names[j]!r} without "
                            "its distance row (rigid=False)", "two points joined by mass only are not a rigid body")

    # -- points fixed to parts (a mechanism's attach) ------------------------------------------------------------------
    def _attached(self, model, W, offset):
        """Add each point that is neither a coordinate point nor ground to the part it is fixed to (its row of W is
        the combination of that part's base points' rows)."""
        P, N2 = self.P, W.shape[1]
        Wp, cp = W.reshape(P, 2, N2), offset.reshape(P, 2)
        R = np.array([[0.0, -1.0], [1.0, 0.0]])
        for k in range(P):
            if self.world[k]:
                continue
            col = np.flatnonzero(np.any(Wp[k] != 0, 0))
            if len(col) == 2 and col[0] % 2 == 0 and col[1] == col[0] + 1 and np.array_equal(
                    Wp[k][:, col], np.eye(2)) and not np.any(cp[k]):
                continue   # a coordinate point
            for part in self.parts:
                i, j = part["base"]
                d = self.key[j] - self.key[i]
                e = self.key[k] - self.key[i]
                al, be = (d @ e) / (d @ d), (d[0] * e[1] - d[1] * e[0]) / (d @ d)
                A0, A1 = (1 - al) * np.eye(2) - be * R, al * np.eye(2) + be * R
                if np.allclose(Wp[k], A0 @ Wp[i] + A1 @ Wp[j], atol=1e-9) and np.allclose(
                        cp[k], A0 @ cp[i] + A1 @ cp[j], atol=1e-9):
                    part["pts"].add(k)
                    break
            else:
                raise ValueError(f"to_mjcf: point {model.point_names[k]!r} is fixed to no body of the model (its "
                                 "coordinates are not those of a point attached to a body)")

    # -- the spanning tree -------------------------------------------------------------------------------------------
    def _grow(self):
        """parent (index, or -1 for the world), hinge location and root joints of each part; closures (part, owner,
        location) where a part meets a location already taken."""
        locs = [{self.loc[p] for p in part["pts"]} for part in self.parts]
        at = {}
        for k, ls in enumerate(locs):
            for L in ls:
                at.setdefault(L, []).append(k)
        owner = {self.loc[p]: -1 for p in range(len(self.key)) if self.world[p]}
        self.closures, placed, order = [], {}, []

        def place(k, par, L, joints):
            placed[k] = (par, L, joints)
            order.append(k)
            for L2 in sorted(locs[k] - {L}):
                if L2 in owner:
                    self.closures.append((k, owner[L2], L2))
                else:
                    owner[L2] = k
            owner.setdefault(L, k)

        def grow(queue):
            while queue:
                p = queue.pop(0)
                mine = sorted(L for L, o in owner.items() if o == p) if p == -1 else sorted(locs[p])
                for L in mine:
                    for k in at.get(L, []):
                        if k not in placed:
                            place(k, owner[L], L, "hinge")
                            queue.append(k)

        # the sliders' parts first, as roots (a slide along the line and a hinge); then the tree grows from the world
        # and from them (a loop through a slider, a slider-crank's, is closed at its other end); then free parts
        slides = []
        for p in sorted(self.slider_line):
            k = next((k for k in at.get(self.loc[p], []) if k not in placed), None)
            if k is not None:
                place(k, -1, self.loc[p], "slide")
                slides.append(k)
        grow([-1] + slides)
        for k in range(len(self.parts)):
            if k not in placed:
                place(k, -1, self.loc[self.parts[k]["base"][0]], "free")
                grow([k])
        # coordinate points in no part: a point mass on its own (slides only)
        for p in range(self.P):
            L = self.loc[p]
            if not self.world[p] and L not in owner:
                self.parts.append(dict(base=None, pts={p}))
                locs.append({L})
                place(len(self.parts) - 1, -1, L, "slide" if p in self.slider_line else "free")
        for p in self.slider_line:
            k = owner.get(self.loc[p])
            if k is None or k == -1 or placed[k][2] != "slide" or placed[k][1] != self.loc[p]:
                name = self.model.point_names[p] if self.model.point_names else p + 1
                _refuse(f"a slider at point {name!r}", "a point on a fixed line is exported only as a root's slide")
        self.placed, self.order, self.owner = placed, order, owner

    def point_of(self, k, L):
        """A point of part k (or of the world, k = -1) at location L."""
        pts = [p for p in range(len(self.key)) if self.world[p]] if k == -1 else self.parts[k]["pts"]
        for p in sorted(pts):
            if self.loc[p] == L:
                return p
        raise AssertionError((k, L))

    def origin(self, k, config):
        """A part's frame origin (its hinge or root location) in ``config`` (the ref or key positions)."""
        return np.zeros(2) if k == -1 else config[self.point_of(k, self.placed[k][1])]

    def phi(self, k, config):
        """The angle of part k's base pair in ``config`` (the world's: 0)."""
        if k == -1 or self.parts[k]["base"] is None:
            return 0.0
        i, j = self.parts[k]["base"]
        return float(_angle(config[j] - config[i]))

    def omega(self, k):
        if k == -1 or self.parts[k]["base"] is None:
            return 0.0
        i, j = self.parts[k]["base"]
        d, dv = self.key[j] - self.key[i], self.vel[j] - self.vel[i]
        return float((d[0] * dv[1] - d[1] * dv[0]) / (d @ d))

    def part_of(self, i, j):
        """The part that holds both points i, j (indices -2, -1: the world frame's (0, 0), (1, 0))."""
        if i < 0 and j < 0 or (i >= 0 and j >= 0 and self.world[i] and self.world[j]):
            return -1
        for k, part in enumerate(self.parts):
            if i in part["pts"] and j in part["pts"]:
                return k
        if self.owner.get(self.loc[i]) == -1 and self.owner.get(self.loc[j]) == -1:
            return -1   # a chain's rod between two guided points: fixed
        return None

    def _pair_angle(self, i, j, config):
        pt = lambda a: np.array([0.0, 0.0]) if a == -2 else np.array([1.0, 0.0]) if a == -1 else config[a]  # noqa
        return float(_angle(pt(j) - pt(i)))

    # -- mass ------------------------------------------------------------------------------------------------------
    def _inertials(self, model):
        items = {k: [] for k in range(len(self.parts))}   # (mass, position (ref), inertia about it)
        for p in range(self.P):
            k = self.owner.get(self.loc[p])
            if self.mass[p] > 0 and k is not None and k != -1:
                items[k].append((self.mass[p], self.ref[p], 0.0))
        b = model.bodies
        if b is not None:
            bi, bj = _np(b.i, "bodies"), _np(b.j, "bodies")
            mu, com, J = (_np(a, "the bodies' mass").astype(float) for a in (b.mass, b.com, b.inertia))
            for i, j, mu_, com_, J_ in zip(bi, bj, mu, com, J):
                k = self.part_of(int(i), int(j))
                if k is None or k == -1 or (mu_ == 0 and J_ == 0):
                    continue
                d = self.ref[j] - self.ref[i]
                e = d / np.linalg.norm(d)
                items[k].append((mu_, self.ref[i] + com_[0] * e + com_[1] * np.array([-e[1], e[0]]), J_))
        total = sum(mu for its in items.values() for mu, _, _ in its) or 1.0
        span = np.ptp(self.ref, 0).max() if len(self.ref) > 1 else 1.0
        span = span if span > 0 else 1.0
        m_floor, I_floor = max(FLOOR * total, 2e-15), max(FLOOR * total * span**2, 2e-15)
        self.inertial = {}
        for k, its in items.items():
            o = self.origin(k, self.ref)
            M = sum(mu for mu, _, _ in its)
            c = sum(mu * p for mu, p, _ in its) / M if M > 0 else o
            I = sum(J + mu * np.sum((p - c) ** 2) for mu, p, J in its)
            self.inertial[k] = (max(M, m_floor), c - o, max(I, I_floor))

    # -- joints and their forces -------------------------------------------------------------------------------------
    def _across(self, quad):
        """(child part, sign) when the pair quadruple's two parts are joined by a hinge (sign +1: the second part is
        the child), else (None, parts)."""
        A, B = self.part_of(*quad[:2]), self.part_of(*quad[2:])
        for child, par, sign in ((B, A, 1), (A, B, -1)):
            if child not in (None, -1) and par is not None and self.placed[child][0] == par \
                    and self.parts[child]["base"] is not None:
                return child, sign
        return None, (A, B)

    def _relative(self, A, B, what):
        """{hinge: coefficient}: the angle of part B against part A as a sum of hinge angles (each part's angle is
        the sum of the hinges from its root, a root's hinge turning it against the world; a slide turns nothing), from
        the reference configuration."""
        if A is None or B is None:
            raise ValueError(f"to_mjcf: {what} acts on points that are fixed to no one body")
        coef = {}
        for part, sign in ((B, 1), (A, -1)):
            while part != -1:
                if self.parts[part]["base"] is not None:
                    coef[part] = coef.get(part, 0) + sign
                part = self.placed[part][0]
        return {j: v for j, v in coef.items() if v}

    def xml(self, name, timestep, integrator, solimp):
        model = self.model
        damping = {k: 0.0 for k in self.placed}
        stiff = {k: [0.0, 0.0] for k in self.placed}   # k, k * springref
        self.fixed = []   # rotational springs and dampers between parts that no hinge joins

        def rotational(what, quad, k_, t0, c):
            """A torsional spring k_ (rest angle t0) and damper c between the quadruple's two parts: on the hinge
            that joins them, else on a fixed tendon of the hinges between them."""
            theta_ref = self._pair_angle(quad[2], quad[3], self.ref) - self._pair_angle(quad[0], quad[1], self.ref)
            child, sign = self._across(quad)
            if child is not None:
                springref = _wrap(t0 - theta_ref) if sign > 0 else _wrap(theta_ref - t0)
                stiff[child][0] += k_
                stiff[child][1] += k_ * springref
                damping[child] += c
                return
            coef = self._relative(*sign, what)
            rest = _wrap(t0 - theta_ref)
            if rest == -1.0:   # (MuJoCo reads a springlength of -1 as "the length at qpos0")
                coef, rest = {j: -v for j, v in coef.items()}, 1.0
            self.fixed.append((coef, k_, rest, c))

        d_idx, d_c = _np(model.damper_idx, "damper_idx"), _np(model.damper_c, "damper_c").astype(float)
        for quad, c in zip(d_idx, d_c):
            if c != 0:
                rotational(f"a rotational damper ({c})", quad, 0.0, 0.0, c)
        for f in model.forces:
            ks, th0 = _np(f.k, "torsion k").astype(float), _np(f.theta0, "torsion theta0").astype(float)
            cs = np.zeros_like(ks) if f.c is None else _np(f.c, "torsion c").astype(float)
            for quad, k_, t0, c in zip(_np(f.idx, "torsion idx"), ks, th0, cs):
                if k_ != 0 or c != 0:
                    rotational(f"a torsional spring (k = {k_})", quad, k_, t0, c)
        self.damping, self.stiff = damping, stiff
        lines = [f'<mujoco model={quoteattr(name)}>',
                 '  <compiler angle="radian" inertiafromgeom="false" autolimits="true"/>',
                 f'  <option timestep="{_f(timestep)}" integrator="{integrator}" gravity="0 0 {_f(-self.g)}">',
                 '    <flag contact="disable"/>', '  </option>',
                 '  <default><geom contype="0" conaffinity="0" group="1"/><site size="0.01"/></default>',
                 '  <worldbody>', '    <site name="world"/>']
        self.sites, self.site_lines = {}, {-1: []}
        actuators = self._actuators()
        tendons = self._tendons()
        equality = [f'    <connect name="loop{n}" site1="{self.site(k, self.point_of(k, L))}" '
                    f'site2="{self.site(o, self.point_of(o, L))}" solimp="{" ".join(_f(v) for v in solimp)}"/>'
                    for n, (k, o, L) in enumerate(self.closures)]
        lines += ["    " + s for s in self.site_lines[-1]]
        for k in self.order:
            if self.placed[k][0] == -1:
                lines += self._body(k, np.zeros(2), 2)
        lines.append('  </worldbody>')
        if tendons:
            lines += ['  <tendon>'] + tendons + ['  </tendon>']
        if equality:
            lines += ['  <equality>'] + equality + ['  </equality>']
        if actuators:
            lines += ['  <actuator>'] + actuators + ['  </actuator>']
        qpos, qvel = self._keyframe()
        lines += ['  <keyframe>', f'    <key name="state" qpos="{" ".join(map(_f, qpos))}" '
                  f'qvel="{" ".join(map(_f, qvel))}"/>', '  </keyframe>', '</mujoco>', '']
        return "\n".join(lines)

    def site(self, k, p):
        """The name of a site at point p on part k (made on first use)."""
        key = (k, p)
        if key not in self.sites:
            self.sites[key] = f"s{len(self.sites)}"
            pos = self.ref[p] - self.origin(k, self.ref)
            self.site_lines.setdefault(k, []).append(f'<site name="{self.sites[key]}" pos="{_xz(pos)}"/>')
        return self.sites[key]

    def _actuators(self):
        model, out = self.model, []
        for n, quad in enumerate(_np(model.motor_idx, "motor_idx")):
            child, sign = self._across(quad)
            label = f'name="motor{n}"'
            if child is not None:
                out.append(f'    <motor {label} joint="j{child}" gear="{sign}"/>')
                continue
            A, B = sign
            if A is None or B is None:
                raise ValueError(f"to_mjcf: motor {n} acts on points {quad.tolist()} that are fixed to no one part")
            if A == B:   # acts on nothing (a one-point chain's torque)
                out.append(f'    <motor {label} site="world" gear="0 0 0 0 0 0"/>')
                continue
            # a torque tau counter-clockwise on B, -tau on A: about -y, the site's y component -1
            tgt, ref, g = (B, A, "-1") if B != -1 else (A, -1, "1")
            s = self.site(tgt, self.point_of(tgt, self.placed[tgt][1]))
            refsite = "" if ref == -1 else f' refsite="{self.site(ref, self.point_of(ref, self.placed[ref][1]))}"'
            out.append(f'    <motor {label} site="{s}"{refsite} gear="0 0 0 0 {g} 0"/>')
        return out

    def _tendons(self):
        model, out = self.model, []
        for n, (coef, k_, rest, c) in enumerate(self.fixed):
            joints = "".join(f'<joint joint="j{j}" coef="{v}"/>' for j, v in sorted(coef.items()))
            spring = f' stiffness="{_f(k_)}" springlength="{_f(rest)}"' if k_ else ""
            damp = f' damping="{_f(c)}"' if c else ""
            out.append(f'    <fixed name="torsion{n}"{spring}{damp}>{joints}</fixed>')
        idx = _np(model.spring_idx, "spring_idx")
        k, L0, c = (_np(a, "springs").astype(float) for a in (model.spring_k, model.spring_L0, model.spring_c))
        for n, ((i, j), k_, L_, c_) in enumerate(zip(idx, k, L0, c)):
            if k_ == 0 and c_ == 0:
                continue
            s = []
            for p in (int(i), int(j)):
                o = self.owner.get(self.loc[p])
                s.append(self.site(o, self.point_of(o, self.loc[p])))
            out.append(f'    <spatial name="spring{n}" stiffness="{_f(k_)}" damping="{_f(c_)}" '
                       f'springlength="{_f(L_)}"><site site="{s[0]}"/><site site="{s[1]}"/></spatial>')
        return out

    def _body(self, k, parent_origin, depth):
        ind = "  " * depth
        _, L, kind = self.placed[k]
        o = self.origin(k, self.ref)
        out = [f'{ind}<body name="part{k}" pos="{_xz(o - parent_origin)}">']
        if kind == "free":
            out += [f'{ind}  <joint name="x{k}" type="slide" axis="1 0 0"/>',
                    f'{ind}  <joint name="z{k}" type="slide" axis="0 0 1"/>']
        elif kind == "slide":
            s, _ = self.slider_line[self.point_of(k, L)]
            out.append(f'{ind}  <joint name="x{k}" type="slide" axis="{_xz(np.array([-s[1], s[0]]))}"/>')
        if self.parts[k]["base"] is not None:
            kk, ks = self.stiff[k]
            spring = f' stiffness="{_f(kk)}" springref="{_f(ks / kk)}"' if kk else ""
            damp = f' damping="{_f(self.damping[k])}"' if self.damping[k] else ""
            out.append(f'{ind}  <joint name="j{k}" type="hinge" axis="0 -1 0"{damp}{spring}/>')
        M, c, I = self.inertial[k]
        out.append(f'{ind}  <inertial pos="{_xz(c)}" mass="{_f(M)}" diaginertia="{_f(I)} {_f(I)} {_f(I)}"/>')
        size = 0.02 * max(np.ptp(self.ref, 0).max(), 1e-3)
        for p in sorted(self.parts[k]["pts"]):
            if self.world[p]:
                continue
            r = self.ref[p] - o
            out.append(f'{ind}  <geom type="sphere" size="{_f(size)}" pos="{_xz(r)}"/>')
        if self.parts[k]["base"] is not None:
            i, j = self.parts[k]["base"]
            out.append(f'{ind}  <geom type="capsule" size="{_f(size / 2)}" '
                       f'fromto="{_xz(self.ref[i] - o)} {_xz(self.ref[j] - o)}"/>')
        out += [f"{ind}  " + s for s in self.site_lines.get(k, [])]
        for ch in self.order:
            if self.placed[ch][0] == k:
                out += self._body(ch, o, depth + 1)
        out.append(f"{ind}</body>")
        return out

    def _keyframe(self):
        """qpos, qvel of ``state`` in the order MuJoCo numbers the joints (the bodies depth first)."""
        qpos, qvel = [], []

        def visit(k):
            par, L, kind = self.placed[k]
            o_key, o_ref = self.origin(k, self.key), self.origin(k, self.ref)
            v = self.vel[self.point_of(k, L)]
            if kind == "free":
                qpos.extend(o_key - o_ref), qvel.extend(v)
            elif kind == "slide":
                s, _ = self.slider_line[self.point_of(k, L)]
                t = np.array([-s[1], s[0]])
                qpos.append(t @ (o_key - o_ref)), qvel.append(t @ v)
            if self.parts[k]["base"] is not None:
                rel = lambda cfg: self.phi(k, cfg) - self.phi(par, cfg)  # noqa: E731
                qpos.append(_wrap(rel(self.key) - rel(self.ref)))
                qvel.append(self.omega(k) - self.omega(par))
            for ch in self.order:
                if self.placed[ch][0] == k:
                    visit(ch)

        for k in self.order:
            if self.placed[k][0] == -1:
                visit(k)
        return qpos, qvel
