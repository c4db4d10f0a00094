"""Trajectories with their model in one ``.npz`` file: :func:`save_trajectory`, :func:`load_trajectory`.

The file is a NumPy ``.npz`` archive (read with ``numpy.load``, no pickles): ``model.json``, the model file's text
(:func:`diffchain.save`, with the events if given), ``header``, a JSON text that describes the pytrees (each
:class:`~diffchain.State`, :class:`~diffchain.Control`, :class:`~diffchain.EventState`,
:class:`~diffchain.StepReport` as ``{"type": ..., <field>: {"array": <entry>} or null or a nested pytree}``), and one
entry per array, named by its path (``states.x``, ``controls.tau``, ...), in its own dtype and shape.
"""
from __future__ import annotations

import dataclasses
import json
import os
import zipfile
from typing import NamedTuple

import jax
import numpy as np
from jax.typing import ArrayLike

from .._events.state import EventState, Events, StepReport
from .._model.checks import describe
from .._model.host import array
from .._model.model import Model
from .._state import Control, State
from .format import FORMAT_VERSION, FileFormatError, _check_header, _got, dumps, loads

FORMAT = "diffchain.trajectory"
_TREES = {cls.__name__: cls for cls in (State, Control, EventState, StepReport)}


class Trajectory(NamedTuple):
    """What :func:`diffchain.load_trajectory` returns: the ``model``, the ``states`` (a :class:`diffchain.State` or
    :class:`diffchain.EventState` with leading time (and batch) axes), the ``controls`` (a :class:`diffchain.Control`
    or None), the event rollout's ``events_log`` (its :class:`diffchain.StepReport`s, or None), its ``events``
    (:class:`diffchain.Events` or None) and the time step ``dt`` (or None), as they were saved."""
    model: Model
    states: State | EventState
    controls: Control | None
    events_log: StepReport | None
    events: Events | None
    dt: jax.Array | None


def _encode(tree, path, arrays, types):
    if tree is None:
        return None
    if isinstance(tree, (jax.Array, np.ndarray)):
        if isinstance(tree, jax.core.Tracer):
            raise FileFormatError(path, "a traced value (save a trajectory outside jit, vmap and grad)")
        arrays[path] = np.asarray(tree)
        return {"array": path}
    name = type(tree).__name__
    if name not in types or _TREES[name] is not type(tree):
        raise TypeError(f"save_trajectory: {path} must be a diffchain {' or '.join(types)}, got {describe(tree)}")
    out = {"type": name}
    for f in dataclasses.fields(tree):
        out[f.name] = _encode(getattr(tree, f.name), f"{path}.{f.name}", arrays, tuple(_TREES))
    return out


def save_trajectory(path: str | os.PathLike[str], model: Model, states: State | EventState,
                    controls: Control | None = None, events_log: StepReport | None = None, *,
                    events: Events | None = None, dt: ArrayLike | None = None) -> None:
    """Write a trajectory and its model to the ``.npz`` file ``path``: ``states`` (a :class:`diffchain.State` or
    :class:`diffchain.EventState` with leading time, and batch, axes: what :func:`diffchain.rollout` or
    :func:`diffchain.event_rollout` return), optional ``controls`` (a stacked :class:`diffchain.Control`), the event
    rollout's ``events_log`` (its stacked :class:`diffchain.StepReport`) and ``events`` (its
    :class:`diffchain.Events`), and the time step ``dt``.

    Every array is stored as it is (dtype and shape), the model as its model file's text
    (:func:`diffchain.save`), so :func:`diffchain.load_trajectory` gives them back exactly."""
    if not isinstance(states, (State, EventState)):
        raise TypeError(f"save_trajectory: states must be a diffchain.State or EventState (with a leading time axis), "
                        f"got {describe(states)}")
    arrays = {}
    header = {"format": FORMAT, "format_version": FORMAT_VERSION,
              "states": _encode(states, "states", arrays, ("State", "EventState")),
              "controls": _encode(controls, "controls", arrays, ("Control",)),
              "events_log": _encode(events_log, "events_log", arrays, ("StepReport",)),
              "dt": None if dt is None else _encode(np.asarray(dt), "dt", arrays, ())}
    arrays["model.json"] = np.asarray(dumps(model, events))
    arrays["header"] = np.asarray(json.dumps(header))
    with open(path, "wb") as f:  # (a file object: numpy adds no ".npz" to the name)
        np.savez(f, **arrays)


def _decode(value, path, z, types):
    if value is None:
        return None
    if not isinstance(value, dict):
        raise FileFormatError(path, f"expected an object, got {_got(value)}")
    if set(value) == {"array"}:
        key = value["array"]
        if not isinstance(key, str) or key not in z.files:
            raise FileFormatError(path, f"the archive has no array {_got(key)}")
        return array(z[key])
    name = value.get("type")
    if name not in types:
        raise FileFormatError(path + ".type", f"expected {' or '.join(map(repr, types))}, got {_got(name)}")
    cls = _TREES[name]
    names = [f.name for f in dataclasses.fields(cls)]
    if sorted(value) != sorted(names + ["type"]):
        odd = sorted(set(value) ^ set(names + ["type"]))[0]
        raise FileFormatError(f"{path}.{odd}", f"{'unknown' if odd in value else 'missing'} field (a {name} has "
                                               f"{', '.join(names)})")
    obj = object.__new__(cls)
    for f in names:
        object.__setattr__(obj, f, _decode(value[f], f"{path}.{f}", z, tuple(_TREES)))
    return obj


def load_trajectory(path: str | os.PathLike[str]) -> Trajectory:
    """The :class:`diffchain.Trajectory` saved in the ``.npz`` file ``path`` (:func:`diffchain.save_trajectory`): the
    model, states, controls, event log, events and dt, exactly as saved. A file that is not one raises
    :class:`diffchain.FileFormatError` naming the entry."""
    try:
        z = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise FileFormatError("", f"not a .npz archive: {e}") from None
    with z:
        for key in ("header", "model.json"):
            if key not in z.files:
                raise FileFormatError(key, "missing: not a diffchain trajectory file")
        try:
            header = json.loads(str(z["header"][()]))
        except json.JSONDecodeError as e:
            raise FileFormatError("header", f"not JSON: {e}") from None
        _check_header(header, FORMAT, "diffchain trajectory file")
        try:
            model, events = loads(str(z["model.json"][()]))
        except FileFormatError as e:
            raise FileFormatError("model.json", str(e)) from None
        if header.get("states") is None:
            raise FileFormatError("states", "missing")
        out = {k: _decode(header.get(k), k, z, t) for k, t in
               (("states", ("State", "EventState")), ("controls", ("Control",)), ("events_log", ("StepReport",)))}
        dt = header.get("dt")
        dt = None if dt is None else _decode(dt, "dt", z, ())
    return Trajectory(model, out["states"], out["controls"], out["events_log"], events, dt)
