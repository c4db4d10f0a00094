"""Constraint projection in the mass metric, and the integrators built on it: RATTLE and projected steps.

The constraints of a :class:`~diffchain._model.chain.Chain` at the position level are Phi(x) = 0 with rows
    rod k (switched on):       |x_{k+1} - x_k| - l_k
    slider i (not guided):     s_i^T x_i - c_i
    guided point i:            x_i held where its prescribed motion puts it (the projection does not move it)
and Jacobian J(x) (the rows of :func:`diffchain._constraints.system.constraint_jacobian`: r_k^T (q_{k+1} - q_k),
s_i^T q_i, q_i). Every correction here is the solution of the saddle-point system of the dynamics with another
right-hand side,

    [[M, J^T], [J, 0]] [dq; y] = [f; c]   =>   dq = M^-1 f + M^-1 J^T (J M^-1 J^T)^-1 (c - J M^-1 f),

solved in O(n) by the library's recursion (:func:`diffchain._solvers.recursive.kkt_solve`,
:func:`~diffchain._solvers.recursive.link_solve` for rigid links, with implicit derivatives) or densely with
``solver=KKT()``. With f = 0 it is the M-orthogonal projection: velocities v+ = v - M^-1 J^T (J M^-1 J^T)^-1 J v
(guided points keep theirs), positions by Newton steps x <- x - M^-1 J(x)^T (J(x) M^-1 J(x)^T)^-1 Phi(x). Fixed
iteration counts: jit, vmap and grad apply.

Integrators (they need the chain, so only their ``step(chain, state, control, dt, solver)`` applies):

* :class:`RATTLE` -- the symplectic, second-order constrained Störmer–Verlet scheme (Andersen 1983, J. Comput. Phys.
  52:24; Leimkuhler & Skeel 1994; Hairer, Lubich & Wanner, *Geometric Numerical Integration*, VII.1.4):
      x_{n+1} = x_n + h v_n + (h^2/2) M^-1 (F(x_n, v_n) - J(x_n)^T lam),      Phi(x_{n+1}) = 0,
      v_{n+1} = v_{n+1/2} + (h/2) M^-1 (F(x_{n+1}, v_{n+1/2}) - J(x_{n+1})^T mu),  J(x_{n+1}) v_{n+1} = 0,
  v_{n+1/2} = (x_{n+1} - x_n)/h. lam by simplified Newton with J(x_n) in both places (the first iteration carries the
  forces, SHAKE's iteration in block form); mu by one linear solve. Guided points follow x + h v + h^2 a^w / 2,
  v + h a^w. With forces that depend on x only it is symplectic and conserves the energy up to O(h^2) without drift.
* :class:`Projected` -- any plain integrator (SeedQuantum, SemiImplicitEuler, RK4) followed by :func:`project`.
"""
from __future__ import annotations

from typing import Callable, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._model.forces import external_forces
from .._model.geometry import links_c
from .integrators import RK4, Integrator
from .._state import Control, State
from .._model.checks import compiled
from .._solvers.recursive import chain_operator, kkt_solve, link_solve
from .._constraints.system import constraint_jacobian
from .._solvers.base import Solver
from .._solvers.choice import check_solver
from .._model.model import Model, check_model
from .._solvers.recursive_solver import Recursive
from .._xla import linalg
from .._xla.loops import SCAN_BLOCK
from .._constraints.chain import projector


def _operator(chain: Model, x, solver: Solver):
    """``solve(fx, fy, c_rod, c1, c2) -> (qx, qy)``: the q of [[M, J^T], [J, 0]] [q; y] = [f; c] with J = J(x).

    c_rod (n-1,): right-hand sides of the rod rows r_k^T (q_{k+1} - q_k); c1, c2 (n,): of the point rows, q_i at a
    guided point, s_i^T q_i (c1) on a slider; entries of rows switched off are ignored. The solvers of serial chains
    (``chains_only``: ``Recursive()``, ``ShortChain()``) solve it by the O(n) recursion, a dense solver as the dense
    system (O(n^3))."""
    n = chain.n
    g, sl = chain.guided, chain.slider_mask
    on = chain.rod_on
    sx, sy = chain.s[:, 0], chain.s[:, 1]
    if not solver.chains_only:
        J, mask = constraint_jacobian(chain, x)
        M = chain.M
        K = jnp.block([[M, J.T], [J, jnp.diag(jnp.where(mask, 0.0, 1.0).astype(J.dtype))]])

        def solve(fx, fy, c_rod, c1, c2):
            rhs = jnp.concatenate([jnp.stack([fx, fy], -1).reshape(-1), c_rod, jnp.stack([c1, c2], -1).reshape(-1)])
            q = linalg.solve(K, rhs * jnp.concatenate([jnp.ones(2 * n, x.dtype), mask]))[: 2 * n].reshape(n, 2)
            return q[:, 0], q[:, 1]

        return solve
    _, _, _, _, rx, ry = links_c(x[:, 0], x[:, 1])
    zero = jnp.zeros((n,), x.dtype)
    op = chain_operator(chain, rx, ry, projector(g, sl, sx, sy, zero, zero, zero)[:3], chain.has_links,
                        getattr(solver, "block", SCAN_BLOCK))
    lin = link_solve if chain.has_links else kkt_solve

    def solve(fx, fy, c_rod, c1, c2):
        b = (fx, fy, jnp.where(on, c_rod, 0.0), jnp.where(g | sl, c1, 0.0), jnp.where(g, c2, 0.0))
        qx, qy, _, _, _ = lin(op, b)
        return qx, qy

    return solve


def position_residual(chain: Model, x):
    """Phi(x): rod-length errors |x_{k+1} - x_k| - l_k (n-1,) (0 where the rod is switched off) and slider-line errors
    s_i^T x_i - c_i (n,) (0 off the sliders)."""
    _, _, rho, _, _, _ = links_c(x[:, 0], x[:, 1])
    rod = jnp.where(chain.rod_on, rho - chain.l, 0.0)
    return rod, chain.point_kinds.residual(x)[:, 0]


def velocity_residual(chain: Model, x, v):
    """J(x) v: rod stretch rates r_k^T (v_{k+1} - v_k) (n-1,) and slider rates s_i^T v_i (n,) (0 where off)."""
    _, _, _, _, rx, ry = links_c(x[:, 0], x[:, 1])
    dv = v[1:] - v[:-1]
    rod = jnp.where(chain.rod_on, rx * dv[:, 0] + ry * dv[:, 1], 0.0)
    line = jnp.where(chain.slider_mask, jnp.sum(chain.s * v, -1), 0.0)
    return rod, line


def project_velocities(chain: Model, x, v, solver: Solver = Recursive()):
    """The M-orthogonal projection of v (n,2) onto {J(x) v = 0}, guided points held at their velocity:
    v+ = v - M^-1 J^T (J M^-1 J^T)^-1 J v, J the rods' and sliders' rows and the guided points' (v_i fixed)."""
    rod, line = velocity_residual(chain, x, v)
    zero = jnp.zeros_like(line)
    qx, qy = _operator(chain, x, solver)(zero, zero, -rod, -line, zero)
    return v + jnp.stack([qx, qy], -1)


def project_positions(chain: Model, x, iterations: int = 2, solver: Solver = Recursive()):
    """``iterations`` Newton steps x <- x - M^-1 J(x)^T (J(x) M^-1 J(x)^T)^-1 Phi(x) towards the constraint manifold
    (guided points held); quadratic convergence: one step from an O(h^3) error leaves round-off."""
    for _ in range(iterations):
        rod, line = position_residual(chain, x)
        zero = jnp.zeros_like(line)
        qx, qy = _operator(chain, x, solver)(zero, zero, -rod, -line, zero)
        x = x + jnp.stack([qx, qy], -1)
    return x


@compiled
def project(model: Model, state: State, iterations: int = 2, solver: Solver | None = None) -> State:
    """``state`` with its positions moved onto the constraints (:func:`project_positions`; a mechanism's loop closure
    Phi(q, t) = 0) and then its velocities projected onto the tangent space there (:func:`project_velocities`; a
    mechanism's Phi_q q_dot + Phi_t = 0), both in the mass metric; ``solver`` defaults to the model's."""
    solver = check_solver(solver, "project", check_model(model, "project"))
    if not model.serial:
        return project_mechanism(model, state, solver, iterations)
    x = project_positions(model, state.x, iterations, solver)
    return State(x, project_velocities(model, x, state.v, solver), state.t)


def project_mechanism(mech, state: State, solver: Solver, iterations: int = 1) -> State:
    """``state`` moved onto the loop closure Phi(q, t) = 0 by ``iterations`` Newton steps and its velocities onto
    Phi_q q_dot + Phi_t = 0, both in the mass metric: each is the constrained solve M dq = J^T lambda, J dq = -r
    (``solver.system`` with Q = 0: the smallest correction in the metric of M, redundant rows dropped by the solver's
    rank decisions), r the residual."""
    q, v, t = state.x.reshape(-1), state.v.reshape(-1), jnp.asarray(state.t, state.x.dtype)
    zero = jnp.zeros_like(q)
    for _ in range(iterations):
        J = jax.jacfwd(mech.phi)(q, t)
        q = q + solver.system(mech.M, zero, J, -mech.phi(q, t), mech.on).a
    J, phi_t = jax.jacfwd(mech.phi, argnums=(0, 1))(q, t)
    v = v + solver.system(mech.M, zero, J, -(J @ v + phi_t), mech.on).a
    return State(q.reshape(state.x.shape), v.reshape(state.v.shape), state.t)


class ChainIntegrator(Integrator):
    """An integrator that needs the model itself (to project onto its constraints): only its :meth:`step` applies."""

    stab_factor: float | None = None

    def __call__(self, accel: Callable[[State], jax.Array], state: State, dt: ArrayLike) -> State:
        raise TypeError(f"{type(self).__name__} projects onto the model's constraints and needs the model (a chain's, for RATTLE): it steps "
                        "through its step(model, state, control, dt, solver) (diffchain.step, diffchain.rollout), not "
                        "through an acceleration function (the point-major batched form cannot take it: pass "
                        "integrator=RK4() there)")


class RATTLE(ChainIntegrator):
    """RATTLE (Andersen 1983): constrained velocity Verlet, symplectic and second order (see the module docstring).

    ``iterations`` solves for the position multipliers (simplified Newton with J(x_n): each reduces the rod error by a
    factor ~ h |omega|); one more solve for the velocities. ``stab_factor`` is unused (no drift correction is needed:
    the constraints are solved, not integrated)."""

    iterations: int = eqx.field(static=True, default=3)
    chains_only: ClassVar[bool] = True  # (it solves a chain's rods and sliders)
    backward: ClassVar[bool] = True  # (symmetric: a step with -dt undoes one with dt, forces of the positions alone)

    def step(self, chain: Model, state: State, control: Control, dt: ArrayLike,
             solver: Solver = Recursive()) -> State:
        x, v, h = state.x, state.v, dt
        g, a_w = chain.guided, control.a_w
        F = external_forces(chain, state, control)
        solve = _operator(chain, x, solver)
        x0 = x + h * v
        D = jnp.zeros_like(x)  # x_{n+1} - x0, in the range of M^-1 (F, J(x_n)^T)
        for k in range(self.iterations):
            rod, line = position_residual(chain, x0 + D)
            f = 0.5 * h * h * F if k == 0 else jnp.zeros_like(F)
            # guided points: x + h v + h^2 a^w / 2 (set by the first solve, then held)
            pin = 0.5 * h * h * a_w if k == 0 else jnp.zeros_like(a_w)
            qx, qy = solve(f[:, 0], f[:, 1], -rod, jnp.where(g, pin[:, 0], -line), pin[:, 1])
            D = D + jnp.stack([qx, qy], -1)
        x1 = x0 + D
        v_half = v + D / h
        # the velocity half: M a + J^T y = F(x_{n+1}, v_{n+1/2}), J a = -(2/h) J v_{n+1/2}, a = a^w at guided points
        F1 = external_forces(chain, State(x1, v_half, state.t + h), control)
        rod, line = velocity_residual(chain, x1, v_half)
        ax, ay = _operator(chain, x1, solver)(F1[:, 0], F1[:, 1], -2.0 / h * rod,
                                               jnp.where(g, a_w[:, 0], -2.0 / h * line), a_w[:, 1])
        return State(x1, v_half + 0.5 * h * jnp.stack([ax, ay], -1), state.t + h)


class Projected(ChainIntegrator):
    """``base`` (SeedQuantum, SemiImplicitEuler, RK4, with its own ``stab_factor`` for its accelerations) followed by
    :func:`project` with ``iterations`` Newton steps for the positions and one projection of the velocities.

    Not symplectic: the projection removes the drift off the constraints, not the base scheme's energy error."""

    base: Integrator
    iterations: int = eqx.field(static=True)

    def __init__(self, base: Integrator = RK4(stab_factor=None), iterations: int = 1) -> None:
        if not isinstance(base, Integrator) or isinstance(base, ChainIntegrator):
            raise TypeError(f"Projected: base must be a plain Integrator (SeedQuantum(), SemiImplicitEuler(), RK4()), "
                            f"got {base!r}")
        self.stab_factor = None
        self.base, self.iterations = base, int(iterations)

    @property
    def backward(self) -> bool:
        """Whether it takes dt < 0: as its base does (the projection does not depend on the direction of time)."""
        return self.base.backward

    def step(self, model: Model, state: State, control: Control, dt: ArrayLike,
             solver: Solver = Recursive()) -> State:
        return project(model, self.base.step(model, state, control, dt, solver), self.iterations, solver)
