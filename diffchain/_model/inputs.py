"""The input checks of a model: whether a state and a control fit a chain (:func:`check_path_inputs`,
:func:`check_sizes`) or a mechanism (a :class:`~diffchain._model.model.Model` of any structure, built by
:class:`~diffchain.MechanismBuilder`: :func:`check_general_inputs`) at trace time (:meth:`diffchain.Model.check_inputs`)
(whether a chain's state is on its rods and sliders: :mod:`diffchain._model.rods`)."""
from __future__ import annotations

from .._state import Control, State
from .checks import _require, describe


def check_general_inputs(mech, state, control, who, steps=False):
    """:meth:`Model.check_inputs` of a mechanism."""
    if state is not None:
        if not isinstance(state, State):
            raise TypeError(f"{who}: state must be a diffchain.State, got {describe(state)}")
        N = mech.n
        if state.x.shape != (N, 2):
            raise ValueError(f"{who}: the state must hold the mechanism's N = {N} coordinate points, x and v of "
                             f"shape ({N}, 2), got x of shape {state.x.shape}")
    if control is None or callable(control) and not isinstance(control, Control):
        return
    if not isinstance(control, Control):
        raise TypeError(f"{who}: a mechanism's controls must be a diffchain.Control of the motor torques (and "
                        f"point forces), a policy returning one, or None; got {describe(control)}")
    n_m, P = mech.motor_idx.shape[0], mech.n_points
    taus, forces = (f"(T, n_motors) = (T, {n_m})", f"(T, P, 2) = (T, {P}, 2)") if steps else \
        (f"(n_motors,) = ({n_m},)", f"(P, 2) = ({P}, 2)")
    if control.tau.shape[:-1] != control.tau.shape[:int(steps)] or control.tau.shape[-1:] != (n_m,):
        hint = (" (a Control given F alone has one zero torque per point: pass tau too)"
                if control.F is not None and control.tau.shape[-1] == P else "")
        raise ValueError(f"{who}: a mechanism's controls hold one torque per motor, Control(tau=...) of shape "
                         f"{taus} (motors in the order of creation), got tau of shape {control.tau.shape}{hint}")
    if control.F is not None and control.F.shape[-2:] != (P, 2):
        raise ValueError(f"{who}: a mechanism's point forces hold one force per point, Control(F=...) of shape "
                         f"{forces} (points in the order of point_names), got F of shape {control.F.shape}")


def check_path_inputs(chain, state, control, who, steps=False):
    """:meth:`Model.check_inputs` of a chain."""
    if state is not None and not isinstance(state, State):
        raise TypeError(f"{who}: state must be a diffchain.State, got {describe(state)}")
    check_sizes(chain, state, control, who)
    if isinstance(control, Control) and not steps and control.tau.shape != (chain.n,):
        raise ValueError(f"{who}: control must be one control, tau of shape (n,) = ({chain.n},) and F, a_w "
                         f"({chain.n}, 2), got tau of shape {control.tau.shape} (a sequence of controls goes to "
                         "rollout)")


def check_sizes(chain, state: State | None = None, control=None, who: str = "diffchain"):
    """Raise a ValueError naming the argument whose number of points is not the chain's n (at trace time: shapes
    only). ``control`` may carry leading axes (a time axis); anything but a :class:`Control` (a policy) is skipped."""
    n = chain.n
    if state is not None:
        _require(state.x.shape[-2:] == (n, 2), f"{who}: the state has x of shape {state.x.shape}, the chain has n = {n} "
                 f"points: x and v must be ({n}, 2)")
    if isinstance(control, Control):
        _require(control.tau.shape[-1] == n, f"{who}: the control has tau of shape {control.tau.shape}, the chain has "
                 f"n = {n} points: tau must be (..., {n}), F and a_w (..., {n}, 2)")
        _require(control.F is None or control.F.shape[-2] == n, f"{who}: the control has F of shape "
                 f"{None if control.F is None else control.F.shape}, the chain has n = {n} points: F must be "
                 f"(..., {n}, 2)")
