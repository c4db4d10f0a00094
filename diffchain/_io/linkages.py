"""Mechanisms from the files of kinematic linkage tools: :func:`from_pylinkage` (pylinkage's JSON) and
:func:`from_pyslvs` (Pyslvs' expression strings).

Both tools describe a planar linkage kinematically, as joints and links with no masses. As a diffchain mechanism
(:class:`diffchain.MechanismBuilder`, natural coordinates) a joint on the ground is a ground point and another joint
a moving point; a link of two joints is a uniform bar between them, a link of k > 2 joints a rigid body on its first
two joints with the others pinned to points fixed in it, of the mass of uniform bars from its first joint to each
other joint and from each joint after the first to the next (a bar has ``mass_per_length`` times its length, its
centre of mass at its middle and the inertia of a uniform bar). A crank (a link about a ground joint that the tool
turns) gets a motor (``crank="motor"``) or its angle prescribed
(``crank="driven"``).

pylinkage (https://github.com/HugoFara/pylinkage) writes a linkage with ``pylinkage.mechanism.mechanism_to_json``:

    {"name": ..., "joints": [{"id", "type": "ground" | "revolute" | "prismatic" | "tracker", "position": [x, y],
                              prismatic: "axis", "line_point";  tracker: "ref_joint1_id", "ref_joint2_id", "distance",
                              "angle"}, ...],
     "links": [{"id", "type": "ground" | "driver" | "link" | "arc_driver", "joints": [joint ids],
                driver: "motor_joint", "angular_velocity" (rad per step), "initial_angle"}, ...],
     "ground": the ground link's id}

A prismatic joint is a point on the fixed line through ``line_point`` along ``axis``, a tracker a point fixed in the
link of its two reference joints, a driver link a crank whose driven angle is pylinkage's
``initial_angle + angular_velocity * t / seconds_per_step``.

Pyslvs (https://github.com/KmolYuan/Pyslvs-UI) writes a linkage as an expression, one ``J[...]`` per joint:

    M[J[R, color[Green], P[0.0, 0.0], L[ground, L1]], J[R, P[12.9, 32.5], L[L1, L2]], ...,
      J[RP, A[30.0], P[51.4, -12.6], L[ground, L2]]]

of type ``R`` (a pin joining the links of its ``L[...]``), ``RP`` (a pin sliding in a slot of its first link) or
``P`` (a slider: the other links translate along the slot without turning), ``A[...]`` the slot's angle in degrees,
``P[x, y]`` the position; a link is the set of joints that name it, ``ground`` the frame. A slot in the ground is a
fixed line; Pyslvs keeps the inputs apart from the expression: here they are ``inputs``, pairs (base joint, driven
joint) of joint indices, the crank being the link that holds both.
"""
from __future__ import annotations

import json
import math
import os
import re
from typing import Any, Sequence

import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from .._constraints.kinds import Polynomial
from .._model.builder import MechanismBuilder
from .._model.model import Model
from .._state import State
from .format import FileFormatError

_JOINT_TYPES = ("ground", "revolute", "prismatic", "tracker")
_LINK_TYPES = ("ground", "driver", "link")


def _got(v: Any) -> str:
    return json.dumps(v) if isinstance(v, (str, int, float, bool, type(None))) else type(v).__name__


def _number(v: Any, path: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise FileFormatError(path, f"expected a finite number, got {_got(v)}")
    return float(v)


def _pair(v: Any, path: str) -> np.ndarray:
    if not (isinstance(v, list) and len(v) == 2):
        raise FileFormatError(path, f"expected [x, y], got {_got(v)}")
    return np.asarray([_number(c, f"{path}[{k}]") for k, c in enumerate(v)])


def _check_arguments(who: str, crank: str, **positive: float) -> None:
    for name, v in positive.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v > 0 and math.isfinite(v)):
            raise ValueError(f"{who}: {name} must be a finite number > 0, got {v!r}")
    if crank not in ("motor", "driven"):
        raise ValueError(f"{who}: crank must be 'motor' or 'driven', got {crank!r}")


def _link(mb: MechanismBuilder, name: str, joints: Sequence[str], mass_per_length: float, path: str,
          later: dict) -> None:
    """The rigid link ``name`` through ``joints`` (module docstring): a body on its first two joints; each further
    joint a point fixed in it, pinned to that joint's point, or (a joint of ``later``, {name: position}, one that no
    other link holds) the fixed point itself; its mass that of uniform bars, the first joint to each other joint and
    each joint after the first to the next (one bar for two joints)."""
    p = [np.asarray(later[j]) if j in later else mb.pos[mb._idx(j)] for j in joints]
    pairs = [(0, k) for k in range(1, len(p))] + [(k, k + 1) for k in range(1, len(p) - 1)]
    length = [float(np.linalg.norm(p[b] - p[a])) for a, b in pairs]
    for (a, b), L in zip(pairs, length):
        if not L > 0:
            raise FileFormatError(path, f"joints {joints[a]!r} and {joints[b]!r} coincide: a bar needs a length")
    mass = [mass_per_length * L for L in length]
    local = [_local(p[0], p[1], q) for q in p]
    centre = [(local[a] + local[b]) / 2 for a, b in pairs]
    total = sum(mass)
    com = sum(m * c for m, c in zip(mass, centre)) / total
    inertia = sum(m * (L**2 / 12 + float(np.sum((c - com) ** 2))) for m, L, c in zip(mass, length, centre))
    mb.body(name, joints[0], joints[1], mass=total, com=tuple(com), inertia=inertia, length=length[0])
    for j, q in zip(joints[2:], local[2:]):
        if j in later:
            mb.attach(j, name, tuple(q))
        else:
            mb.revolute(f"{name}.{j}.pin", j, mb.attach(f"{name}.{j}", name, tuple(q)))


def _solo(links: Sequence[Sequence]) -> set:
    """The joints that one link alone holds, after its first two (points fixed in that link, :func:`_link`)."""
    count: dict = {}
    for joints in links:
        for j in joints:
            count[j] = count.get(j, 0) + 1
    return {j for joints in links for j in joints[2:] if count[j] == 1}


def _local(p0: np.ndarray, p1: np.ndarray, q: np.ndarray) -> np.ndarray:
    """q in the frame of a body with base points p0, p1 (MechanismBuilder.attach: a along p0 -> p1, b to the left)."""
    e = (p1 - p0) / np.linalg.norm(p1 - p0)
    d = q - p0
    return np.asarray([d @ e, e[0] * d[1] - e[1] * d[0]])


def _crank(mb: MechanismBuilder, link: str, ends: Sequence[str], crank: str, angle: Polynomial) -> None:
    """The crank ``link`` (its body from its ground joint ends[0] to ends[1]): a motor against the ground, or its
    angle driven."""
    if crank == "motor":
        mb.motor(f"{link}.motor", "ground", link)
    else:
        mb.drive(f"{link}.drive", "angle", list(ends), angle)


def from_pylinkage(source: str | os.PathLike[str] | dict, *, mass_per_length: float = 1.0, g: float = 9.81,
                   crank: str = "motor", seconds_per_step: float = 1.0,
                   dtype: DTypeLike = jnp.float64) -> tuple[Model, State]:
    """(the mechanism, its State at the drawn positions at rest) of a pylinkage mechanism file (module docstring):
    ``source`` is the path of the JSON file that ``pylinkage.mechanism.mechanism_to_json`` writes, or the dictionary
    of ``mechanism_to_dict``.

    ``mass_per_length`` (kg/m) gives every bar its mass; ``g`` the gravity along -y. ``crank="motor"``: each driver
    link has a motor (``Control(tau=(n_drivers,))``, in the order of the file's links); ``crank="driven"``: its angle
    follows pylinkage's rotation, ``initial_angle + angular_velocity * t / seconds_per_step`` (a kinematic driver).
    The point names are the joints' ids, the bodies' names the links' ids.

    Entries diffchain cannot read raise :class:`diffchain.FileFormatError` with their JSON path
    (``links[2].joints[1]: unknown joint "C"``), also the kinds it does not import (an arc driver, a tracker whose
    reference joints are on no one link).
    """
    if isinstance(source, dict):
        doc = source
    else:
        try:
            with open(source, encoding="utf-8") as f:
                doc = json.load(f)
        except json.JSONDecodeError as e:
            raise FileFormatError("", f"not JSON: {e}") from None
    _check_arguments("from_pylinkage", crank, mass_per_length=mass_per_length, seconds_per_step=seconds_per_step)
    if not (isinstance(doc, dict) and isinstance(doc.get("joints"), list) and isinstance(doc.get("links"), list)):
        raise FileFormatError("", "not a pylinkage mechanism: expected an object with lists 'joints' and 'links' "
                                  "(pylinkage.mechanism.mechanism_to_json)")
    mb = MechanismBuilder(g=g)
    kinds, trackers, later = {}, [], {}
    solo = _solo([link["joints"] for link in doc["links"] if isinstance(link, dict) and link.get("type", "link") !=
                  "ground" and isinstance(link.get("joints"), list) and all(isinstance(j, str) for j in link["joints"])])
    for k, j in enumerate(doc["joints"]):
        p = f"joints[{k}]"
        if not isinstance(j, dict):
            raise FileFormatError(p, f"expected a joint object, got {_got(j)}")
        jid, kind = j.get("id"), j.get("type", "revolute")
        if not isinstance(jid, str) or not jid:
            raise FileFormatError(f"{p}.id", f"expected a name, got {_got(jid)}")
        if jid in kinds:
            raise FileFormatError(f"{p}.id", f"a second joint {jid!r}")
        if kind not in _JOINT_TYPES:
            raise FileFormatError(f"{p}.type", f"expected one of {', '.join(map(repr, _JOINT_TYPES))}, got "
                                               f"{_got(kind)}")
        kinds[jid] = kind
        if kind == "tracker":
            trackers.append((k, j))
            continue
        xy = _pair(j.get("position"), f"{p}.position")
        if kind == "ground":
            mb.ground(jid, xy)
        elif kind == "revolute" and jid in solo:
            later[jid] = xy
        else:
            mb.point(jid, xy)
        if kind == "prismatic":
            axis = _pair(j.get("axis", [1.0, 0.0]), f"{p}.axis")
            if not np.linalg.norm(axis) > 0:
                raise FileFormatError(f"{p}.axis", "expected a nonzero direction, got [0, 0]")
            through = _pair(j.get("line_point", [0.0, 0.0]), f"{p}.line_point")
            rail = (mb.ground(f"{jid}.rail0", through), mb.ground(f"{jid}.rail1", through + axis / np.linalg.norm(axis)))
            mb.slider(f"{jid}.slide", jid, *rail)

    links = {}  # the links' joints, by link
    for k, link in enumerate(doc["links"]):
        p = f"links[{k}]"
        if not isinstance(link, dict):
            raise FileFormatError(p, f"expected a link object, got {_got(link)}")
        lid, kind, joints = link.get("id"), link.get("type", "link"), link.get("joints")
        if not isinstance(lid, str) or not lid:
            raise FileFormatError(f"{p}.id", f"expected a name, got {_got(lid)}")
        if kind not in _LINK_TYPES:
            hint = " (an oscillating crank: not imported)" if kind == "arc_driver" else ""
            raise FileFormatError(f"{p}.type", f"expected one of {', '.join(map(repr, _LINK_TYPES))}, got "
                                               f"{_got(kind)}{hint}")
        if not isinstance(joints, list):
            raise FileFormatError(f"{p}.joints", f"expected a list of joint ids, got {_got(joints)}")
        for i, jid in enumerate(joints):
            if kinds.get(jid) in (None, "tracker"):
                what = "a tracker joint (an observer: it joins no link)" if jid in kinds else f"unknown joint {_got(jid)}"
                raise FileFormatError(f"{p}.joints[{i}]", what)
        if kind == "ground":
            moving = [jid for jid in joints if kinds[jid] != "ground"]
            if moving:
                raise FileFormatError(f"{p}.joints", f"the ground link holds joint {moving[0]!r}, which is not of "
                                                     "type 'ground'")
            continue
        if len(joints) < 2:
            raise FileFormatError(f"{p}.joints", f"a link needs two joints or more, got {len(joints)}")
        if kind == "driver":
            motor = link.get("motor_joint", joints[0])
            if len(joints) != 2 or motor != joints[0] or kinds[motor] != "ground":
                raise FileFormatError(f"{p}.joints", "a driver link is [its ground joint (motor_joint), its tip], "
                                                     f"got {_got(joints)} with motor_joint {_got(motor)}")
        _link(mb, lid, joints, mass_per_length, f"{p}.joints", later)
        links[lid] = joints
        if kind == "driver":
            omega = _number(link.get("angular_velocity", 2 * math.pi / 360), f"{p}.angular_velocity")
            theta0 = _number(link.get("initial_angle", 0.0), f"{p}.initial_angle")
            _crank(mb, lid, joints, crank, Polynomial((theta0, omega / seconds_per_step)))

    for k, j in trackers:  # at ref1 + distance R(angle) (ref2 - ref1) / |ref2 - ref1|, fixed in the link of both
        p = f"joints[{k}]"
        a, b = j.get("ref_joint1_id"), j.get("ref_joint2_id")
        d, angle = _number(j.get("distance", 0.0), f"{p}.distance"), _number(j.get("angle", 0.0), f"{p}.angle")
        lid = next((lid for lid, joints in links.items() if a in joints and b in joints), None)
        if lid is None:
            raise FileFormatError(p, f"a tracker whose reference joints {_got(a)}, {_got(b)} are not on one link is "
                                     "not imported")
        pa, pb = mb.pos[mb._idx(a)], mb.pos[mb._idx(b)]
        u = (pb - pa) / np.linalg.norm(pb - pa)
        xy = pa + d * (math.cos(angle) * u + math.sin(angle) * np.asarray([-u[1], u[0]]))
        base = [mb.pos[mb._idx(q)] for q in links[lid][:2]]
        mb.attach(j["id"], lid, tuple(_local(*base, xy)))
    return mb.build(dtype)


_NUM = r"[+-]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?"
_JOINT = re.compile(rf"\s*J\[\s*(RP|R|P)\s*(?:,\s*A\[\s*({_NUM})\s*\])?\s*(?:,\s*color\[[^\]]*\])?\s*,\s*"
                    rf"P\[\s*({_NUM})\s*,\s*({_NUM})\s*\]\s*,\s*L\[([^\]]*)\]\s*\]\s*(,|$)")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _pyslvs_joints(expression: str) -> list:
    """(type, slot angle in degrees or None, (x, y), links) of each joint of a Pyslvs expression."""
    if not isinstance(expression, str):
        raise TypeError(f"from_pyslvs: expression must be a string (Pyslvs' M[J[...], ...]), got "
                        f"{type(expression).__name__}")
    text = re.sub(r"#\[[\s\S]*?#\][^\n]*|#[^\n]*", "", expression).strip()
    if not (text.startswith("M[") and text.endswith("]")):
        raise FileFormatError("", "not a Pyslvs expression: expected M[J[...], J[...], ...]")
    body, pos, joints = text[2:-1], 0, []
    while body[pos:].strip():
        m = _JOINT.match(body, pos)
        if m is None:
            raise FileFormatError(f"M[{len(joints)}]", "expected J[type (R, RP or P), (A[angle],) (color[...],) "
                                                       f"P[x, y], L[links]], got {body[pos:].strip()[:60]!r}")
        kind, angle, x, y, links, _ = m.groups()
        links = tuple(v.strip() for v in links.split(",") if v.strip())
        bad = [v for v in links if not _NAME.fullmatch(v)]
        if bad:
            raise FileFormatError(f"M[{len(joints)}]", f"expected link names in L[...], got {bad[0]!r}")
        if kind != "R" and angle is None:
            raise FileFormatError(f"M[{len(joints)}]", f"a joint of type {kind} needs its slot angle A[...]")
        joints.append((kind, None if angle is None else float(angle), (float(x), float(y)), links))
        pos = m.end()
    return joints


def from_pyslvs(expression: str, inputs: Sequence[tuple[int, int]] = (), *, mass_per_length: float = 1.0,
                g: float = 9.81, crank: str = "motor", speed: float = 1.0,
                dtype: DTypeLike = jnp.float64) -> tuple[Model, State]:
    """(the mechanism, its State at the drawn positions at rest) of a Pyslvs expression (module docstring).

    ``inputs``: Pyslvs' input pairs (base joint, driven joint), indices into the expression's joints, the base on the
    ground: the link holding both is a crank, with a motor (``crank="motor"``: ``Control(tau=(len(inputs),))``) or
    turning at ``speed`` rad/s from its drawn angle (``crank="driven"``). The points are named ``"J0"``, ``"J1"``, ...
    in the expression's order, the bodies after the links. A slot in the ground
    (``RP``, ``P`` with ``ground`` first) is a fixed line through the joint; a ``P`` joint also keeps its other links'
    orientation. Entries diffchain cannot read raise :class:`diffchain.FileFormatError` naming the joint
    (``M[3]: ...``, the fourth), also the kinds it does not import (a slot in a moving link).
    """
    _check_arguments("from_pyslvs", crank, mass_per_length=mass_per_length)
    if not (isinstance(speed, (int, float)) and not isinstance(speed, bool) and math.isfinite(speed)):
        raise ValueError(f"from_pyslvs: speed must be a finite number (rad/s), got {speed!r}")
    joints = _pyslvs_joints(expression)
    name = [f"J{k}" for k in range(len(joints))]
    members: dict = {}  # link -> its joints (indices), in the expression's order
    for k, (kind, _, _, links) in enumerate(joints):
        if kind != "R" and links[:1] != ("ground",):
            raise FileFormatError(f"M[{k}]", f"a {kind} joint in a slot of a moving link ({links[0] if links else '-'}"
                                             ") is not imported: only slots in the ground are")
        for link in links:
            if link != "ground":
                members.setdefault(link, []).append(k)
    cranks = []
    for i, pair in enumerate(inputs):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and all(
                isinstance(v, int) and not isinstance(v, bool) and 0 <= v < len(joints) for v in pair)):
            raise ValueError(f"from_pyslvs: inputs[{i}] must be a pair (base joint, driven joint) of indices below "
                             f"{len(joints)}, got {pair!r}")
        base, driven = pair
        link = next((lk for lk, ks in members.items() if base in ks and driven in ks), None)
        if link is None or not (joints[base][0] == "R" and "ground" in joints[base][3]):
            raise ValueError(f"from_pyslvs: inputs[{i}] = {tuple(pair)}: the base joint must be a pin on the ground "
                             "sharing a link with the driven joint")
        members[link] = [base, driven] + [k for k in members[link] if k not in pair]  # the crank's body first
        cranks.append((link, base, driven))
    for link, ks in members.items():
        if len(ks) < 2:
            raise FileFormatError(f"M[{ks[0]}]", f"link {link!r} has this joint only: a link needs two joints or more")
    solo = _solo([[name[k] for k in ks] for ks in members.values()])
    mb, later = MechanismBuilder(g=g), {}
    for k, (kind, angle, xy, links) in enumerate(joints):
        if kind == "R" and "ground" in links:
            mb.ground(name[k], xy)
        elif kind == "R" and name[k] in solo:
            later[name[k]] = xy
        else:
            mb.point(name[k], xy)
        if kind != "R":
            a = math.radians(angle)
            rail = (mb.ground(f"{name[k]}.rail0", xy), mb.ground(f"{name[k]}.rail1", (xy[0] + math.cos(a),
                                                                                        xy[1] + math.sin(a))))
            mb.slider(f"{name[k]}.slide", name[k], *rail)
    for link, ks in members.items():
        _link(mb, link, [name[k] for k in ks], mass_per_length, f"M[{ks[0]}]", later)
    for k, (kind, _, _, links) in enumerate(joints):  # a P joint: its links translate along the slot
        for link in links[1:] if kind == "P" else ():
            other = next(j for j in members[link] if j != k)
            d = np.subtract(joints[other][2], joints[k][2])
            mb.drive(f"{name[k]}.{link}.keep", "angle", (name[k], name[other]), float(math.atan2(d[1], d[0])))
    for link, base, driven in cranks:
        d = np.subtract(joints[driven][2], joints[base][2])
        _crank(mb, link, (name[base], name[driven]), crank, Polynomial((float(math.atan2(d[1], d[0])), float(speed))))
    return mb.build(dtype)
