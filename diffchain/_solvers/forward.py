""":func:`forward_dynamics`: the accelerations of any model by any solver that applies to it."""
from __future__ import annotations

from typing import Literal, overload

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy.typing as npt
from jax.typing import ArrayLike

from .._state import Control, State
from .._model.checks import compiled, control_checks, describe, finite_state_check, runtime_checks
from .._model.model import Model, check_model
from .base import Solution, Solver
from .choice import check_solver
from .rank import INCONSISTENT, NONFINITE, SINGULAR, STATUS


# an inner program, traced once per model, shapes and options: the steps of a rollout (RK4's four stages), its
# gradient and their vmaps reuse that trace and its derivatives; XLA inlines it
@eqx.filter_jit
def accelerations(model, state: State, control: Control, solver: Solver, stab=None):
    """a (N, 2) of ``model`` by ``solver`` (no checks: the integrators' acceleration function)."""
    return solver(model, state, control, stab).a


@overload
def forward_dynamics(model: Model, state: State, control: Control | None = None, *, solver: Solver | None = None,
                     stab: ArrayLike | None = None, held: npt.ArrayLike | None = None, alpha_w: npt.ArrayLike = 0.0,
                     theta_bar: npt.ArrayLike | None = None, return_forces: Literal[False] = False,
                     check: bool | None = None) -> jax.Array: ...
@overload
def forward_dynamics(model: Model, state: State, control: Control | None = None, *, solver: Solver | None = None,
                     stab: ArrayLike | None = None, held: npt.ArrayLike | None = None, alpha_w: npt.ArrayLike = 0.0,
                     theta_bar: npt.ArrayLike | None = None, return_forces: Literal[True],
                     check: bool | None = None) -> Solution: ...
@overload
def forward_dynamics(model: Model, state: State, control: Control | None = None, *, solver: Solver | None = None,
                     stab: ArrayLike | None = None, held: npt.ArrayLike | None = None, alpha_w: npt.ArrayLike = 0.0,
                     theta_bar: npt.ArrayLike | None = None, return_forces: bool = False,
                     check: bool | None = None) -> jax.Array | Solution: ...
@compiled
def forward_dynamics(model: Model, state: State, control: Control | None = None, *, solver: Solver | None = None,
                     stab: ArrayLike | None = None, held: npt.ArrayLike | None = None, alpha_w: npt.ArrayLike = 0.0,
                     theta_bar: npt.ArrayLike | None = None, return_forces: bool = False,
                     check: bool | None = None) -> jax.Array | Solution:
    """Accelerations a (N, 2) of the coordinate points of ``model`` in ``state`` under ``control``, by ``solver``
    (default: the model's, the recursion for a chain and dense KKT for a mechanism).

    ``control``: a chain's joint torques, point forces and prescribed accelerations; a mechanism's motor torques and
    point forces ``Control(tau=(n_motors,), F=(P, 2))``; None for no input. ``stab`` is the time constant of the drift
    correction (a chain's PD correction, seed 000 §12.2 eq. 33; a mechanism's Baumgarte stabilisation, seed 001 eqs.
    8.21-8.22); None for the exact constraint accelerations. ``held`` (n,) bool, for a chain, holds those joints at
    the angular accelerations ``alpha_w`` (a scalar or (n,); seed 000 Part II, eq. 13) by unknown torques tau_w;
    ``theta_bar`` (n,), with ``stab``, pulls a held angle back to it. With ``return_forces`` the whole
    :class:`Solution`: a, the constraint forces (a chain's rod tensions phi (n-1,), F_{i+1}^d = r_i phi_i; a
    mechanism's multipliers lambda, one per row of its Phi, which :func:`diffchain.reactions` turns into joint forces),
    with ``held`` the torques tau_w (n,), and a dense solve's rank information.

    ``check``: by default (None) the inputs are checked: a state or a control that holds NaN or inf raises a
    :class:`diffchain.InputError`, also under ``jit`` (when the program runs; about 1 us a call on CPU, 1.1 against
    7.7 us a state of a 5-link chain in a ``lax.map``: in a loop of your own, check the states once and pass
    ``check=False``). ``check=True`` also checks the result:
    accelerations that are not finite raise a ``ValueError``, and so does a dense solve whose rank information says it
    is singular (a rank below the mechanism's nominal rank) or inconsistent, instead of returning a flagged result.
    ``check=False`` checks neither (a program without host callbacks).
    """
    who = "forward_dynamics"
    check_model(model, who)
    solver = check_solver(solver, who, model)
    if control is not None and not isinstance(control, Control):
        raise TypeError(f"{who}: control must be a diffchain.Control or None, got {describe(control)}")
    control = model.zero_control(model.dtype) if control is None else control
    model.check_inputs(state, control, who)
    if held is not None and not model.serial:
        raise ValueError(f"{who}: held joints (seed 000 Part II) are a chain's; a mechanism holds its angle stops "
                         "in the event rollout, or prescribes an angle with a driver (MechanismBuilder.drive)")
    if check is not False:  # the inputs: finite (only their largest magnitudes enter the check)
        pending = [finite_state_check(state, f"{who}: the state")] + control_checks(control, who)
        x, v = runtime_checks((state.x, state.v), pending)
        state = State(x, v, state.t)
    if held is None:
        sol = solver(model, state, control, stab)
    else:
        sol = solver.held(model, state, control, held, alpha_w, theta_bar, stab)
    if check:
        sol = _checked(sol, who, model.nominal_rank)
    return sol if return_forces else sol.a


def _checked(sol, who: str, nominal_rank):
    """``sol`` whose accelerations raise (also under jit, :func:`diffchain._model.checks.runtime_checks`) where they are
    not finite, or where a dense solve's rank information says it is singular or inconsistent: a failed solve, not bad
    input (a ``ValueError``)."""
    checks = [(~jnp.all(jnp.isfinite(sol.a)), f"{who}: {STATUS[NONFINITE]}", jnp.max(jnp.abs(sol.a)), ValueError)]
    if sol.info is not None:
        checks += [(sol.info.status == SINGULAR, f"{who}: {STATUS[SINGULAR]}: the rank and the nominal rank are",
                    jnp.stack([sol.info.rank, jnp.asarray(nominal_rank)]), ValueError),
                   (sol.info.status == INCONSISTENT, f"{who}: {STATUS[INCONSISTENT]}: the residual is",
                    sol.info.residual, ValueError)]
    (a,) = runtime_checks((sol.a,), checks)
    return eqx.tree_at(lambda s: s.a, sol, a)
