"""The seed-000 recursion as a solver object, :class:`Recursive`: Part I (:mod:`diffchain._solvers.recursive`) for a
chain, Part II (:mod:`diffchain._solvers.recursive_held`) for a chain with held joints, both O(n) and differentiated
implicitly (:func:`active_dynamics_recursive`). The recursion applies to serial chains only: a mechanism gets a clear
error.
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._model.forces import _torque_forces_c
from .._model.geometry import links_c
from .._model.model import Model
from .._state import Control, State
from .._xla.loops import SCAN_BLOCK
from .implicit import implicit_solve
from .._constraints.held import _active_mask, active_terms
from .base import Solution, Solver
from .recursive import _kkt_matvec, _pad1, kkt_system, point_a0, point_multipliers, recursive_dynamics
from .recursive_held import _joint_alpha, _part_two_sweeps, _scales


def active_dynamics_recursive(chain: Model, state: State, control: Control, active, alpha_w, theta_bar=None,
                              stab=None, block=SCAN_BLOCK):
    """Accelerations a (n,2), rod tensions phi (n-1,) and constraint torques tau_w (n,) by the O(n) recursion of seed
    000 Part II (§9–§11, :func:`active_backward`, :func:`active_forward`, :func:`root_torque`).

    The recursion solves the symmetric KKT system of :meth:`diffchain.KKT.held` (:func:`_active_matvec`) for any
    right-hand side, so it is differentiated implicitly like the Part I recursion (:func:`active_solve`): one more
    recursion with the tangent or cotangent plus the adjoint of the elementwise terms, never a derivative through
    the sweeps themselves.

    Point masses only (massless rods): with rigid links the coupling block M12 would enter every k like the Part I
    generalisation :func:`diffchain._solvers.recursive.abcd_backward_inertial` (a_i no longer equals P F_i / m_i).
    """
    if chain.has_links:
        raise NotImplementedError("Recursive: held joints on a chain with rigid links (distributed mass) are not "
                                  "supported by the Part II recursion; use a dense solver such as KKT()")
    return held_solution(*held_system(chain, state, control, active, alpha_w, theta_bar, stab, block), active_solve)


def held_system(chain: Model, state: State, control: Control, active, alpha_w, theta_bar=None, stab=None,
                block=SCAN_BLOCK):
    """The operator with its held-joint fields and the right-hand side (b of :func:`kkt_system` and one row of seed
    eq. (13) per held joint) of the KKT system of :func:`_active_matvec`."""
    active = _active_mask(chain, active)
    op, b = kkt_system(chain, state, control, stab, block=block)
    _, _, _, inv_rho, _, _ = links_c(state.x[:, 0], state.x[:, 1])
    sigma, ell = _scales(chain)
    alpha = active_terms(chain, state, alpha_w, theta_bar, stab)
    op = dataclasses.replace(op, inv_rho=inv_rho, active=active, sigma=sigma, ell=ell)
    return op, b + (jnp.where(active, alpha, 0.0),)


def held_solution(op, b, solve):
    """(a, phi, tau_w) from ``solve(op, b)`` = z = (a_x, a_y, y_rod, y1, y2, y_t) (:func:`active_solve`)."""
    ax, ay, yr, _, _, yt = solve(op, b)
    return jnp.stack([ax, ay], -1), -yr, jnp.where(op.active, -yt, 0.0)


def _active_swept(op, b):
    """The part of K^-1 b (:func:`_active_matvec`) that the Part II sweeps give: a_x, a_y, the rod multipliers
    -phi and the active rows' multipliers -tau^w (rows switched off: y = b)."""
    rx, ry, inv_rho, act = op.rx, op.ry, op.inv_rho, op.active
    (bx, by, br), bt = b[:3], b[5]
    r, L = (_pad1(rx), _pad1(ry)), (_pad1(-ry * inv_rho), _pad1(rx * inv_rho))  # L = r^* / rho (link_L); r_n = L_n = 0
    (ax, ay), tau, phi = _part_two_sweeps(op.m, r, L, _pad1(-br), (bx, by), op.P, point_a0(op, b), act, bt, op.sigma,
                                          op.ell, op.block)
    return ax, ay, jnp.where(op.on, -phi[:-1], br), jnp.where(act, -tau, bt)


def _active_complete(op, b, swept):
    """The whole solution from the swept part: the point multipliers from the residual of Newton's law, in which
    the active rows' multipliers act as joint torques (:func:`diffchain._model.forces.torque_forces`)."""
    ax, ay, yr, yt = swept
    forces = _torque_forces_c(op.rx, op.ry, op.inv_rho, jnp.where(op.active, yt, 0.0))
    y1, y2 = point_multipliers(op, b, ax, ay, yr, *forces)
    return ax, ay, yr, y1, y2, yt


def _active_matvec(op, z):
    """K z for the massless KKT operator (:func:`diffchain._solvers.recursive._kkt_matvec`) with one row of eq. (13) per
    active joint (the :class:`diffchain._solvers.recursive.ChainOperator` with its held-joint fields), z = (a_x, a_y,
    y_rod, y1, y2, y_t): G a on the active rows (a unit diagonal on the others) and G^T y_t in Newton's rows -- the
    point forces of the joint torques y_t (:func:`diffchain._model.forces.torque_forces`), which makes K
    symmetric."""
    rx, ry, inv_rho, act = op.rx, op.ry, op.inv_rho, op.active
    ax, ay, yt = z[0], z[1], z[5]
    top_x, top_y, rod, row1, row2 = _kkt_matvec(op, z[:5])
    fx, fy = _torque_forces_c(rx, ry, inv_rho, jnp.where(act, yt, 0.0))
    alpha = _joint_alpha(rx, ry, inv_rho, ax, ay)
    return top_x + fx, top_y + fy, rod, row1, row2, jnp.where(act, alpha, yt)


active_solve = implicit_solve(_active_swept, _active_complete, _active_matvec)
active_solve.__doc__ = (
    "z = (a_x, a_y, y_rod, y1, y2, y_t) = K(op)^-1 b for the operator of :func:`_active_matvec` by the Part II "
    "recursion (:func:`_part_two_sweeps`), with implicit derivatives "
    "(:func:`diffchain._solvers.implicit.implicit_solve`).")


class Recursive(Solver):
    """The O(n) recursion of seed 000: Part I (§3, §5, §6) with ``lax.scan`` sweeps, and Part II (§9–§11) for held
    joints (point masses only; rigid links take a dense solver there). Chains only (:attr:`Model.serial`).

    ``block`` (default 32): a sweep over 2 ``block`` points or more runs as a scan over blocks of ``block`` points,
    each a scan of its own; ``None``: one scan over all points. The results are the same; the speed is not: on one
    chain XLA's CPU backend runs a long single scan more slowly per point (under ``vmap`` it makes no difference).
    """

    block: int | None = eqx.field(static=True, default=SCAN_BLOCK)
    chains_only: ClassVar[bool] = True

    def __check_init__(self):
        if self.block is not None and (isinstance(self.block, bool) or not isinstance(self.block, int)
                                       or self.block < 1):
            raise ValueError(f"Recursive: block must be None or an integer >= 1, got {self.block!r}")

    def __call__(self, chain: Model, state: State, control: Control, stab: ArrayLike | None = None) -> Solution:
        return Solution(*recursive_dynamics(chain, state, control, stab, self.block))

    def held(self, chain: Model, state: State, control: Control, active: jax.Array, alpha_w: ArrayLike,
             theta_bar: jax.Array | None = None, stab: ArrayLike | None = None) -> Solution:
        return Solution(*active_dynamics_recursive(chain, state, control, active, alpha_w, theta_bar, stab,
                                                   self.block))

    def system(self, M: jax.Array, Q: jax.Array, J: jax.Array, gamma: jax.Array, on: jax.Array,
               nominal_rank: int = -1) -> Solution:
        raise TypeError("Recursive: the seed-000 recursion solves serial chains only; a mechanism (or any system given "
                        "by its matrices) needs a dense solver: KKT(), RangeSpace(), NullSpace() or Larin()")
