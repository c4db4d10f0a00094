"""The one solver interface: an abstract :class:`Solver`, implementations passed as objects (``solver=KKT()``).

Every solver answers three questions, each with a :class:`Solution`, and an implementation that does not apply to a
model says so with a clear error:

* ``solver(model, state, control, stab)``: a model's forward dynamics: its points' accelerations a (N, 2) and the
  multipliers of its rows of Phi (a chain's rod tensions phi (n-1,), seed 000 Part I);
* ``solver.held(chain, state, control, active, alpha_w, theta_bar, stab)``: the same with the joints in ``active``
  held at the prescribed angular accelerations ``alpha_w`` by unknown torques tau_w (n,) (seed 000 Part II, eq. 13);
* ``solver.system(M, Q, J, gamma, on, nominal_rank)``: any constrained system ``M q_dd = Q + J^T lambda,
  J q_dd = gamma`` (seed 001 eq. 8.36; a mechanism in natural coordinates, seed 003): q_dd, lambda and the rank
  information (:class:`Info`).

The implementations: :class:`~diffchain.Recursive` (the O(n) seed-000 recursion: chains only),
:class:`~diffchain.ShortChain` (its system written out in scalars for one chain of up to 8 point masses),
:class:`~diffchain.Banded` (seed 001's sparse method, O(n) on chains of point masses) and the dense
:class:`~diffchain.KKT`, :class:`~diffchain.RangeSpace`, :class:`~diffchain.NullSpace` and :class:`~diffchain.Larin`
(seeds 001-002: every model, the system of :func:`~diffchain._constraints.system.system_terms`). Wherever two apply they
agree to round-off (tests/solvers/test_solvers_agree.py).
"""
from __future__ import annotations

import abc
from typing import ClassVar

import equinox as eqx
import jax
from jax.typing import ArrayLike

from .._state import Control, State
from .._model.model import Model
from .rank import Info


class Solution(eqx.Module):
    """What every solver returns (:class:`Solver`).

    ``a``: the accelerations, a model's points' (N, 2) or a system's q_dd (N,); ``forces``: the constraint forces, the
    multipliers lambda of a model's rows of Phi (a chain's rod tensions phi (n-1,): the force of rod i on point i+1 is
    r_i phi_i; :func:`~diffchain.reactions` turns a mechanism's into joint forces) or of a system's rows of J;
    ``tau_w``: the torques (n,) that hold a chain's held joints (seed 000 Part II; 0 at the others), None where no
    joint is held; ``info``: the rank information of a dense solve of a system (:class:`Info`), None otherwise."""

    a: jax.Array
    forces: jax.Array
    tau_w: jax.Array | None = None
    info: Info | None = None


class Solver(eqx.Module):
    """Forward dynamics of a model, of a chain with held joints, and of any constrained system (module docstring).
    ``chains_only``: the solver answers for serial chains alone (other models and ``system`` refused)."""

    chains_only: ClassVar[bool] = False

    @abc.abstractmethod
    def __call__(self, model: Model, state: State, control: Control, stab: ArrayLike | None = None) -> Solution:
        """A model's a (N, 2) and the multipliers of its rows of Phi (a chain's rod tensions phi (n-1,))."""

    @abc.abstractmethod
    def held(self, chain: Model, state: State, control: Control, active: jax.Array, alpha_w: ArrayLike,
             theta_bar: jax.Array | None = None, stab: ArrayLike | None = None) -> Solution:
        """a (n, 2), phi (n-1,) and tau_w (n,) of a chain whose ``active`` joints are held (seed 000 Part II)."""

    @abc.abstractmethod
    def system(self, M: jax.Array, Q: jax.Array, J: jax.Array, gamma: jax.Array, on: jax.Array,
               nominal_rank: int = -1) -> Solution:
        """q_dd, lambda and :class:`Info` of ``M q_dd = Q + J^T lambda``, ``J q_dd = gamma`` on the rows ``on``."""
