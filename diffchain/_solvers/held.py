"""Active joints: prescribed joint angular accelerations enforced by unknown torques (seed 000 Part II, §9–§12.2).

An *active* joint i has its angular acceleration (seed eq. 13, conventions of :mod:`diffchain._model.geometry`: L_0 =
L_n = 0)
    alpha_i^z = L_i^T a_{i+1} - (L_i + L_{i-1})^T a_i + L_{i-1}^T a_{i-1}
prescribed to alpha_i^w. It is enforced by an unknown torque tau_i^w that acts exactly like an ordinary joint torque
(:func:`diffchain._model.forces.torque_forces`): L_{i-1} tau on point i-1, -(L_{i-1} + L_i) tau on point i, L_i tau on
point i+1. The generalized force of that torque is the transposed row of eq. 13, so in the KKT form the multiplier of
the active row *is* tau_i^w (same sign convention as the rod tensions of :func:`diffchain._solvers.base.kkt_dynamics`).

Joint 1 is measured against the world (a base motor); joint n (L_n = 0) prescribes minus the absolute angular
acceleration of the last link (a torque between the world and link n-1 alone). Both are supported by both solvers.
A chain of one point has no joints: ``active`` is ignored there.

Two solvers, same signature ``(chain, state, control, active, alpha_w, theta_bar=None, stab=None) -> (a, phi, tau_w)``:

* :func:`active_dynamics_kkt` -- the Part I KKT system of :mod:`diffchain._solvers.base` plus one candidate row per
joint
  (fixed shape, masked; rows switched off get a unit diagonal so their multiplier is 0). Works with rigid links too.
  A redundant set of constraints (seed §12.2 "stiffness") makes the matrix singular: use the recursion there.
* :func:`active_dynamics_recursive` -- the O(n) recursion of seed §9–§11 in ``lax.scan`` (point masses only).

Off the constraint manifold (rods not exactly at length, stretching velocities) the exact second derivative of the joint
angle has the extra terms of dL/dt (:func:`active_terms`); both solvers use the same right-hand side, so they agree
off-manifold too, as the rod equations of :func:`diffchain._constraints.chain.rod_terms` do.
"""
from __future__ import annotations


import equinox as eqx
import jax
import jax.numpy as jnp

from .._constraints.chain import _inv
from .._model.forces import _torque_forces_c, external_forces
from .._model.geometry import _pad_diff, link_L, link_omega_c, links_c, wrap_angle
from .._model.inertia import mass_matrix
from .._model.chain import Chain, Control, State
from .._xla.batching import one_chain_form
from .implicit import implicit_solve
from .recursive import _kkt_matvec, _pad1, kkt_system, point_a0, point_multipliers
from .._xla.small_chain import _one_chain_part_two
from .recursive_held import _active_mask, _joint_alpha, _part_two_sweeps, _per_joint, _scales, root_torque


def joint_rows(x):
    """The rows of seed eq. (13) as a (n, n, 2) array G with alpha^z_i = sum_j G_ij^T a_j (L_0 = L_n = 0)."""
    L = link_L(x)
    n = x.shape[0]
    k = jnp.arange(n - 1)
    G = jnp.zeros((n, n, 2), x.dtype)
    # link k contributes +alpha_k^o to joint k and -alpha_k^o to joint k+1, alpha_k^o = L_k^T (a_{k+1} - a_k)
    return G.at[k, k + 1].add(L).at[k, k].add(-L).at[k + 1, k + 1].add(-L).at[k + 1, k].add(L)


def active_terms(chain: Chain, state: State, alpha_w, theta_bar=None, stab=None):
    """Right-hand side of the active rows (n,): G a = alpha_eff with G the rows of eq. (13).

    The link angle phi_k obeys phi_k'' = L_k^T (a_{k+1} - a_k) + kappa_k exactly, kappa_k = L_k-dot^T dv_k =
    -2 omega_k eps'_k / rho_k (omega_k the link angular velocity, eps'_k = r_k^T dv_k the stretching rate, rho_k the
    current length); on the constraint manifold eps' = 0 and kappa vanishes (seed eq. 13 is then exact). So
    theta_i'' = alpha_i^z(a) + kappa_i - kappa_{i-1} = target_i, alpha_eff = target - (kappa_i - kappa_{i-1}).

    target = alpha^w, and with both ``theta_bar`` and ``stab`` given the PD drift correction of seed §12.2 eq. (33)
    for a held angle: eps = wrap(theta - theta_bar), eps' = omega^z, target = alpha^w - eps/T^2 - 2 eps'/T (meant for
    alpha^w = 0; otherwise it pulls towards theta_bar on top of alpha^w). theta_i = phi_i - phi_{i-1} with
    phi_0 = phi_n = 0 (joint 1 against the world; joint n is minus the last link's absolute angle).
    """
    alpha_w = _per_joint(chain, alpha_w, "alpha_w")
    dX, dY, _, inv_rho, rx, ry = links_c(state.x[:, 0], state.x[:, 1])  # by components, see links_c
    dU, dV = state.v[1:, 0] - state.v[:-1, 0], state.v[1:, 1] - state.v[:-1, 1]
    omega = link_omega_c(rx, ry, inv_rho, dU, dV)
    eps_dot = rx * dU + ry * dV
    kappa = -2.0 * omega * eps_dot * inv_rho
    target = alpha_w
    if theta_bar is not None and stab is not None:
        theta = _pad_diff(jnp.arctan2(dY, dX))  # the link angles (:func:`diffchain._model.geometry.link_angles`)
        err = theta - _per_joint(chain, theta_bar, "theta_bar")
        err = wrap_angle(err)
        w = _inv(stab)
        target = target - err * w**2 - 2.0 * _pad_diff(omega) * w
    return target - _pad_diff(kappa)


def active_dynamics_kkt(chain: Chain, state: State, control: Control, active, alpha_w, theta_bar=None, stab=None):
    """Accelerations a (n,2), rod tensions phi (n-1,) and constraint torques tau_w (n,) from the dense KKT system.

    ``[[M, J^T], [J, 0]] [a; -lambda] = [F^e; gamma]`` (seed 001 eq. 8.36) with J = rods, point constraints
    (:func:`diffchain._solvers.base.constraint_jacobian`) and one row of eq. (13) per active joint, right-hand side
    :func:`active_terms`. M a = F^e + J^T lambda, and the generalized force of an active row's multiplier is exactly
    the point forces of a joint torque (seed §4.2, Fig. 1): tau_w = lambda of that row. O(n^3); rigid links allowed.
    """
    from .base import constraint_jacobian  # lazy: lets solvers.py import this module without a cycle

    n = chain.n
    active = _active_mask(chain, active)
    J, gamma, on = constraint_jacobian(chain, state, control.a_w, stab)
    G = joint_rows(state.x).reshape(n, 2 * n)
    rhs = active_terms(chain, state, alpha_w, theta_bar, stab)
    J = jnp.concatenate([J, G * active[:, None]])
    gamma = jnp.concatenate([gamma, jnp.where(active, rhs, 0.0)])
    on = jnp.concatenate([on, active])
    K = jnp.block([[mass_matrix(chain), J.T], [J, jnp.diag(jnp.where(on, 0.0, 1.0).astype(J.dtype))]])
    sol = jnp.linalg.solve(K, jnp.concatenate([external_forces(chain, state, control).reshape(-1), gamma]))
    a, lam = sol[: 2 * n].reshape(n, 2), -sol[2 * n:]
    return a, lam[: n - 1], lam[-n:]


def active_dynamics_recursive(chain: Chain, state: State, control: Control, active, alpha_w, theta_bar=None,
                              stab=None):
    """Accelerations a (n,2), rod tensions phi (n-1,) and constraint torques tau_w (n,) by the O(n) recursion of seed
    000 Part II (§9–§11, :func:`active_backward`, :func:`active_forward`, :func:`root_torque`).

    The recursion solves the symmetric KKT system of :func:`active_dynamics_kkt` (:func:`_active_matvec`) for any
    right-hand side, so it is differentiated implicitly like the Part I recursion (:func:`active_solve`): one more
    recursion with the tangent or cotangent plus the adjoint of the elementwise terms, never a derivative through
    the sweeps themselves.

    Point masses only (massless rods): with rigid links the coupling block M12 would enter every k like the Part I
    generalisation :func:`diffchain._solvers.recursive.abcd_backward_inertial` (a_i no longer equals P F_i / m_i).
    """
    if chain.has_links:
        raise NotImplementedError("active_dynamics_recursive: rigid links with distributed mass are not supported by "
                                  "the Part II recursion; use active_dynamics_kkt")
    active = _active_mask(chain, active)
    op, b = kkt_system(chain, state, control, stab)
    _, _, _, inv_rho, _, _ = links_c(state.x[:, 0], state.x[:, 1])
    sigma, ell = _scales(chain)
    alpha = active_terms(chain, state, alpha_w, theta_bar, stab)
    ax, ay, yr, _, _, yt = active_solve(op + (inv_rho, active, sigma, ell), b + (jnp.where(active, alpha, 0.0),))
    return jnp.stack([ax, ay], -1), -yr, jnp.where(active, -yt, 0.0)


def one_joint_dynamics(chain: Chain, state: State, control: Control, active, alpha_w, theta_bar=None, stab=None,
                       part_one=None):
    """(a, phi, tau_w) as :func:`active_dynamics_recursive` gives them when ``active`` holds one joint j alone, by
    superposition of two Part I solves (``part_one``: :func:`diffchain._solvers.recursive.recursive_dynamics` by
    default).

    The constraint torque tau^w_j acts on the points as a joint torque (seed §4.2), so the accelerations and tensions
    are affine in it: a = a0 + tau a1, phi = phi0 + tau phi1, with (a0, phi0) Part I's for the given forces and
    (a1, phi1) its response to a unit torque at joint j alone (no gravity, velocity, PD or guided acceleration
    terms). Eq. (13) for joint j, alpha^z_j(a) = rhs_j (:func:`active_terms`), gives
    tau = (rhs_j - alpha^z_j(a0)) / alpha^z_j(a1). alpha^z_j(a1) is joint j's compliance; where it is at round-off
    level the joint cannot turn (seed §12.2) and tau = 0, the rule of :func:`root_torque`. The two solves run as one
    batch of two, which costs little more than one Part I call and less than the Part II recursion."""
    if part_one is None:
        from .recursive import recursive_dynamics as part_one
    dtype = state.x.dtype
    active = _active_mask(chain, active)
    e = active.astype(dtype)
    unit = Control(e, jnp.zeros_like(control.F), jnp.zeros_like(control.a_w))
    stab_unit = None if stab is None else jnp.full_like(jnp.asarray(stab, dtype), jnp.inf)  # 1/stab = 0: no PD terms

    def solve(g, v, u, s):
        return part_one(eqx.tree_at(lambda c: c.g, chain, g), State(state.x, v, state.t), u, s)

    def pair(p, q):  # the two solves' inputs stacked
        return jax.tree.map(lambda y, z: jnp.stack([jnp.asarray(y, dtype), jnp.asarray(z, dtype)]), p, q)

    a, phi = jax.vmap(solve)(pair(chain.g, 0.0), pair(state.v, jnp.zeros_like(state.v)), pair(control, unit),
                             None if stab is None else pair(stab, stab_unit))
    _, _, _, inv_rho, rx, ry = links_c(state.x[:, 0], state.x[:, 1])
    alpha = jax.vmap(lambda a: _joint_alpha(rx, ry, inv_rho, a[:, 0], a[:, 1]))(a)
    at_j = lambda q: jnp.sum(jnp.where(active, q, 0.0))  # noqa: E731
    rhs = at_j(active_terms(chain, state, alpha_w, theta_bar, stab))
    tau = root_torque(jnp.any(active), rhs, None, at_j(alpha[1]), at_j(alpha[0]), *_scales(chain))
    return a[0] + tau * a[1], phi[0] + tau * phi[1], tau * e


def _active_swept(op, b, sweeps=None):
    """The part of K^-1 b (:func:`_active_matvec`) that the Part II sweeps give: a_x, a_y, the rod multipliers
    -phi and the active rows' multipliers -tau^w (rows switched off: y = b). ``sweeps``: :func:`part_two_sweeps`
    (default) or :func:`_part_two_sweeps`."""
    (m, rx, ry, on), P, (inv_rho, act, sigma, ell) = op[:4], op[8:11], op[11:]
    (bx, by, br), bt = b[:3], b[5]
    r, L = (_pad1(rx), _pad1(ry)), (_pad1(-ry * inv_rho), _pad1(rx * inv_rho))  # L = r^* / rho (link_L); r_n = L_n = 0
    sweeps = sweeps or part_two_sweeps
    (ax, ay), tau, phi = sweeps(m, r, L, _pad1(-br), (bx, by), P, point_a0(op, b), act, bt, sigma, ell)
    return ax, ay, jnp.where(on, -phi[:-1], br), jnp.where(act, -tau, bt)


def _active_complete(op, b, swept):
    """The whole solution from the swept part: the point multipliers from the residual of Newton's law, in which
    the active rows' multipliers act as joint torques (:func:`diffchain._model.forces.torque_forces`)."""
    ax, ay, yr, yt = swept
    rx, ry, inv_rho, act = op[1], op[2], op[11], op[12]
    y1, y2 = point_multipliers(op, b, ax, ay, yr, *_torque_forces_c(rx, ry, inv_rho, jnp.where(act, yt, 0.0)))
    return ax, ay, yr, y1, y2, yt


def _active_matvec(op, z):
    """K z for the massless KKT operator (:func:`diffchain._solvers.recursive._kkt_matvec`) with one row of eq. (13) per
    active joint, op = (Part I operator, 1/rho, active, sigma, ell), z = (a_x, a_y, y_rod, y1, y2, y_t): G a on the
    active rows (a unit diagonal on the others) and G^T y_t in Newton's rows -- the point forces of the joint
    torques y_t (:func:`diffchain._model.forces.torque_forces`), which makes K symmetric."""
    rx, ry, inv_rho, act = op[1], op[2], op[11], op[12]
    ax, ay, yt = z[0], z[1], z[5]
    top_x, top_y, rod, row1, row2 = _kkt_matvec(op, z[:5])
    fx, fy = _torque_forces_c(rx, ry, inv_rho, jnp.where(act, yt, 0.0))
    alpha = _joint_alpha(rx, ry, inv_rho, ax, ay)
    return top_x + fx, top_y + fy, rod, row1, row2, jnp.where(act, alpha, yt)


part_two_sweeps = one_chain_form(_one_chain_part_two, _part_two_sweeps)
part_two_sweeps.__doc__ = (
    ":func:`_part_two_sweeps` evaluated on one chain: by :func:`_small_sweeps` up to ``SMALL_MAX`` points (written "
    "out in scalars, XLA fuses a short chain's solve into few kernels), the scans beyond; the scans under ``vmap`` "
    "and in derivatives (:func:`diffchain._xla.batching.one_chain_form`), where writing a chain out is slower.")


active_solve = implicit_solve(_active_swept, _active_complete, _active_matvec,
                              lambda op, b: _active_swept(op, b, _part_two_sweeps))
active_solve.__doc__ = (
    "z = (a_x, a_y, y_rod, y1, y2, y_t) = K(op)^-1 b for the operator of :func:`_active_matvec` by the Part II "
    "recursion (:func:`part_two_sweeps`), with implicit derivatives "
    "(:func:`diffchain._solvers.implicit.implicit_solve`): "
    "derivatives never go through the sweeps, and their solves take the scans (:func:`_part_two_sweeps`), not the "
    "written-out one-chain forms: as fast there, and a smaller program to trace and compile.")


class ActiveSolver(eqx.Module):
    """Forward dynamics with active joints: (chain, state, control, active, alpha_w, theta_bar, stab) ->
    (a, phi, tau_w). ``active`` (n,) bool, ``alpha_w`` (n,) prescribed alpha^z, ``theta_bar`` (n,) held angles for the
    PD correction (used with ``stab``)."""

    def __call__(self, chain, state, control, active, alpha_w, theta_bar=None, stab=None):
        raise NotImplementedError

    def part_one(self, chain, state, control, stab=None):
        """The same solver without active joints (seed Part I): (a, phi)."""
        raise NotImplementedError


class ActiveKKT(ActiveSolver):
    """Dense KKT system with the active rows (:func:`active_dynamics_kkt`)."""

    def __call__(self, chain, state, control, active, alpha_w, theta_bar=None, stab=None):
        return active_dynamics_kkt(chain, state, control, active, alpha_w, theta_bar, stab)

    def part_one(self, chain, state, control, stab=None):
        from .base import kkt_dynamics

        return kkt_dynamics(chain, state, control, stab)


class ActiveRecursive(ActiveSolver):
    """O(n) recursion of seed 000 Part II (:func:`active_dynamics_recursive`)."""

    def __call__(self, chain, state, control, active, alpha_w, theta_bar=None, stab=None):
        return active_dynamics_recursive(chain, state, control, active, alpha_w, theta_bar, stab)

    def part_one(self, chain, state, control, stab=None):
        from .recursive import recursive_dynamics

        return recursive_dynamics(chain, state, control, stab)
