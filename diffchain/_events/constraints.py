"""The event constraints as rows, on every model (seed 000 §7, §12.1 in natural coordinates, seed 003): the
impact's velocity jump and the projection onto every constraint switched on (:func:`impulse_projection`,
:func:`project_onto_active`), and a dense solver's accelerations with the event rows added to the model's own
(:func:`constrained_dynamics`; the recursion's form of a chain: :mod:`diffchain._events.dynamics`).

The event state's stuck points and held stops are kinds of the catalogue
(:class:`~diffchain._constraints.kinds.Contacts`, :class:`~diffchain._constraints.kinds.Stops`): two rows
W_i q_dd = a^w_i per stuck point, whose multipliers are the obstacle's force on the point, R_i; one row
G_j q_dd = -q_d^T H_j q_d + (PD towards the limit) per held stop or joint, whose multiplier is the holding torque
tau_w_j. The model's own rows are those of
:mod:`diffchain._constraints.system` (Phi's rows and the point kinds).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .._state import Control, State
from .._model.model import Model
from .._constraints.kinds import Contacts, Stops, contact_jacobian
from .._constraints.system import constraint_jacobian, point_residual, system_terms
from .._xla.batching import rare_cond
from .detection import _slack, limit_arc
from .._xla.linalg import apply_q, apply_qt, cholesky, householder_qr, row_norms, solve_lower, solve_upper
from .state import EventState, Events


def _metric(model: Model):
    """The mass metric: the mass matrix, or its diagonal (2N,) where the coordinates are point masses (a chain
    without rigid links)."""
    return jnp.repeat(model.m, 2) if model.W is None and model.bodies is None else model.M


def _mass_metric_step(mass, J, q, target):
    """dq with J (q + dq) = target on the rows of J (unit rows, zero ones ignored), the smallest in the mass metric
    ``mass`` (a dense matrix M, or the diagonal's entries (2N,)): q + dq is the M-orthogonal projection of q onto
    {J q = target}, robust to rank loss.

    A regularised least-squares residual: with M = C C^T, w = C^T q, A = J C^-T and the thin QR factorisation
    [A^T; mu I] = Q R (full column rank for mu > 0), w+ = w - Q1 (Q1^T w - R^-T target) (Q1 the first 2N rows of Q):
    the Tikhonov form of the projection, A^T (A A^T + mu^2 I)^-1 A = Q1 Q1^T, whose eigenvalues lie in [0, 1), so
    |w+| <= |w| in floating point too for a zero target (Q orthonormal). mu = eps^(5/8) max_k |A_k| (1.6e-10 relative
    in float64): constraints enforced to (mu / sigma)^2 along singular values sigma of A above mu, the
    pseudo-inverse's null space below it. The factorizations are XLA loops (:mod:`diffchain._xla.linalg`), not LAPACK
    calls: under ``vmap`` on CPU, jaxlib 0.10's batched LAPACK kernels can deadlock each other."""
    dt, qf = q.dtype, q.reshape(-1)
    if mass.ndim == 2:
        C = cholesky(mass)
        A = solve_lower(C, J.T).T
        w = C.T @ qf
    else:
        sq = jnp.sqrt(mass)
        A, w = J / sq, sq * qf
    m, k = A.shape
    mu = jnp.finfo(dt).eps ** 0.625 * jnp.max(row_norms(A), initial=0.0)
    R, V, beta = householder_qr(jnp.concatenate([A.T, mu * jnp.eye(m, dtype=dt)]))
    Q1t_w = apply_qt(V, beta, jnp.concatenate([w, jnp.zeros((m,), dt)]))[:m]
    y = solve_lower(R.T, target)  # R^-T target
    w_new = w - apply_q(V, beta, jnp.concatenate([Q1t_w - y, jnp.zeros((k,), dt)]))[:k]
    q_new = solve_upper(C.T, w_new) if mass.ndim == 2 else w_new / sq
    return q_new.reshape(q.shape) - q


def _event_kinds(model: Model, events: Events, es: EventState, x):
    """The event constraints of ``es`` as catalogue kinds: its stuck points (:class:`Contacts`) and its held stops
    (:class:`Stops`, at their limits, the angles on their continuous branch)."""
    lo, hi, _ = limit_arc(events)
    theta = model.feature_angles(x, es.theta)
    limit = jnp.where(es.held, jnp.where(es.side > 0, hi, lo), theta)  # (finite: a free stop's row is off)
    return Contacts(es.stuck, es.pin, es.normal), Stops(es.held, limit, theta)


def _stacked(rows):
    """The rows of several kinds, (J, gamma, on) or (J, on) each, as one set; rows switched off zero."""
    parts = [jnp.concatenate(p) for p in zip(*rows)]
    on = parts[-1]
    return (jnp.where(on[:, None], parts[0], 0.0),) + tuple(jnp.where(on, p, 0.0) for p in parts[1:-1]) + (on,)


def constrained_dynamics(model: Model, events: Events, es: EventState, x, v, t, control: Control, stab, impulse,
                         solver):
    """a (N, 2), tau_w (F,) and R (F, 2) of ``model`` with the event constraints of ``es`` switched on: a dense
    solver's ``system`` on the model's rows (drift correction with time constant ``stab``) and the event rows (module
    docstring). With ``impulse`` (a traced bool) the returned a is the velocity jump instead
    (:func:`impulse_projection`)."""
    F = model.n_features
    M, Q, J, gamma, on = system_terms(model, State(x, v, t), control, stab)
    J_e, gamma_e, on_e = _stacked([k.rows(model, x, v, 1.0 / stab) for k in _event_kinds(model, events, es, x)])
    sol = solver.system(M, Q, jnp.concatenate([J, J_e]), jnp.concatenate([gamma, gamma_e]), jnp.concatenate([on, on_e]))
    qdd, lam = sol.a, sol.forces
    nJ = J.shape[0]
    a, R, tau_w = qdd.reshape(x.shape), lam[nJ:nJ + 2 * F].reshape(F, 2), lam[nJ + 2 * F:]
    if impulse is False:
        return a, tau_w, R
    a = rare_cond(impulse, lambda _: impulse_projection(model, events, es, x, v, t), lambda _: a, None)
    return a, tau_w, R


def _active(model: Model, events: Events, es: EventState, x, t, positions=False):
    """All rows switched on, scaled to unit length (zero rows off), their scales, and the values Phi of their
    constraints: the model's rows (Phi(q, t), the point kinds: a slider's line, a guided point held where it is), the
    stuck points' p_i - pin_i, the held stops' theta - limit. For the ``positions`` a stuck point keeps only its row
    along the obstacle's normal, z^T (p_i - pin_i): where the point lands is fixed by the other constraints (a point
    of a closed chain or a mechanism moves on a curve, which its pin, set from the quadratic's crossing, misses by the
    quantum's drift); along the line it stays where it is."""
    q, F = x.reshape(-1), model.n_features
    J, _ = constraint_jacobian(model, x, t)
    kinds = _event_kinds(model, events, es, x)
    rows, on_e = _stacked([k.jacobian(model, x) for k in kinds])
    gap = model.contact_points(x) - es.pin
    if positions:
        Wc = contact_jacobian(model, x)
        normal = jnp.stack([jnp.einsum("fd,fdn->fn", es.normal, Wc), jnp.zeros_like(Wc[:, 0])], 1).reshape(2 * F, -1)
        rows = rows.at[:2 * F].set(jnp.where(on_e[:2 * F, None], normal, 0.0))
        gap = jnp.stack([jnp.sum(es.normal * gap, -1), jnp.zeros_like(gap[:, 0])], 1)
    J = jnp.concatenate([J, rows])
    phi = jnp.concatenate([model.phi(q, t), point_residual(model, q), gap.reshape(-1), kinds[1].theta - kinds[1].limit])
    norm = row_norms(J)
    scale = jnp.where(norm > 0, norm, 1.0)
    return J / scale[:, None], scale, jnp.where(norm > 0, phi, 0.0)


def impulse_projection(model: Model, events: Events, es: EventState, x, v, t):
    """The inelastic impact's velocity jump dv (N, 2): v + dv is the M-orthogonal projection of v onto the velocities
    the constraints switched on allow (seed §7 Z1–Z3, §12.1),

        v+ = v - M^-1 J^T (J M^-1 J^T)^+ (J v - target),

    J the rows of the model's constraints (Phi_q v + Phi_t = 0: a chain's rods, a mechanism's joints, its drivers
    moving on; a slider's s_i^T v_i = 0; a guided point keeps its velocity, its prescribed motion), the stuck points
    (W_i v = 0) and the held stops and joints (G_j v = 0). This is the seed's rule where a chain's rods do not
    stretch; the seed's rule taken literally keeps their stretching rates (its solver sees v = 0), and where the
    constrained velocities degenerate (a nearly straight run between pins: J nearly rank-deficient) it amplifies
    their drift by 1/sin of the bend. The projection never raises the kinetic energy (a rheonomic driver aside),
    singular or not (:func:`_mass_metric_step`)."""
    J, scale, _ = _active(model, events, es, x, t)
    n_phi, n_pt = model.rows_on.shape[0], 2 * model.guided.shape[0]
    phi_t = jax.jvp(lambda t_: model.phi(x.reshape(-1), t_), (jnp.asarray(t, x.dtype),), (jnp.ones((), x.dtype),))[1]
    guided = jnp.repeat(model.guided, 2)
    keep = jnp.where(guided, J[n_phi:n_phi + n_pt] @ v.reshape(-1), 0.0)
    target = jnp.zeros(J.shape[0], x.dtype).at[:n_phi].set(-phi_t * model.rows_on / scale[:n_phi])
    return _mass_metric_step(_metric(model), J, v, target.at[n_phi:n_phi + n_pt].set(keep))


def project_onto_active(model: Model, events: Events, es: EventState, iterations: int = 1) -> State:
    """``es.state`` moved onto every constraint switched on in the mass metric (``iterations`` Newton steps on the
    model's Phi and point kinds, the stuck points' pins and the held stops' limits, :func:`_active`), then its
    velocities onto the tangent space there (:func:`impulse_projection`)."""
    x, v, t = es.state.x, es.state.v, es.state.t
    for _ in range(iterations):
        J, scale, phi = _active(model, events, es, x, t, positions=True)
        x = x + _mass_metric_step(_metric(model), J, x, J @ x.reshape(-1) - phi / scale)
    return State(x, v + impulse_projection(model, events, es, x, v, t), t)


def onto_obstacles(model: Model, events: Events, stuck, x):
    """x (N, 2) with every free contact point that is below an obstacle line moved onto it, line by line; and whether
    any point moved. Used where a quantum ends without detecting its last sub-quantum's crossings (its budget used
    up). A chain's points move alone, along the line's normal: x_i - z_k min(0, z_k^T (x_i - z0_k)). A mechanism's
    points move with its coordinates: x moves the least in the mass metric that puts the point on the line while every
    other constraint keeps its value (to first order)."""
    if model.serial:
        free = model.free_contacts(events.contact, stuck)
        moved = jnp.zeros((), bool)
        for k in range(events.z.shape[0]):
            g = _slack(events.z[k:k + 1], events.z0[k:k + 1], x)[:, 0]
            below = free & (g < 0)
            x = x - jnp.where(below[:, None], g[:, None] * events.z[k], 0.0)
            moved = moved | jnp.any(below)
        return x, moved
    F, q = model.n_features, x.reshape(-1)
    J = jax.jacfwd(model.phi)(q, 0.0)
    Wc = contact_jacobian(model, x)
    free = model.free_contacts(events.contact, stuck)
    keep = jnp.concatenate([J, jnp.where(jnp.repeat(stuck, 2)[:, None], Wc.reshape(2 * F, -1), 0.0)])
    moved = jnp.zeros((), bool)
    for k in range(events.z.shape[0]):
        g = _slack(events.z[k:k + 1], events.z0[k:k + 1], model.contact_points(x))[:, 0]
        below = free & (g < 0)
        rows = jnp.concatenate([keep, jnp.where(below[:, None], jnp.einsum("d,fdn->fn", events.z[k], Wc), 0.0)])
        norm = row_norms(rows)
        unit = rows / jnp.where(norm > 0, norm, 1.0)[:, None]
        target = unit @ x.reshape(-1) - jnp.concatenate([jnp.zeros(keep.shape[0], x.dtype), jnp.where(below, g, 0.0)]
                                                         ) / jnp.where(norm > 0, norm, 1.0)
        x = x + jnp.where(jnp.any(below), _mass_metric_step(model.M, unit, x, target), 0.0)
        moved = moved | jnp.any(below)
    return x, moved
