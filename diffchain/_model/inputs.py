"""The input checks of a model: whether a state and a control fit a chain (:func:`check_path_inputs`,
:func:`check_sizes`) or a mechanism (a :class:`~diffchain._model.model.Model` of any structure, built by
:class:`~diffchain.MechanismBuilder`: :func:`check_general_inputs`) at trace time (:meth:`diffchain.Model.check_inputs`),
and whether a chain's state is on its rods and sliders (:func:`constraint_violation`, :func:`check_state`, the start
check of :func:`diffchain.rollout` and :func:`diffchain.check_event_state`)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from .._state import Control, State
from .checks import _require, compiled, describe, runtime_checks
from .geometry import links

if TYPE_CHECKING:
    from .model import Model


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


@compiled
def constraint_violation(chain: Model, state: State) -> tuple[jax.Array, jax.Array]:
    """Largest rod-length error |‖x_{i+1}-x_i‖ - l_i| and rod-stretch-rate |r_i^T (v_{i+1}-v_i)|, and the slider errors.
    A rod between two guided points is switched off (their prescribed motion wins, seed §6.1) and not counted."""
    _, rho, r = links(state.x)
    # the masks multiply (a NaN state gives NaN): with a mask known at compile time to be all off (a chain without
    # sliders) jnp.where would make the term a batch-sized constant, which XLA folds slowly (seconds at 64k copies)
    on, on_line = chain.rod_on.astype(rho.dtype), chain.slider_mask.astype(rho.dtype)
    length = jnp.max(jnp.abs(rho - chain.l) * on, initial=0.0)
    rate = jnp.max(jnp.abs(jnp.sum(r * (state.v[1:] - state.v[:-1]), -1)) * on, initial=0.0)
    line = jnp.max(jnp.abs(jnp.sum(chain.s * state.x, -1) - chain.c) * on_line, initial=0.0)
    line_rate = jnp.max(jnp.abs(jnp.sum(chain.s * state.v, -1)) * on_line, initial=0.0)
    return jnp.maximum(length, line), jnp.maximum(rate, line_rate)


def check_state(chain: Model, state: State, tol: float = 1e-6) -> State:
    """Raise if ``state`` is off the constraint manifold or not finite; returns the state so it can be threaded on.

    Allowed: a rod-length or slider-line error of tol * max(l) + 8 eps max|x| and a stretch rate (or speed off a
    slider line) of tol (1 + max|v|) + 8 eps max|v| (1 + max|x| / min(l)), with eps the machine epsilon of the
    state's dtype: the terms in eps are the round-off of a state computed in that dtype (float32 positions far from
    the origin carry errors far above 1e-6 of a short rod). Values known now raise a :class:`diffchain.InputError`
    now; traced ones (under ``jit``/``vmap``) when the program runs (:func:`diffchain._model.checks.runtime_checks`).
    """
    return State(runtime_checks((state.x,), state_checks(chain, state, tol))[0], state.v, state.t)


def state_checks(chain, state: State, tol: float = 1e-6) -> list:
    """The checks of :func:`check_state`, for :func:`diffchain._model.checks.runtime_checks`."""
    if state.x.shape != (chain.n, 2):
        raise ValueError(f"check_state: x must have shape (n, 2) = ({chain.n}, 2) for this chain, got {state.x.shape}")
    pos, vel = constraint_violation(chain, state)
    eps = float(jnp.finfo(jnp.result_type(state.x, chain.m)).eps)
    size = jnp.max(jnp.abs(state.x), initial=0.0)
    speed = jnp.max(jnp.abs(state.v), initial=0.0)
    if chain.n > 1:
        longest, shortest = jnp.max(chain.l), jnp.min(chain.l)
    else:  # a lone point: absolute tolerances
        longest = shortest = 1.0
    pos_tol = tol * longest + 8 * eps * size
    vel_tol = tol * (1.0 + speed) + 8 * eps * speed * (1.0 + size / shortest)
    return [
        (~jnp.all(jnp.isfinite(state.x)) | ~jnp.all(jnp.isfinite(state.v)),
         "check_state: the state must be finite, but x or v holds NaN or inf: max|x|, max|v| are",
         jnp.stack([size, speed])),
        (pos > pos_tol, "check_state: the state is off the constraint manifold (a rod length or a slider line is "
         "violated beyond tol): the largest error and the allowed one are", jnp.stack([pos, pos_tol])),
        (vel > vel_tol, "check_state: the velocities violate the constraints (a rod stretches or a slider leaves its "
         "line beyond tol): the largest rate and the allowed one are", jnp.stack([vel, vel_tol]))]
