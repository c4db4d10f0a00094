"""The model file format: a :class:`~diffchain.Model` (and optionally its :class:`~diffchain.Events`) as a small JSON
document, :func:`save` and :func:`load`.

The document is the model's own fields: every kind of the model (its bodies, distance rows, joints, drivers, point
kinds, force kinds) is an object ``{"type": <kind>, <field>: <value>, ...}`` with the fields of its class, so that a
loaded model is the same pytree as the saved one (equal arrays, dtypes and static fields: it compiles to the same
program and simulates bit for bit the same). :data:`KINDS` lists the kinds, their fields and what each field means;
the JSON Schema shipped in ``diffchain/_io/schema/`` is generated from it (:func:`schema`).

Arrays are nested lists of numbers (the shape is the nesting; an empty array of two or more dimensions is written
``{"shape": [0, 4]}``). Floats are written as the shortest decimal that reads back to the same binary number (Python's
``repr``), so they round-trip exactly; the file records the model's float and index dtypes. JSON has no infinity:
an angle stop without a bound on one side is written ``"-inf"`` or ``"inf"``.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from typing import NamedTuple

import jax
import numpy as np

from .._constraints.kinds import Coincide, Distance, Driver, OnLine, PointKinds, Polynomial, Rod
from .._events.state import Events
from .._kinds.torsion import TorsionalSprings
from .._model.checks import InputError, describe
from .._model.host import array
from .._model.model import Bodies, Model

FORMAT = "diffchain.model"
FORMAT_VERSION = 1
UNITS = {"length": "m", "mass": "kg", "time": "s", "angle": "rad", "force": "N"}
SCHEMA_FILE = os.path.join(os.path.dirname(__file__), "schema", f"model-v{FORMAT_VERSION}.schema.json")


class FileFormatError(InputError):
    """A model or trajectory file that diffchain cannot read: not JSON (or not a ``.npz``), another format, a newer
    ``format_version``, or an entry of the wrong type or shape. The message starts with the entry's JSON path (e.g.
    ``model.bodies.mass[2]: expected a finite number, got "abc"``), also in :attr:`path`. An
    :class:`diffchain.InputError` (and so a ``ValueError``)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


FileFormatError.__module__ = "diffchain"


# -- the kinds and their fields ---------------------------------------------------------------------------------------
class Arr(NamedTuple):
    """An array field: ``category`` "float" (finite numbers in the model's float dtype), "limit" (numbers or
    "inf"/"-inf"), "index" (integers, the model's index dtype; ``world``: -2, -1 allowed, the world frame's points)
    or "bool"; ``shape``: per axis an int, a size name shared by the object's fields ("B", "2P": twice P), or None;
    size "P" is the model's number of points."""
    category: str
    shape: tuple
    doc: str
    optional: bool = False
    world: bool = False


class Mod(NamedTuple):
    """A field holding one kind (``types``), or a list of them (``many``)."""
    types: tuple
    doc: str
    optional: bool = False
    many: bool = False


class Static(NamedTuple):
    """A static (non-array) field: ``kind`` "names", "joint_rows", "int", "float", "driver_kind", "indices",
    "function"."""
    kind: str
    doc: str


class Kind(NamedTuple):
    cls: type
    doc: str
    fields: dict


_QUAD = "index quadruples (i, j, k, l): body k -> l against body i -> j, indices into the points (-2, -1: the " \
        "world frame's points (0, 0) and (1, 0))"

# the fields of a pair of points with a length (a chain's rods and the distance rows)
_PAIR_LENGTH = {"i": Arr("index", ("R",), "First point."), "j": Arr("index", ("R",), "Second point."),
                "L": Arr("float", ("R",), "Length, m.")}
KINDS = {
    "Model": Kind(Model, "A planar model in natural coordinates: points, their mass, constraints and forces "
                         "(diffchain.Model; built by diffchain.Chain or diffchain.MechanismBuilder).", {
        "W": Arr("float", ("2P", "2N"), "The points as an affine map of the N coordinate points q: P = W q + offset "
                                        "(null: the points are the coordinates, a chain).", optional=True),
        "offset": Arr("float", ("2P",), "The map's offset in m (null with W null).", optional=True),
        "m": Arr("float", ("P",), "Point masses in kg, one per point."),
        "bodies": Mod(("Bodies",), "Rigid bodies with distributed mass (null: none).", optional=True),
        "g": Arr("float", (), "Gravitational acceleration along -y, m/s^2."),
        "dist": Mod(("Rod", "Distance"), "Distance rows: a chain's rods (Rod) or a mechanism's bodies and rods "
                                         "(Distance)."),
        "coin": Mod(("Coincide",), "Coincidences: revolute joints and ground pins."),
        "line": Mod(("OnLine",), "Points on a line through two points: sliders, prismatic joints."),
        "drivers": Mod(("Driver",), "Rheonomic constraints, one row each.", many=True),
        "on": Arr("bool", (None,), "Which constraint rows are on (null: a chain's rods, on unless both ends are "
                                   "guided).", optional=True),
        "point_kinds": Mod(("PointKinds",), "Guided points and points on fixed lines (a chain's)."),
        "spring_idx": Arr("index", ("S", 2), "Linear springs: the point pairs."),
        "spring_k": Arr("float", ("S",), "Spring stiffness, N/m."),
        "spring_L0": Arr("float", ("S",), "Spring free length, m."),
        "spring_c": Arr("float", ("S",), "Linear damping along the spring, N s/m."),
        "motor_idx": Arr("index", (None, 4), "Motors (one torque each, in this order): " + _QUAD + ".", world=True),
        "damper_idx": Arr("index", ("D", 4), "Rotational dampers: " + _QUAD + ".", world=True),
        "damper_c": Arr("float", ("D",), "Rotational damping, N m s/rad."),
        "k_v": Arr("float", ("P",), "Quadratic air drag per point, force -k_v v |v| (null: none).", optional=True),
        "limit_idx": Arr("index", ("L", 4), "Angle stops: " + _QUAD + ".", world=True),
        "limit_lo": Arr("limit", ("L",), "Lower bound of each stop, rad (\"-inf\": none)."),
        "limit_hi": Arr("limit", ("L",), "Upper bound of each stop, rad (\"inf\": none)."),
        "forces": Mod(("TorsionalSprings",), "Force kinds.", many=True),
        "point_names": Static("names", "Names of the points (a mechanism's)."),
        "row_names": Static("names", "Names of the constraint rows (a mechanism's)."),
        "joint_rows": Static("joint_rows", "Each joint's name and its rows [first row, number of rows]."),
        "limit_names": Static("names", "Names of the angle stops."),
        "nominal_rank": Static("int", "The constraint Jacobian's rank at the drawn position (-1: not known)."),
    }),
    "Bodies": Kind(Bodies, "Rigid bodies between two base points i, j.", {
        "i": Arr("index", ("B",), "First base point."),
        "j": Arr("index", ("B",), "Second base point."),
        "mass": Arr("float", ("B",), "Mass, kg."),
        "com": Arr("float", ("B", 2), "Centre of mass (a, b) in m: a along i -> j, b to the left."),
        "inertia": Arr("float", ("B",), "Moment of inertia about the centre of mass, kg m^2."),
        "L": Arr("float", ("B",), "Length |p_j - p_i| in m (null: the model's first distance rows').", optional=True),
    }),
    "Rod": Kind(Rod, "A chain's rods: rows |p_j - p_i| - L.", _PAIR_LENGTH),
    "Distance": Kind(Distance, "Distance rows (|p_j - p_i|^2 - L^2) / (2 L): bodies' rigidity, massless rods.",
                     _PAIR_LENGTH),
    "Coincide": Kind(Coincide, "Coincidences p_i - p_j (revolute joints, pins).", {
        "i": Arr("index", ("C",), "First point."), "j": Arr("index", ("C",), "Second point.")}),
    "OnLine": Kind(OnLine, "Point i on the line through points a, b.", {
        "i": Arr("index", ("K",), "The point on the line."), "a": Arr("index", ("K",), "A point of the line."),
        "b": Arr("index", ("K",), "Another point of the line."),
        "L": Arr("float", ("K",), "|p_b - p_a| as drawn, m (the row's scale).")}),
    "Driver": Kind(Driver, "One rheonomic constraint row with a function f(t).", {
        "kind": Static("driver_kind", "distance, angle, relangle, x or y."),
        "idx": Static("indices", "Its points (2, 2, 4, 1, 1 of them)."),
        "f": Static("function", "f(t), a Polynomial."),
        "scale": Static("float", "The row's scale (1, |d|, |u||v| as drawn)."),
    }),
    "PointKinds": Kind(PointKinds, "Guided points and points on fixed lines {x : s.x = c} (the first G points).", {
        "guided": Arr("bool", ("G",), "Points with a prescribed acceleration (a fixed pin: zero)."),
        "slider": Arr("bool", ("G",), "Points on a fixed line."),
        "s": Arr("float", ("G", 2), "The lines' normals."),
        "c": Arr("float", ("G",), "The lines' offsets, m."),
    }),
    "TorsionalSprings": Kind(TorsionalSprings, "Torsional springs: torque -k wrap(theta - theta0) - c omega.", {
        "idx": Arr("index", ("K", 4), _QUAD[0].upper() + _QUAD[1:] + ".", world=True),
        "k": Arr("float", ("K",), "Stiffness, N m/rad."),
        "theta0": Arr("float", ("K",), "Rest angle, rad."),
        "c": Arr("float", ("K",), "Rotational damping, N m s/rad (null: none).", optional=True),
    }),
    "Events": Kind(Events, "Obstacle lines, angle limits and the budget of an event quantum (diffchain.Events).", {
        "z0": Arr("float", ("K", 2), "A point of each obstacle line, m."),
        "z": Arr("float", ("K", 2), "Each line's unit normal, towards the free side."),
        "contact": Arr("bool", ("F",), "Which features (points) can touch the obstacles."),
        "theta_min": Arr("limit", ("F",), "Lower angle limits, rad (\"-inf\": none)."),
        "theta_max": Arr("limit", ("F",), "Upper angle limits, rad (\"inf\": none)."),
        "threshold": Arr("float", (), "Halving threshold on the velocity error estimate, m/s."),
        "chatter_count": Arr("float", (), "Releases within the window that keep a constraint active."),
        "chatter_window": Arr("float", (), "The chatter window, in quanta."),
        "max_depth": Static("int", "At most this many halvings of a sub-quantum."),
        "slots": Static("int", "Solver calls per quantum."),
        "rare_share": Static("float", "Under vmap, the share of the batch on which a quantum's later slots run "
                                      "gathered (speed only)."),
    }),
}
_DRIVER_KINDS = ("distance", "angle", "relangle", "x", "y")
_TYPES = {k.cls: name for name, k in KINDS.items()}


# -- writing ----------------------------------------------------------------------------------------------------------
def _dtypes(model):
    return {"float": np.dtype(model.m.dtype), "index": np.dtype(model.motor_idx.dtype), "bool": np.dtype(bool)}


def _encode(obj, path, dtypes, types):
    name = _TYPES.get(type(obj))
    if name not in types:
        raise FileFormatError(path, f"a model file holds {' or '.join(types)} here, got {describe(obj)}")
    out = {"type": name}
    for field, spec in KINDS[name].fields.items():
        value, p = getattr(obj, field), f"{path}.{field}"
        if isinstance(spec, Static):
            out[field] = _encode_static(value, spec, p)
        elif value is None:
            if not spec.optional:
                raise FileFormatError(p, "missing (None)")
            out[field] = None
        elif isinstance(spec, Mod) and spec.many:
            out[field] = [_encode(v, f"{p}[{k}]", dtypes, spec.types) for k, v in enumerate(value)]
        elif isinstance(spec, Mod):
            out[field] = _encode(value, p, dtypes, spec.types)
        else:
            out[field] = _encode_array(value, spec, p, dtypes)
    return out


def _encode_array(value, spec, path, dtypes):
    if isinstance(value, jax.core.Tracer):
        raise FileFormatError(path, "a traced value (save a model outside jit, vmap and grad)")
    arr = np.asarray(value)
    want = dtypes["float" if spec.category == "limit" else spec.category]
    if arr.dtype != want:
        raise FileFormatError(path, f"dtype {arr.dtype}, but the model's {spec.category} arrays are {want} (a model "
                                    "file holds one float and one index dtype)")
    if spec.category in ("float", "limit"):
        bad = np.isnan(arr) | (np.isinf(arr) if spec.category == "float" else False)
        if np.any(bad):
            raise FileFormatError(path, f"{arr[bad][0]} at {np.argwhere(bad)[0].tolist()}: a model file holds finite "
                                        "numbers here")
    if arr.ndim > 1 and arr.shape[0] == 0:
        return {"shape": list(arr.shape)}
    data = arr.tolist()
    if spec.category == "limit":
        data = _map_nested(data, lambda v: "inf" if v == math.inf else "-inf" if v == -math.inf else v)
    return data


def _map_nested(data, f):
    return [_map_nested(d, f) for d in data] if isinstance(data, list) else f(data)


def _encode_static(value, spec, path):
    kind = spec.kind
    if kind == "names":
        return [str(v) for v in value]
    if kind == "joint_rows":
        return [[str(name), [int(r[0]), int(r[1])]] for name, r in value]
    if kind == "int":
        return int(value)
    if kind == "float":
        return float(value)
    if kind == "driver_kind":
        return str(value)
    if kind == "indices":
        return [int(i) for i in value]
    return {"type": "Polynomial", "coefficients": list(value.coefficients)}


def _driver_names(model):
    """The drivers' names (their rows' names; a model without names: their indices)."""
    first = model.dist.i.shape[0] + 2 * model.coin.i.shape[0] + model.line.i.shape[0]
    names = model.row_names
    return [repr(names[first + k]) if first + k < len(names) else str(k) for k in range(len(model.drivers))]


def document(model, events=None) -> dict:
    """The model file's document (a dict, :func:`save` writes it as JSON) of ``model`` and optional ``events``."""
    if not isinstance(model, Model):
        raise TypeError(f"save: model must be a diffchain.Model (a Chain, ... or MechanismBuilder(...).build()[0]), "
                        f"got {describe(model)}")
    if events is not None and not isinstance(events, Events):
        raise TypeError(f"save: events must be a diffchain.Events or None, got {describe(events)}")
    for k, (d, name) in enumerate(zip(model.drivers, _driver_names(model))):
        if not isinstance(d.f, Polynomial):
            raise FileFormatError(f"model.drivers[{k}].f", f"driver {name}: its f(t) is a Python "
                                  f"{type(d.f).__name__} ({getattr(d.f, '__name__', '?')}), which a file cannot hold; "
                                  "give MechanismBuilder.drive a diffchain.Polynomial (or a number)")
    dtypes = _dtypes(model)
    doc = {"format": FORMAT, "format_version": FORMAT_VERSION, "units": dict(UNITS),
           "dtype": dtypes["float"].name, "index_dtype": dtypes["index"].name,
           "model": _encode(model, "model", dtypes, ("Model",))}
    if events is not None:  # (Events take their own float dtype)
        doc["events_dtype"] = np.dtype(events.z0.dtype).name
        doc["events"] = _encode(events, "events", {**dtypes, "float": np.dtype(events.z0.dtype)}, ("Events",))
    from_document(doc)  # (what is written can be read: the same checks as load)
    return doc


def dumps(model, events=None) -> str:
    """The model file's text: one entry per line at the top levels, each array on one line."""
    return _layout(document(model, events))


def _layout(doc, indent=0):
    """JSON with the top levels and long objects broken over lines, arrays on one line each (floats by repr:
    exact)."""
    flat = json.dumps(doc, allow_nan=False, separators=(", ", ": "))
    if len(flat) + 2 * indent <= 100 and not (isinstance(doc, dict) and any(isinstance(v, (dict, list)) and v
                                                                           for v in doc.values()) and indent < 2):
        return flat
    if isinstance(doc, dict) and doc:
        pad = "  " * (indent + 1)
        items = [f"{pad}{json.dumps(k)}: {_layout(v, indent + 1)}" for k, v in doc.items()]
        return "{\n" + ",\n".join(items) + "\n" + "  " * indent + "}"
    if isinstance(doc, list) and any(isinstance(v, dict) for v in doc):
        pad = "  " * (indent + 1)
        return "[\n" + ",\n".join(pad + _layout(v, indent + 1) for v in doc) + "\n" + "  " * indent + "]"
    return flat


def save(model: Model, path: str | os.PathLike[str], *, events: Events | None = None) -> None:
    """Write ``model`` (a :class:`diffchain.Model`: a :func:`diffchain.Chain` or a mechanism of
    :class:`diffchain.MechanismBuilder`) to the JSON file ``path``; ``events``: its :class:`diffchain.Events` too
    (read back by :func:`diffchain.load_events`).

    The file holds the model's fields exactly (floats as the shortest decimals that read back to the same numbers, the
    float and index dtypes), so :func:`diffchain.load` returns the same model: equal arrays, the same static fields,
    the same compiled program and the same rollout bit for bit. Its format is documented in the guide's
    [Saving models and trajectories][saving-models-and-trajectories] and by the JSON Schema shipped with the package
    (``diffchain/_io/schema/model-v1.schema.json``). Drivers must have a :class:`diffchain.Polynomial` as their
    function of time (a constant driver has one); a model that a file cannot hold (another driver function, a traced
    model, NaNs) raises :class:`diffchain.FileFormatError` naming the entry."""
    text = dumps(model, events)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")


# -- reading ----------------------------------------------------------------------------------------------------------
def _got(value) -> str:
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else \
        ("an object" if isinstance(value, dict) else "a list")
    return text if len(text) <= 40 else text[:37] + "..."


def _defaults(cls):
    return {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}


def _decode(value, path, ctx, types):
    if not isinstance(value, dict):
        raise FileFormatError(path, f"expected an object ({' or '.join(types)}), got {_got(value)}")
    name = value.get("type")
    if name not in types:
        raise FileFormatError(path + ".type", f"expected {' or '.join(map(repr, types))}, got {_got(name)}")
    kind = KINDS[name]
    unknown = [k for k in value if k != "type" and k not in kind.fields]
    if unknown:
        raise FileFormatError(f"{path}.{unknown[0]}", f"unknown field (a {name} has {', '.join(kind.fields)})")
    defaults, dims, fields = _defaults(kind.cls), {}, {}
    for field, spec in kind.fields.items():
        p = f"{path}.{field}"
        optional = isinstance(spec, (Arr, Mod)) and spec.optional
        if field not in value and (optional or field in defaults):
            fields[field] = defaults.get(field)
            continue
        if field not in value or (value[field] is None and not optional):
            raise FileFormatError(p, "missing" if field not in value else "expected a value, got null")
        if value[field] is None:
            fields[field] = None
            continue
        raw = value[field]
        if isinstance(spec, Static):
            fields[field] = _decode_static(raw, spec, p, ctx)
        elif isinstance(spec, Mod) and spec.many:
            if not isinstance(raw, list):
                raise FileFormatError(p, f"expected a list of {' or '.join(spec.types)}, got {_got(raw)}")
            fields[field] = tuple(_decode(v, f"{p}[{k}]", ctx, spec.types) for k, v in enumerate(raw))
        elif isinstance(spec, Mod):
            fields[field] = _decode(raw, p, ctx, spec.types)
        else:
            fields[field] = _decode_array(raw, spec, p, ctx, dims)
    obj = object.__new__(kind.cls)
    for field, v in fields.items():
        object.__setattr__(obj, field, v)
    check = getattr(obj, "__check_init__", None)
    if check is not None:
        try:
            check()
        except ValueError as e:
            raise FileFormatError(path, str(e)) from None
    return obj


_ELEMENT = {"float": "a finite number", "limit": 'a number, "inf" or "-inf"', "index": "an integer",
            "bool": "true or false"}


def _element(v, category, path, ctx, world):
    if category == "bool":
        ok = isinstance(v, bool)
    elif category == "index":
        ok = isinstance(v, int) and not isinstance(v, bool)
        if ok and "P" in ctx and not (-2 if world else 0) <= v < ctx["P"]:
            lo = "-2 (the world frame's points -2, -1)" if world else "0"
            raise FileFormatError(path, f"expected a point index from {lo} to P - 1 = {ctx['P'] - 1}, got {v}")
    elif category == "limit" and v in ("inf", "-inf"):
        return math.inf if v == "inf" else -math.inf
    else:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if not ok:
        raise FileFormatError(path, f"expected {_ELEMENT[category]}, got {_got(v)}")
    return v


def _nested(raw, path, category, ctx, world, flat):
    """The shape of the nested lists ``raw``, its elements appended to ``flat`` (checked, with their paths)."""
    if not isinstance(raw, list):
        flat.append(_element(raw, category, path, ctx, world))
        return ()
    shapes = [_nested(v, f"{path}[{k}]", category, ctx, world, flat) for k, v in enumerate(raw)]
    for k, s in enumerate(shapes):
        if s != shapes[0]:
            raise FileFormatError(f"{path}[{k}]", f"expected an entry of shape {shapes[0]} as {path}[0], got {s}")
    return (len(raw),) + (shapes[0] if shapes else ())


def _decode_array(raw, spec, path, ctx, dims):
    dtype = ctx["dtypes"]["float" if spec.category == "limit" else spec.category]
    if isinstance(raw, dict):
        shape = raw.get("shape")
        if set(raw) != {"shape"} or not (isinstance(shape, list) and all(isinstance(d, int) and not
                                                                         isinstance(d, bool) and d >= 0 for d in shape)
                                         and 0 in shape):
            raise FileFormatError(path, 'expected an array (nested lists) or an empty one, {"shape": [0, ...]}, got '
                                        + _got(raw))
        arr = np.zeros(shape, dtype)
    else:
        flat = []
        shape = _nested(raw, path, spec.category, ctx, spec.world, flat)
        arr = np.asarray(flat, dtype).reshape(shape)
    if arr.ndim != len(spec.shape):
        raise FileFormatError(path, f"expected an array of {len(spec.shape)} dimension(s) {_show_shape(spec.shape)}, "
                                    f"got shape {list(arr.shape)}")
    for axis, (d, s) in enumerate(zip(arr.shape, spec.shape)):
        if s is None:
            continue
        if isinstance(s, int):
            if d != s:
                raise FileFormatError(path, f"expected {s} entries along axis {axis}, got shape {list(arr.shape)}")
            continue
        factor, size = re.fullmatch(r"(\d*)(\w+)", s).groups()
        factor = int(factor or 1)
        scope = ctx if size == "P" else dims
        if d % factor or (size in scope and scope[size] * factor != d):
            want = f"{factor} x {scope[size]}" if size in scope else f"a multiple of {factor}"
            raise FileFormatError(path, f"expected {want} entries along axis {axis} ({s}, as the other fields), got "
                                        f"shape {list(arr.shape)}")
        scope.setdefault(size, d // factor)
    return array(arr, dtype)


def _show_shape(shape):
    return "(" + ", ".join("*" if s is None else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def _ints(raw, path, what):
    if not (isinstance(raw, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in raw)):
        raise FileFormatError(path, f"expected {what}, got {_got(raw)}")
    return tuple(raw)


def _decode_static(raw, spec, path, ctx):
    kind = spec.kind
    if kind == "names":
        if not (isinstance(raw, list) and all(isinstance(v, str) for v in raw)):
            raise FileFormatError(path, f"expected a list of names (strings), got {_got(raw)}")
        return tuple(raw)
    if kind == "joint_rows":
        if not isinstance(raw, list):
            raise FileFormatError(path, f"expected a list of [name, [first row, rows]], got {_got(raw)}")
        for k, r in enumerate(raw):
            if not (isinstance(r, list) and len(r) == 2 and isinstance(r[0], str)):
                raise FileFormatError(f"{path}[{k}]", f"expected [name, [first row, rows]], got {_got(r)}")
            if len(_ints(r[1], f"{path}[{k}][1]", "[first row, rows] (two integers)")) != 2:
                raise FileFormatError(f"{path}[{k}][1]", "expected [first row, rows] (two integers)")
        return tuple((r[0], tuple(r[1])) for r in raw)
    if kind == "int":
        if not isinstance(raw, int) or isinstance(raw, bool):
            raise FileFormatError(path, f"expected an integer, got {_got(raw)}")
        return raw
    if kind == "float":
        return float(_element(raw, "float", path, ctx, False))
    if kind == "driver_kind":
        if raw not in _DRIVER_KINDS:
            raise FileFormatError(path, f"expected one of {', '.join(_DRIVER_KINDS)}, got {_got(raw)}")
        return raw
    if kind == "indices":
        idx = _ints(raw, path, "a list of point indices")
        for k, v in enumerate(idx):
            _element(v, "index", f"{path}[{k}]", ctx, False)
        return idx
    if not (isinstance(raw, dict) and raw.get("type") == "Polynomial" and set(raw) == {"type", "coefficients"}):
        raise FileFormatError(path, f'expected {{"type": "Polynomial", "coefficients": [...]}}, got {_got(raw)}')
    c = raw["coefficients"]
    if not (isinstance(c, list) and c):
        raise FileFormatError(path + ".coefficients", f"expected a list of one or more numbers, got {_got(c)}")
    return Polynomial(tuple(_element(v, "float", f"{path}.coefficients[{k}]", ctx, False) for k, v in enumerate(c)))


def _check_header(doc, fmt, what):
    if not isinstance(doc, dict):
        raise FileFormatError("", f"expected a {what} (a JSON object), got {_got(doc)}")
    if doc.get("format") != fmt:
        raise FileFormatError("format", f"expected {fmt!r} (a {what}), got {_got(doc.get('format'))}")
    version = doc.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise FileFormatError("format_version", f"expected a positive integer, got {_got(version)}")
    if version > FORMAT_VERSION:
        raise FileFormatError("format_version", f"the file is of format version {version}, newer than this diffchain "
                                                f"reads ({FORMAT_VERSION}): update diffchain to read it")


def from_document(doc) -> tuple:
    """(model, events or None) from a model file's document (:func:`document`)."""
    _check_header(doc, FORMAT, "diffchain model file")
    known = {"format", "format_version", "units", "dtype", "index_dtype", "model", "events_dtype", "events"}
    unknown = [k for k in doc if k not in known]
    if unknown:
        raise FileFormatError(unknown[0], f"unknown entry (a model file has {', '.join(sorted(known))})")
    units = doc.get("units", UNITS)
    if not isinstance(units, dict):
        raise FileFormatError("units", f"expected an object of units, got {_got(units)}")
    for k, v in units.items():
        if UNITS.get(k) != v:
            raise FileFormatError(f"units.{k}", f"diffchain models are in SI units ({UNITS}), got {_got(v)}")
    dtypes = {"bool": np.dtype(bool)}
    for key, cat, allowed in (("dtype", "float", ("float32", "float64")), ("index_dtype", "index", ("int32", "int64")),
                              ("events_dtype", "events", ("float32", "float64"))):
        name = doc.get(key, doc.get("dtype") if key == "events_dtype" else None)
        if name not in allowed:
            raise FileFormatError(key, f"expected {' or '.join(map(repr, allowed))}, got {_got(name)}")
        dtypes[cat] = np.dtype(name)
        if cat != "index" and jax.dtypes.canonicalize_dtype(dtypes[cat]) != dtypes[cat]:
            raise FileFormatError(key, f"the file holds {name} arrays, which this process's JAX does not hold: "
                                       "enable 64-bit mode first, jax.config.update('jax_enable_x64', True)")
    dtypes["index"] = np.dtype(jax.dtypes.canonicalize_dtype(dtypes["index"]))
    if "model" not in doc:
        raise FileFormatError("model", "missing")
    ctx = {"dtypes": dtypes}
    model = _decode(doc["model"], "model", ctx, ("Model",))
    ctx["dtypes"] = {**dtypes, "float": dtypes.pop("events")}
    events = None if doc.get("events") is None else _decode(doc["events"], "events", ctx, ("Events",))
    if events is not None and events.n != model.n_features:
        raise FileFormatError("events.contact", f"expected one entry per feature of the model, {model.n_features}, "
                                                f"got {events.n}")
    return model, events


def loads(text: str) -> tuple:
    """(model, events or None) from a model file's text."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise FileFormatError("", f"not JSON: {e}") from None
    return from_document(doc)


def _read(path):
    with open(path, encoding="utf-8") as f:
        return loads(f.read())


def load(path: str | os.PathLike[str]) -> Model:
    """The :class:`diffchain.Model` saved in the JSON file ``path`` (:func:`diffchain.save`): the same model, equal
    arrays and dtypes, the same static fields, the same rollout bit for bit. A file that is not a model file, one of a
    newer ``format_version``, or an entry of the wrong type or shape raises :class:`diffchain.FileFormatError`, whose
    message starts with the entry's JSON path (``model.bodies.mass[2]: expected a finite number, got "abc"``). A
    float64 model needs JAX's 64-bit mode."""
    return _read(path)[0]


def load_events(path: str | os.PathLike[str]) -> Events:
    """The :class:`diffchain.Events` saved with a model in the file ``path`` (``diffchain.save(model, path,
    events=events)``); :class:`diffchain.FileFormatError` if it holds none."""
    events = _read(path)[1]
    if events is None:
        raise FileFormatError("events", "the file holds no events (save them with diffchain.save(model, path, "
                                        "events=events))")
    return events


# -- the JSON Schema --------------------------------------------------------------------------------------------------
_ELEMENT_SCHEMA = {"float": {"type": "number"}, "index": {"type": "integer"}, "bool": {"type": "boolean"},
                   "limit": {"anyOf": [{"type": "number"}, {"enum": ["inf", "-inf"]}]}}


def _field_schema(spec):
    if isinstance(spec, Static):
        s = {"names": {"type": "array", "items": {"type": "string"}},
             "joint_rows": {"type": "array", "items": {"type": "array", "prefixItems": [
                 {"type": "string"}, {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}],
                 "minItems": 2, "maxItems": 2}},
             "int": {"type": "integer"}, "float": {"type": "number"}, "driver_kind": {"enum": list(_DRIVER_KINDS)},
             "indices": {"type": "array", "items": {"type": "integer"}},
             "function": {"$ref": "#/$defs/Polynomial"}}[spec.kind]
        return {"description": spec.doc, **s}
    if isinstance(spec, Mod):
        one = {"$ref": f"#/$defs/{spec.types[0]}"} if len(spec.types) == 1 else \
            {"anyOf": [{"$ref": f"#/$defs/{t}"} for t in spec.types]}
        s = {"type": "array", "items": one} if spec.many else one
    else:
        s = {"anyOf": [{"$ref": f"#/$defs/{spec.category}_array"}, {"$ref": "#/$defs/empty_array"}]}
        spec = spec._replace(doc=f"{spec.doc} Shape {_show_shape(spec.shape)}.")
    if spec.optional:
        s = {"anyOf": [s, {"type": "null"}]}
    return {"description": spec.doc, **s}


def schema() -> dict:
    """The JSON Schema of a model file (draft 2020-12), generated from :data:`KINDS` (the file shipped in
    ``diffchain/_io/schema/`` is this)."""
    defs = {}
    for cat, element in _ELEMENT_SCHEMA.items():
        defs[f"{cat}_array"] = {"description": f"An array of {_ELEMENT[cat]}s as nested lists (a scalar: the number).",
                                "anyOf": [element, {"type": "array", "items": {"$ref": f"#/$defs/{cat}_array"}}]}
    defs["empty_array"] = {"description": "An empty array of two or more dimensions, by its shape.", "type": "object",
                           "properties": {"shape": {"type": "array", "items": {"type": "integer", "minimum": 0}}},
                           "required": ["shape"], "additionalProperties": False}
    defs["Polynomial"] = {"description": "f(t) = c_0 + c_1 t + ... + c_k t^k (diffchain.Polynomial).",
                          "type": "object", "properties": {"type": {"const": "Polynomial"}, "coefficients": {
                              "type": "array", "items": {"type": "number"}, "minItems": 1}},
                          "required": ["type", "coefficients"], "additionalProperties": False}
    for name, kind in KINDS.items():
        defaults = _defaults(kind.cls)
        required = [f for f, spec in kind.fields.items() if f not in defaults and not getattr(spec, "optional", False)]
        defs[name] = {"description": kind.doc, "type": "object",
                      "properties": {"type": {"const": name},
                                     **{f: _field_schema(spec) for f, spec in kind.fields.items()}},
                      "required": ["type"] + required, "additionalProperties": False}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"diffchain model file, format version {FORMAT_VERSION}",
        "description": "A diffchain.Model (and optionally its diffchain.Events), written by diffchain.save and read by "
                       "diffchain.load. Floats are written exactly (shortest round-trip decimals); units are SI.",
        "type": "object",
        "properties": {
            "format": {"const": FORMAT},
            "format_version": {"description": "The format's version; a reader refuses a newer one.", "type": "integer",
                               "minimum": 1},
            "units": {"type": "object", "properties": {k: {"const": v} for k, v in UNITS.items()},
                      "additionalProperties": False},
            "dtype": {"description": "The model's float dtype.", "enum": ["float32", "float64"]},
            "index_dtype": {"description": "The model's index dtype.", "enum": ["int32", "int64"]},
            "events_dtype": {"description": "The events' float dtype (default: dtype).", "enum": ["float32", "float64"]},
            "model": {"$ref": "#/$defs/Model"},
            "events": {"anyOf": [{"$ref": "#/$defs/Events"}, {"type": "null"}]},
        },
        "required": ["format", "format_version", "dtype", "index_dtype", "model"],
        "additionalProperties": False,
        "$defs": defs,
    }


def write_schema(path=SCHEMA_FILE):
    """(Re)write the shipped schema file from :data:`KINDS` (after a change of the format: a new kind or field, which
    needs a new ``FORMAT_VERSION`` where old files would no longer read)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(schema(), indent=2) + "\n")
