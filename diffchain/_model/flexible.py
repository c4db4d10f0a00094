"""Flexible links as rigid finite elements (seed 004 §1.7: rigid sub-bodies joined by concentrated compliances, the
"RFE" method): the one division of a uniform Euler–Bernoulli beam that both builders use,
:meth:`MechanismBuilder.flexible_link` and :func:`diffchain.systems.flexible_cantilever`.

The beam of length L is cut into n equal primary segments of length h = L / n. Each segment's bending compliance is
concentrated in one torsional spring at its middle, of stiffness k = E I / h (the moment E I kappa over the segment
turns it by kappa h), with an optional rotational damper c = eta I / h (a Kelvin–Voigt material of viscosity eta:
stiffness-proportional damping c = (eta / E) k, the same material for every n). The springs cut the beam into
n + 1 rigid elements: two end elements of length h / 2 and n - 1 inner ones of length h. Each element is a uniform
rigid bar: mass rho_A times its length, centre of mass at its middle, moment of inertia m len^2 / 12 about it; so
every piece of the beam's mass belongs to exactly one element (the kinetic energy is exact for a piecewise-rigid
motion).

Why the half-length end elements: the springs then sit at the midpoints of the primary segments, and the beam's
bending energy (1/2) int E I kappa^2 dx becomes its midpoint rule, a second-order approximation. A cantilever with a
tip load P, for example, deflects by sum_i (P h / E I) (L - x_i)^2 with x_i = (i - 1/2) h, the midpoint rule of
P L^3 / (3 E I): exactly P L^3 / (3 E I) (1 - 1 / (4 n^2)). Springs at the ends of equal elements (the first one at
the clamp) would be a one-sided rule, first order.
"""
from __future__ import annotations

import numpy as np

from .host import xp as _xp


def rfe_elements(n_segments, length, E, I, rho_A, eta=None):
    """The rigid finite elements of a uniform beam (the module docstring): ``(lengths, mass, inertia, k, c)``, the
    n + 1 elements' lengths (h/2, h, ..., h, h/2), masses rho_A * lengths and moments of inertia about their centres
    mass * lengths^2 / 12, and the n springs' stiffness k = E I / h and damping c = eta I / h (None without ``eta``),
    h = length / n_segments. NumPy where the values are known, jax.numpy where one is traced (the model's arrays
    are then functions of E, I, rho_A and the length, differentiable)."""
    n = int(n_segments)
    xp = _xp(length, E, I, rho_A, eta)
    h = length / n
    lengths = h * xp.asarray([0.5] + [1.0] * (n - 1) + [0.5])
    mass = rho_A * lengths
    return lengths, mass, mass * lengths**2 / 12, E * I / h, None if eta is None else eta * I / h


def check_rfe(who, n_segments, **values):
    """``n_segments`` as an int >= 1 and the known ``values`` (E, I, rho_A, length, damping) positive (damping: >= 0),
    after a ValueError naming ``who`` and the argument."""
    if isinstance(n_segments, (bool, np.bool_)) or not isinstance(n_segments, (int, np.integer)) or n_segments < 1:
        raise ValueError(f"{who}: n_segments must be an integer >= 1 (the number of springs), got {n_segments!r}")
    for name, value in values.items():
        if value is None or _xp(value) is not np:
            continue
        if np.ndim(value) != 0:
            raise ValueError(f"{who}: {name} must be a scalar, got shape {np.shape(value)}")
        v = float(value)
        ok = np.isfinite(v) and (v >= 0 if name == "damping" else v > 0)
        if not ok:
            raise ValueError(f"{who}: {name} must be finite and {'>= 0' if name == 'damping' else 'positive'}, got {v}")
    return int(n_segments)
