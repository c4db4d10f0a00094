""":func:`forward_dynamics`: a chain's accelerations by any solver, with or without held joints."""
from __future__ import annotations

from .._model.chain import Chain, Control, State, check_sizes
from .base import Solver, check_solver
from .recursive_solver import Recursive


def forward_dynamics(chain: Chain, state: State, control: Control | None = None, *, solver: Solver = Recursive(),
                     stab=None, held=None, alpha_w=0.0, theta_bar=None, return_forces: bool = False):
    """Point accelerations a (n,2) of ``chain`` in ``state`` under ``control``.

    ``stab`` is the time constant delta_eps of the PD drift correction (seed §12.2 eq. 33); None for the exact
    constraint accelerations. ``held`` (n,) bool holds those joints at the angular accelerations ``alpha_w`` (a
    scalar or (n,); seed 000 Part II, eq. 13) by unknown torques tau_w; ``theta_bar`` (n,), with ``stab``, pulls a
    held angle back to it. With ``return_forces`` also the rod tensions phi (n-1,) (F_{i+1}^d = r_i phi_i), and with
    ``held`` the torques tau_w (n,): (a, phi) or (a, phi, tau_w).
    """
    check_solver(solver, "forward_dynamics")
    if control is not None and not isinstance(control, Control):
        raise TypeError(f"forward_dynamics: control must be a diffchain.Control or None, got {type(control).__name__}")
    control = Control(n=chain.n, dtype=chain.m.dtype) if control is None else control
    check_sizes(chain, state, control, "forward_dynamics")
    if held is None:
        a, phi = solver(chain, state, control, stab)
        return (a, phi) if return_forces else a
    a, phi, tau_w = solver.held(chain, state, control, held, alpha_w, theta_bar, stab)
    return (a, phi, tau_w) if return_forces else a
