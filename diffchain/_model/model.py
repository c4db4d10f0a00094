"""The one model interface (:class:`Model`): points in the plane, their mass, constraints and forces."""
from __future__ import annotations

import abc
from typing import ClassVar

import equinox as eqx

PATH, GENERAL = "path", "general"


class Model(eqx.Module):
    """A planar model in natural coordinates (seed 003): points in the plane, their mass, constraints and forces.

    Every entry point (:func:`forward_dynamics`, :func:`step`, :func:`rollout`, :func:`project`,
    :func:`event_rollout`, :func:`diagnose`, :class:`Events`) takes a model and asks it only what this interface
    declares. Two builders make models:

    * :class:`Chain` (and :func:`pendulum`, :func:`free_chain`, :func:`cart_chain`): points joined in a serial path by
      rods, with pinned, guided and sliding points, point masses and rigid links; ``topology = "path"``, which the
      seed-000 recursion needs;
    * :class:`MechanismBuilder` -> :class:`Mechanism`: any topology, bodies and attachment points as affine functions
      of the coordinate points, closed loops, drivers, springs, motors and angle stops; ``topology = "general"``.

    The topology is static: a solver that needs a path (:class:`Recursive`, :class:`ShortChain`) refuses other models
    with a clear error, and the event rollout picks the form of its projections by it. The state of either is a
    :class:`State`: the coordinate points x (N, 2), their velocities and the time.

    Features, for the event rollout (seed 000 §7, §12.1 on any model): a model has F features of each kind (an event
    state's masks are (F,)). Contact feature i is a point of the model, limit feature j an angle: for a chain F = n,
    point i is x_i and angle j the joint angle theta_j; a mechanism pads its points and its angle stops to a common F.
    Over a sub-quantum with constant accelerations a contact point moves exactly on the seed's quadratic (it is affine
    in the coordinates); an angle follows it to second order (:meth:`angle_rates`).
    """

    topology: ClassVar[str]

    @property
    @abc.abstractmethod
    def dtype(self):
        """The floating-point dtype of the model's arrays."""

    @abc.abstractmethod
    def default_solver(self):
        """The solver used where none is given."""

    @abc.abstractmethod
    def check_inputs(self, state, control, who: str, steps: bool = False):
        """TypeError / ValueError at trace time unless ``state`` (may be None) and ``control`` (a Control, with a
        leading time axis if ``steps``; anything else is a policy or None and skipped) fit the model."""

    @abc.abstractmethod
    def zero_control(self, dtype):
        """The control of no input (one step), every field an array (the event rollout caches it)."""

    @abc.abstractmethod
    def length_scale(self):
        """A length of the model (its longest rod or body; 1 without), for tolerances."""

    @abc.abstractmethod
    def weight(self):
        """A force scale of the model (its weight), for round-off thresholds of forces."""

    # -- features (class docstring) ----------------------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def n_features(self) -> int:
        """F: the length of an event state's masks."""

    @abc.abstractmethod
    def contact_points(self, x):
        """The contact features' positions (F, 2) at the coordinate points x (N, 2)."""

    @abc.abstractmethod
    def contact_rates(self, v):
        """The contact features' velocities (F, 2) (or their accelerations, for accelerations: the map is linear)."""

    @abc.abstractmethod
    def free_contacts(self, contact, stuck):
        """The contact features that may touch an obstacle now: marked in ``contact`` (F,), not ``stuck``."""

    @abc.abstractmethod
    def feature_angles(self, x, ref=None):
        """The limit features' angles (F,) in (-pi, pi], or on the branch within pi of ``ref`` (an angle's continuous
        value, carried from quantum to quantum)."""

    @abc.abstractmethod
    def angle_rates(self, x, v, a=None):
        """The limit features' angular velocities omega (F,) and, with ``a``, their angular accelerations alpha (F,):
        d theta / dt and d^2 theta / dt^2 along x(s) = x + s v + s^2 a / 2 at s = 0."""


def check_model(model, who: str):
    """``model``, after a TypeError naming it unless it is a :class:`Model`."""
    if not isinstance(model, Model):
        from .checks import describe
        raise TypeError(f"{who}: model must be a diffchain model (a Chain, pendulum(...), ..., or a Mechanism from "
                        f"MechanismBuilder), got {describe(model)}")
    return model
