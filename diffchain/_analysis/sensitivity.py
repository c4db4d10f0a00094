"""Sensitivities of accelerations to torques and forces (seed 000 §8, §8.1), by automatic differentiation.

The seed back-propagates through the recursion by hand (Fig. 3); with JAX the same Jacobians come from ``jacfwd``
(one forward sweep per input column) or ``jacrev`` (one reverse sweep per output row). Accelerations are affine in the
torques, so these Jacobians are exact and state-dependent only.
"""
from __future__ import annotations

import jax

from .._model.geometry import joint_accelerations
from .._state import Control, State
from .._model.checks import compiled, describe
from .._model.model import Model, check_model
from .._solvers.base import Solver
from .._solvers.choice import check_solver
from .._solvers.recursive_solver import Recursive


def _alpha_of_tau(chain: Model, state: State, control: Control, solver: Solver):
    def alpha(tau):
        return joint_accelerations(state, solver(chain, state, Control(tau, control.F, control.a_w)).a)

    return alpha


def _check_arguments(chain, state, control, solver, mode, who):
    """The control (zero where None), after a TypeError / ValueError naming ``chain``, ``state``, ``control``,
    ``solver`` or ``mode`` where it does not fit: a chain, a State and one Control of its n points, a solver instance,
    "fwd" or "rev"."""
    if not check_model(chain, who).serial:
        raise TypeError(f"{who}: chain must be a serial chain (a Chain, pendulum(...), ...): the sensitivities are "
                        "those of its joints; got a mechanism (forward_dynamics and jax.jacfwd give a mechanism's)")
    check_solver(solver, who, chain)
    if control is not None and not isinstance(control, Control):
        raise TypeError(f"{who}: control must be a diffchain.Control or None, got {describe(control)}")
    control = Control(n=chain.n, dtype=chain.m.dtype) if control is None else control
    chain.check_inputs(state, control, who)
    if mode not in ("fwd", "rev"):
        raise ValueError(f"{who}: mode must be 'fwd' (jax.jacfwd) or 'rev' (jax.jacrev), got {mode!r}")
    return control


@compiled
def dalpha_dtau(chain: Model, state: State, control: Control | None = None, *, solver: Solver = Recursive(),
                mode: str = "fwd") -> jax.Array:
    """d alpha^z_i / d tau_j (n, n): joint angular accelerations (seed eq. 13) w.r.t. joint torques (seed §8.1)."""
    control = _check_arguments(chain, state, control, solver, mode, "dalpha_dtau")
    jac = {"fwd": jax.jacfwd, "rev": jax.jacrev}[mode]
    return jac(_alpha_of_tau(chain, state, control, solver))(control.tau)


@compiled
def da_dF(chain: Model, state: State, control: Control | None = None, *, solver: Solver = Recursive(),
          mode: str = "rev") -> jax.Array:
    """d a_i / d F^e_j as an (n, 2, n, 2) array: point accelerations w.r.t. external point forces (seed §8)."""
    control = _check_arguments(chain, state, control, solver, mode, "da_dF")
    jac = {"fwd": jax.jacfwd, "rev": jax.jacrev}[mode]
    return jac(lambda F: solver(chain, state, Control(control.tau, F, control.a_w)).a)(control.forces())
