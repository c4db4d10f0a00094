"""Which solver runs: :func:`check_solver` checks the one given to an entry point, or picks the default of the model
(:func:`default_solver`). Above the solvers it chooses from (:mod:`diffchain._solvers.base` defines the interface)."""
from __future__ import annotations

from .._model.checks import describe
from .base import Solver
from .dense import KKT
from .recursive_solver import Recursive


def default_solver(model) -> Solver:
    """The solver used where none is given: the seed-000 recursion on a path, dense KKT otherwise."""
    return Recursive() if model.serial else KKT()


def check_solver(solver, who: str, model=None):
    """``solver``, or ``model``'s default solver (:func:`default_solver`) where it is None; a TypeError naming
    ``solver`` unless it is a :class:`Solver` instance that applies to ``model`` (a solver of chains needs
    :attr:`Model.serial`)."""
    if solver is None and model is not None:
        return default_solver(model)
    if not isinstance(solver, Solver):
        raise TypeError(f"{who}: solver must be a solver instance: Recursive(), ShortChain(), Banded(), KKT(), "
                        f"RangeSpace(), NullSpace() or Larin(), got {describe(solver)}")
    if model is not None and not model.serial and solver.chains_only:
        raise TypeError(f"{who}: {type(solver).__name__}() solves serial chains only (the seed-000 recursion); a "
                        "mechanism needs a dense solver: KKT() (the default), RangeSpace(), NullSpace() or Larin()")
    return solver
