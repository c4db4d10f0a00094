"""Classic mechanisms, built with :class:`~diffchain.MechanismBuilder`."""
from __future__ import annotations

import jax.numpy as jnp

from .._model.builder import MechanismBuilder


def four_bar(stop=None, *, motor=True, g=9.81, dtype=jnp.float64):
    """A crank-rocker four-bar linkage: ``(mechanism, state)``, the state at the drawn positions, at rest.

    Ground pivots A0 = (0, 0) and B0 = (2, 0); crank A0-A (1 m, 1 kg, inertia 0.1 kg m^2 about its centre), coupler A-B
    (1.80 m, 2 kg, 0.5) with the point C attached 1 m along it and 0.8 m to its right (below it as drawn), rocker B0-B
    (1.43 m, 1 kg, 0.2); drawn with A = (0.6, 0.8), B = (2.3, 1.4). Rigid bodies with their mass at the middle of each
    link; gravity ``g`` along -y.

    ``motor``: a motor "drive" between the ground and the crank (``Control(tau=(1,))``, counter-clockwise positive).
    ``stop``: an angle stop "stop" of the rocker against the ground, its angle >= ``stop`` (rad; drawn at 1.36), for
    :func:`~diffchain.event_rollout`; None: none. Its points, by name (``mechanism.point_names``, e.g. for the contact
    points of :class:`~diffchain.Events`): "A0", "B0", "A", "B", "C".
    """
    b = MechanismBuilder(g=g)
    b.ground("A0", (0.0, 0.0)), b.ground("B0", (2.0, 0.0))
    b.point("A", (0.6, 0.8)), b.point("B", (2.3, 1.4))
    b.body("crank", "A0", "A", mass=1.0, inertia=0.1)
    b.body("coupler", "A", "B", mass=2.0, inertia=0.5)
    b.body("rocker", "B0", "B", mass=1.0, inertia=0.2)
    b.attach("C", "coupler", (1.0, -0.8))
    if motor:
        b.motor("drive", "ground", "crank")
    if stop is not None:
        b.limit("stop", "ground", "rocker", lo=stop)
    return b.build(dtype=dtype)
