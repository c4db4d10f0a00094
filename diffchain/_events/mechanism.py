"""The event dynamics of a mechanism (seed 000 §7, §12.1 on a model in natural coordinates, seed 003): the
same rules as a chain's (:mod:`diffchain._events.dynamics`), written as rows added to the mechanism's own.

A stuck contact point p_i = W_i q + c_i (affine in q) adds two rows W_i q_dd = a^w_i, with a^w_i the PD correction
towards its pin (seed eq. 33); its multipliers are the obstacle's force on the point, R_i. A held stop adds one row
G_j q_dd = -q_d^T H_j q_d + (PD towards the limit), G_j = d theta_j / dq of its relative angle theta_j; its multiplier
is the stop's torque tau_w_j. The accelerations come from the solver's ``system`` (any dense solver), the impact's
velocity jump is the M-orthogonal projection onto the rows switched on (as a chain's,
:func:`diffchain._events.dynamics.impulse_projection`).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .._model.chain import Control, State
from .._model.model import Model, pad
from .._constraints.system import system_terms
from .._xla.batching import rare_cond
from .detection import _slack, limit_arc
from .dynamics import _mass_metric_step
from .state import EventState, Events


def _limit_jacobian(mech: Model, q):
    """G (F, 2N): the stops' d theta / dq (padding: 0)."""
    return jax.jacfwd(lambda q_: pad(mech.limit_angles(q_), mech.n_features))(q)


def _contact_jacobian(mech: Model):
    """W_i (F, 2, 2N): the contact points' rows of W (padding: 0)."""
    P = mech.W.shape[0] // 2
    return pad(mech.W.reshape(P, 2, -1), mech.n_features)


def _event_rows(mech: Model, events: Events, es: EventState, x):
    """The rows (J_e (3F, 2N), on (3F,)) of the event constraints: two per contact point (on where stuck), one per
    stop (on where held), and the stops' angles theta (F,) and limits (F,) on their continuous branch."""
    F = mech.n_features
    G = _limit_jacobian(mech, x.reshape(-1))
    lo, hi, _ = limit_arc(events)
    theta = mech.feature_angles(x, es.theta)
    limit = jnp.where(es.held, jnp.where(es.side > 0, hi, lo), theta)  # (finite: a free stop's row is off)
    rows = jnp.concatenate([_contact_jacobian(mech).reshape(2 * F, -1), G])
    return rows, jnp.concatenate([jnp.repeat(es.stuck, 2), es.held]), theta, limit


def constrained_dynamics(mech: Model, events: Events, es: EventState, x, v, t, control: Control, stab, impulse,
                         solver):
    """a (N, 2), tau_w (F,) and R (F, 2) of the mechanism with the event constraints of ``es`` switched on: its
    solver's ``system`` on the mechanism's rows (Baumgarte with time constant ``stab``) and the event rows (module
    docstring). With ``impulse`` (a traced bool) the returned a is the velocity jump instead
    (:func:`impulse_projection`)."""
    F = mech.n_features
    w = 1.0 / stab
    M, Q, J, gamma, on = system_terms(mech, State(x, v, t), control, stab)
    rows, on_e, theta, limit = _event_rows(mech, events, es, x)
    a_c = -(mech.contact_points(x) - es.pin) * w**2 - 2.0 * mech.contact_rates(v) * w
    omega, vHv = mech.angle_rates(x, v, jnp.zeros_like(v))  # (alpha with q_dd = 0: q_d^T H q_d)
    a_l = -vHv - (theta - limit) * w**2 - 2.0 * omega * w
    gamma_e = jnp.where(on_e, jnp.concatenate([a_c.reshape(-1), a_l]), 0.0)
    sol = solver.system(M, Q, jnp.concatenate([J, jnp.where(on_e[:, None], rows, 0.0)]),
                        jnp.concatenate([gamma, gamma_e]), jnp.concatenate([on, on_e]))
    qdd, lam = sol.a, sol.forces
    nJ = J.shape[0]
    a, R, tau_w = qdd.reshape(x.shape), lam[nJ:nJ + 2 * F].reshape(F, 2), lam[nJ + 2 * F:]
    if impulse is False:
        return a, tau_w, R
    a = rare_cond(impulse, lambda _: impulse_projection(mech, events, es, x, v, t), lambda _: a, None)
    return a, tau_w, R


def _active(mech: Model, events: Events, es: EventState, x, t, positions=False):
    """All rows switched on, scaled to unit length (zero rows off), their scales, and the values Phi of their
    constraints: the mechanism's Phi(q, t), the stuck points' p_i - pin_i, the held stops' theta - limit. For the
    ``positions`` a stuck point keeps only its row along the obstacle's normal, z^T (p_i - pin_i): where the point
    lands is fixed by the loop (a point of a closed mechanism moves on a curve, which its pin, set from the
    quadratic's crossing, misses by the quantum's drift); along the line it stays where it is."""
    q = x.reshape(-1)
    J = jax.jacfwd(mech.phi)(q, t)
    rows, on_e, theta, limit = _event_rows(mech, events, es, x)
    gap = mech.contact_points(x) - es.pin
    if positions:
        F = mech.n_features
        Wc = _contact_jacobian(mech)
        rows = rows.at[:2 * F].set(jnp.stack([jnp.einsum("fd,fdn->fn", es.normal, Wc), jnp.zeros_like(Wc[:, 0])], 1
                                             ).reshape(2 * F, -1))
        gap = jnp.stack([jnp.sum(es.normal * gap, -1), jnp.zeros_like(gap[:, 0])], 1)
    J = jnp.concatenate([J * mech.on[:, None], jnp.where(on_e[:, None], rows, 0.0)])
    phi = jnp.concatenate([mech.phi(q, t), gap.reshape(-1), theta - limit])
    norm = jnp.sqrt(jnp.sum(J * J, -1))
    scale = jnp.where(norm > 0, norm, 1.0)
    return J / scale[:, None], scale, jnp.where(norm > 0, phi, 0.0)


def impulse_projection(mech: Model, events: Events, es: EventState, x, v, t):
    """The inelastic impact's velocity jump dv (N, 2): v + dv is the M-orthogonal projection of v onto the velocities
    the constraints switched on allow, Phi_q v + Phi_t = 0 (the mechanism's rows, its drivers moving on), W_i v = 0
    (stuck points), G_j v = 0 (held stops); it never raises the kinetic energy (a rheonomic driver aside)."""
    J, scale, _ = _active(mech, events, es, x, t)
    n_phi = mech.on.shape[0]
    phi_t = jax.jvp(lambda t_: mech.phi(x.reshape(-1), t_), (jnp.asarray(t, x.dtype),), (jnp.ones((), x.dtype),))[1]
    target = jnp.zeros(J.shape[0], x.dtype).at[:n_phi].set(-phi_t * mech.on / scale[:n_phi])
    return _mass_metric_step(mech.M, J, v, target)


def project_onto_active(mech: Model, events: Events, es: EventState, iterations: int = 1) -> State:
    """``es.state`` moved onto every constraint switched on in the mass metric (``iterations`` Newton steps on the
    mechanism's Phi, the stuck points' pins and the held stops' limits), then its velocities onto the tangent space
    there (:func:`impulse_projection`)."""
    x, v, t = es.state.x, es.state.v, es.state.t
    for _ in range(iterations):
        J, scale, phi = _active(mech, events, es, x, t, positions=True)
        x = x + _mass_metric_step(mech.M, J, x, J @ x.reshape(-1) - phi / scale)
    return State(x, v + impulse_projection(mech, events, es, x, v, t), t)


def onto_obstacles(mech: Model, events: Events, stuck, x):
    """x (N, 2) moved, smallest in the mass metric, so that every free contact point below an obstacle line is on it
    and every other constraint keeps its value (to first order), line by line; and whether any point moved. (A
    chain's points move alone: :func:`diffchain._events.detection.onto_obstacles`.)"""
    F, q = mech.n_features, x.reshape(-1)
    J = jax.jacfwd(mech.phi)(q, 0.0) * mech.on[:, None]
    Wc = _contact_jacobian(mech)
    free = mech.free_contacts(events.contact, stuck)
    keep = jnp.concatenate([J, jnp.where(jnp.repeat(stuck, 2)[:, None], Wc.reshape(2 * F, -1), 0.0)])
    moved = jnp.zeros((), bool)
    for k in range(events.z.shape[0]):
        g = _slack(events.z[k:k + 1], events.z0[k:k + 1], mech.contact_points(x))[:, 0]
        below = free & (g < 0)
        rows = jnp.concatenate([keep, jnp.where(below[:, None], jnp.einsum("d,fdn->fn", events.z[k], Wc), 0.0)])
        norm = jnp.sqrt(jnp.sum(rows * rows, -1))
        unit = rows / jnp.where(norm > 0, norm, 1.0)[:, None]
        target = unit @ x.reshape(-1) - jnp.concatenate([jnp.zeros(keep.shape[0], x.dtype), jnp.where(below, g, 0.0)]
                                                         ) / jnp.where(norm > 0, norm, 1.0)
        x = x + jnp.where(jnp.any(below), _mass_metric_step(mech.M, unit, x, target), 0.0)
        moved = moved | jnp.any(below)
    return x, moved
