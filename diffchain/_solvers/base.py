"""Forward-dynamics solvers: one concept, implementations chosen by passing an object (``solver=KKT()``).

* :class:`Recursive` -- the O(n) seed-000 recursion (:mod:`diffchain._solvers.recursive`).
* :class:`KKT` -- the Lagrange equations of mixed type solved directly (seed 001 eq. 8.36, seed 004):
      ``[[M, J^T], [J, 0]] [a; -lambda] = [F^e; gamma]``
  with M the point mass matrix (diag(m_i I_2), block-tridiagonal with rigid links), J the Jacobian of the rod, guide
  and slider constraints and gamma their right-hand sides (:mod:`diffchain._constraints.chain`). Constraint rows that
  are switched off keep their place (fixed shapes) as a zero row with a unit diagonal in the lower block, which forces
  their multiplier to 0.

On every open chain the two agree to round-off; that is the library's strongest internal test.
"""
from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp

from .._constraints.chain import point_terms, rod_terms
from .._model.forces import external_forces
from .._model.inertia import mass_matrix
from .._model.chain import Chain, Control, State, check_sizes
from .recursive import recursive_dynamics


class Solver(eqx.Module):
    """Turns (chain, state, control) into accelerations a (n,2) and rod tensions phi (n-1,)."""

    def __call__(self, chain: Chain, state: State, control: Control, stab=None):
        raise NotImplementedError


class Recursive(Solver):
    """Seed 000 §3, §5, §6: O(n) backward/forward sweeps with ``lax.scan``."""

    def __call__(self, chain, state, control, stab=None):
        return recursive_dynamics(chain, state, control, stab)


def constraint_jacobian(chain: Chain, state: State, a_w, stab=None):
    """J (n_c, 2n), gamma (n_c,), active mask (n_c,) with J a = gamma; rows: n-1 rods, then 2 per point.

    A rod between two guided points is switched off: the prescribed accelerations win (seed §6.1).
    """
    n = chain.n
    r, e = rod_terms(chain, state, stab)
    S, mask, beta = point_terms(chain, state, a_w, stab)
    idx = jnp.arange(n - 1)
    J_rod = jnp.zeros((n - 1, n, 2), r.dtype).at[idx, idx].set(-r).at[idx, idx + 1].set(r)
    rod_on = chain.rod_on
    pts = jnp.arange(n)
    J_pt = jnp.zeros((n, 2, n, 2), r.dtype).at[pts, :, pts, :].set(S)
    J = jnp.concatenate([J_rod.reshape(n - 1, 2 * n), J_pt.reshape(2 * n, 2 * n)])
    gamma = jnp.concatenate([-e, beta.reshape(-1)])
    on = jnp.concatenate([rod_on, mask.reshape(-1)])
    return J * on[:, None], gamma * on, on


def kkt_dynamics(chain: Chain, state: State, control: Control, stab=None):
    """Accelerations and rod tensions from the dense KKT system (seed 001 eq. 8.36); O(n^3)."""
    n = chain.n
    J, gamma, on = constraint_jacobian(chain, state, control.a_w, stab)
    M = mass_matrix(chain)
    K = jnp.block([[M, J.T], [J, jnp.diag(jnp.where(on, 0.0, 1.0).astype(J.dtype))]])
    rhs = jnp.concatenate([external_forces(chain, state, control).reshape(-1), gamma])
    sol = jnp.linalg.solve(K, rhs)
    a, lam = sol[: 2 * n].reshape(n, 2), -sol[2 * n:]
    return a, lam[: n - 1]


class KKT(Solver):
    """Direct solve of the saddle-point system ``[[M, J^T], [J, 0]]`` (seed 001 §8.5 method 1)."""

    def __call__(self, chain, state, control, stab=None):
        return kkt_dynamics(chain, state, control, stab)


def forward_dynamics(chain: Chain, state: State, control: Control | None = None, *, solver: Solver = Recursive(),
                     stab=None, return_forces: bool = False):
    """Point accelerations a (n,2) of ``chain`` in ``state`` under ``control``.

    ``stab`` is the time constant delta_eps of the PD drift correction (seed §12.2 eq. 33); None for the exact
    constraint accelerations. With ``return_forces`` also the rod tensions phi (n-1,) (F_{i+1}^d = r_i phi_i).
    """
    if not isinstance(solver, Solver):
        raise TypeError(f"forward_dynamics: solver must be a chain solver instance: Recursive() or KKT() (mechanisms "
                        f"take their own solvers), got {solver!r} (of type {type(solver).__name__})")
    if control is not None and not isinstance(control, Control):
        raise TypeError(f"forward_dynamics: control must be a diffchain.Control or None, got {type(control).__name__}")
    control = Control(n=chain.n, dtype=chain.m.dtype) if control is None else control
    check_sizes(chain, state, control, "forward_dynamics")
    a, phi = solver(chain, state, control, stab)
    return (a, phi) if return_forces else a
