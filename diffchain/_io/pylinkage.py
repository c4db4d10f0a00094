"""Import of pylinkage's mechanism files: :func:`from_pylinkage`.

pylinkage (https://github.com/HugoFara/pylinkage) describes a planar linkage kinematically, as joints and links with
no masses, and writes it as JSON with ``pylinkage.mechanism.mechanism_to_json``:

    {"name": ..., "joints": [{"id", "type": "ground" | "revolute" | "prismatic" | "tracker", "position": [x, y],
                              prismatic: "axis", "line_point";  tracker: "ref_joint1_id", "ref_joint2_id", "distance",
                              "angle"}, ...],
     "links": [{"id", "type": "ground" | "driver" | "link" | "arc_driver", "joints": [joint ids],
                driver: "motor_joint", "angular_velocity" (rad per step), "initial_angle"}, ...],
     "ground": the ground link's id}

As a diffchain mechanism (:class:`diffchain.MechanismBuilder`, natural coordinates): a ground joint is a ground
point, a revolute joint a moving point, a prismatic joint a point on the fixed line through ``line_point`` along
``axis``; a link of two joints is a uniform bar between them, a link of k > 2 joints a rigid truss of 2k - 3 uniform
bars (its first joint to each other joint, and each joint after the first to the next); a driver link is a bar about
its ground joint with a motor (``crank="motor"``) or its angle prescribed as pylinkage turns it, ``initial_angle +
angular_velocity * t / seconds_per_step`` (``crank="driven"``); a tracker joint is a point fixed in the bar between
its two reference joints. pylinkage has no masses: every bar gets ``mass_per_length`` times its length, with its
centre of mass at its middle and the inertia of a uniform bar.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any

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


def from_pylinkage(source: str | os.PathLike[str] | dict, *, mass_per_length: float = 1.0, g: float = 9.81,
                   crank: str = "motor", seconds_per_step: float = 1.0,
                   dtype: DTypeLike = jnp.float64) -> tuple[Model, State]:
    """(the mechanism, its State at the drawn positions at rest) of a pylinkage mechanism file (module docstring):
    ``source`` is the path of the JSON file that ``pylinkage.mechanism.mechanism_to_json`` writes, or the dictionary
    of ``mechanism_to_dict``.

    ``mass_per_length`` (kg/m) gives every bar its mass; ``g`` the gravity along -y. ``crank="motor"``: each driver
    link has a motor (``Control(tau=(n_drivers,))``, in the order of the file's links); ``crank="driven"``: its angle
    follows pylinkage's rotation, ``initial_angle + angular_velocity * t / seconds_per_step`` (a kinematic driver).
    The point names are the joints' ids, the bodies' names the links' ids (a truss's bars ``"{id}.{k}"``).

    Entries diffchain cannot read raise :class:`diffchain.FileFormatError` with their JSON path
    (``links[2].joints[1]: unknown joint "C"``), also the kinds it does not import (an arc driver, a tracker whose
    reference joints are no bar's ends).
    """
    if isinstance(source, dict):
        doc = source
    else:
        try:
            with open(source, encoding="utf-8") as f:
                doc = json.load(f)
        except json.JSONDecodeError as e:
            raise FileFormatError("", f"not JSON: {e}") from None
    for name, v in (("mass_per_length", mass_per_length), ("seconds_per_step", seconds_per_step)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v > 0 and math.isfinite(v)):
            raise ValueError(f"from_pylinkage: {name} must be a finite number > 0, got {v!r}")
    if crank not in ("motor", "driven"):
        raise ValueError(f"from_pylinkage: crank must be 'motor' or 'driven', got {crank!r}")
    if not (isinstance(doc, dict) and isinstance(doc.get("joints"), list) and isinstance(doc.get("links"), list)):
        raise FileFormatError("", "not a pylinkage mechanism: expected an object with lists 'joints' and 'links' "
                                  "(pylinkage.mechanism.mechanism_to_json)")
    mb = MechanismBuilder(g=g)
    kinds, trackers = {}, []
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
            continue
        mb.point(jid, xy)
        if kind == "prismatic":
            axis = _pair(j.get("axis", [1.0, 0.0]), f"{p}.axis")
            if not np.linalg.norm(axis) > 0:
                raise FileFormatError(f"{p}.axis", "expected a nonzero direction, got [0, 0]")
            through = _pair(j.get("line_point", [0.0, 0.0]), f"{p}.line_point")
            rail = (mb.ground(f"{jid}.rail0", through), mb.ground(f"{jid}.rail1", through + axis / np.linalg.norm(axis)))
            mb.slider(f"{jid}.slide", jid, *rail)

    ends, n_drivers = {}, 0  # (joint, joint) -> the bar between them
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
        pairs = [(joints[0], jid) for jid in joints[1:]] + list(zip(joints[1:-1], joints[2:]))
        for b, (a, c) in enumerate(pairs):
            name = lid if len(pairs) == 1 else f"{lid}.{b}"
            L = float(np.linalg.norm(mb.pos[mb._idx(c)] - mb.pos[mb._idx(a)]))
            if not L > 0:
                raise FileFormatError(f"{p}.joints", f"joints {a!r} and {c!r} coincide: a bar needs a length")
            mass = mass_per_length * L
            mb.body(name, a, c, mass=mass, inertia=mass * L**2 / 12, length=L)
            ends[(a, c)] = name
        if kind == "driver":
            n_drivers += 1
            if crank == "motor":
                mb.motor(f"{lid}.motor", "ground", lid)
            else:
                omega = _number(link.get("angular_velocity", 2 * math.pi / 360), f"{p}.angular_velocity")
                theta0 = _number(link.get("initial_angle", 0.0), f"{p}.initial_angle")
                mb.drive(f"{lid}.drive", "angle", joints, Polynomial((theta0, omega / seconds_per_step)))

    for k, j in trackers:
        p = f"joints[{k}]"
        a, b = j.get("ref_joint1_id"), j.get("ref_joint2_id")
        d, angle = _number(j.get("distance", 0.0), f"{p}.distance"), _number(j.get("angle", 0.0), f"{p}.angle")
        local = d * np.asarray([math.cos(angle), math.sin(angle)])
        if (a, b) in ends:
            mb.attach(j["id"], ends[(a, b)], local)
        elif (b, a) in ends:  # in the bar's frame from b to a: a point at p_a + R(angle) d e_(a->b)
            L = float(np.linalg.norm(mb.pos[mb._idx(a)] - mb.pos[mb._idx(b)]))
            mb.attach(j["id"], ends[(b, a)], (L - local[0], -local[1]))
        else:
            raise FileFormatError(p, f"a tracker whose reference joints {_got(a)}, {_got(b)} are not the two ends of "
                                     "one bar is not imported")
    return mb.build(dtype)
