"""The dynamics inside an event quantum: accelerations with the stuck points, held joints and sliders of the event
state (:func:`constrained_dynamics`), and the impact rule as a projection of the velocities onto the constraints in the
mass metric (:func:`impulse_projection`).
"""
from __future__ import annotations


import equinox as eqx
import jax
import jax.numpy as jnp

from .._constraints.held import joint_rows
from .._solvers.base import Solver
from .._solvers.recursive_solver import Recursive
from .._xla.batching import rare_cond
from .._xla.linalg import apply_q, apply_qt, cholesky, householder_qr, solve_lower, solve_upper
from .._model.forces import external_forces, torque_forces
from .detection import limit_arc
from .state import EventState, Events
from .._model.geometry import _pad_diff, joint_velocities, links, wrap_angle
from .._model.chain import Chain, Control, State
from .._model.model import GENERAL


def _where(c, x, y):
    return jax.tree_util.tree_map(lambda a, b: jnp.where(c, a, b), x, y)


def _mass_times(chain: Chain, a):
    if chain.has_links:
        return (chain.M @ a.reshape(-1)).reshape(a.shape)
    return chain.m[:, None] * a


def _active_rows(chain: Chain, es: EventState, x):
    """The rows J (m, 2n) of the constraints switched on, each scaled to unit length, and their scales: the rods
    (r_k^T (q_{k+1} - q_k)), the pinned points (q_i: guided or stuck), the sliders (s_i^T q_i) and the held joints
    (the rows of seed eq. 13); rows switched off are zero."""
    n, dt = chain.n, x.dtype
    pinned = chain.guided | es.stuck
    slider = chain.slider_mask & ~pinned
    eye = jnp.eye(2 * n, dtype=dt)
    _, _, r = links(x)
    k = jnp.arange(n - 1)
    rods = jnp.zeros((n - 1, n, 2), dt).at[k, k].set(-r).at[k, k + 1].set(r).reshape(n - 1, 2 * n)
    rods = jnp.where(chain.rod_on[:, None], rods, 0.0)
    ex, ey = eye[0::2], eye[1::2]  # q_i's x and y components
    rows_x = jnp.where(pinned[:, None], ex, jnp.where(slider[:, None], ex * chain.s[:, :1] + ey * chain.s[:, 1:], 0.0))
    rows_y = jnp.where(pinned[:, None], ey, 0.0)
    joints = jnp.where(es.held[:, None], joint_rows(x).reshape(n, 2 * n), 0.0) if n > 1 else jnp.zeros((0, 2 * n), dt)
    J = jnp.concatenate([rods, rows_x, rows_y, joints])
    norm = jnp.sqrt(jnp.sum(J * J, -1))
    scale = jnp.where(norm > 0, norm, 1.0)
    return J / scale[:, None], scale


def _metric(chain: Chain):
    """The mass metric of a chain: its dense mass matrix (rigid links) or its coordinates' masses (2n,)."""
    return chain.M if chain.has_links else jnp.repeat(chain.m, 2)


def _mass_metric_step(mass, J, q, target):
    """dq with J (q + dq) = target on the rows of J (unit rows, zero ones ignored), the smallest in the mass metric
    ``mass`` (a dense matrix M, or the diagonal's entries (2n,)): q + dq is the M-orthogonal projection of q onto
    {J q = target}. A regularised least-squares residual, robust to rank loss (see :func:`impulse_projection`); the
    part of q in the range of the rows is removed, the target's added."""
    dt, qf = q.dtype, q.reshape(-1)
    if mass.ndim == 2:
        C = cholesky(mass)
        A = solve_lower(C, J.T).T
        w = C.T @ qf
    else:
        sq = jnp.sqrt(mass)
        A, w = J / sq, sq * qf
    m, k = A.shape
    mu = jnp.finfo(dt).eps ** 0.625 * jnp.max(jnp.sqrt(jnp.sum(A * A, -1)), initial=0.0)
    R, V, beta = householder_qr(jnp.concatenate([A.T, mu * jnp.eye(m, dtype=dt)]))
    Q1t_w = apply_qt(V, beta, jnp.concatenate([w, jnp.zeros((m,), dt)]))[:m]
    y = solve_lower(R.T, target)  # R^-T target
    w_new = w - apply_q(V, beta, jnp.concatenate([Q1t_w - y, jnp.zeros((k,), dt)]))[:k]
    q_new = solve_upper(C.T, w_new) if mass.ndim == 2 else w_new / sq
    return q_new.reshape(q.shape) - q


def impulse_projection(chain: Chain, es: EventState, x, v):
    """The inelastic impact's velocity jump dv (n, 2): v + dv is the M-orthogonal projection of v onto the velocities
    that the constraints switched on allow (seed §7 Z1–Z3, §12.1),

        v+ = v - M^-1 J^T (J M^-1 J^T)^+ J v,

    J the rows of the rods (r_k^T (v_{k+1} - v_k) = 0), the stuck points (v_i = 0), the held joints (omega^z_i = 0,
    the rows of seed eq. 13) and the sliders (s_i^T v_i = 0); a guided point that is not stuck keeps its velocity
    (dv_i = 0, its prescribed motion). This is the seed's rule where the rods' stretching rates vanish; the seed's
    rule taken literally keeps those rates (the solver sees v = 0), and where the constrained velocities degenerate
    (a nearly straight run between pins: J nearly rank-deficient) it amplifies their drift by 1/sin of the bend. The
    projection never raises the kinetic energy, singular or not.

    Computed as a regularised least-squares residual, robust to rank loss: with M = C C^T, w = C^T v, A = J C^-T
    (rows of J scaled to unit length) and the thin QR factorisation [A^T; mu I] = Q R (full column rank for mu > 0),
    w+ = w - Q1 Q1^T w (Q1 the first 2n rows of Q): the Tikhonov form of the projection, A^T (A A^T + mu^2 I)^-1 A
    = Q1 Q1^T, whose eigenvalues lie in [0, 1), so |w+| <= |w| in floating point too (Q orthonormal). mu =
    eps^(5/8) max_k |A_k| (1.6e-10 relative in float64): constraints enforced to (mu / sigma)^2 along singular values
    sigma of A above mu, the pseudo-inverse's null space below it; a moving guided point adds Q1 R^-T (its rate).
    The factorizations are XLA loops (:mod:`diffchain._xla.linalg`), not LAPACK calls: under ``vmap`` on CPU,
    jaxlib 0.10's batched LAPACK kernels can deadlock each other."""
    n = chain.n
    J, _ = _active_rows(chain, es, x)
    # target rates: 0, but a guided point that is not stuck keeps its velocity
    keep = chain.guided & ~es.stuck
    target = jnp.concatenate([jnp.zeros((n - 1,), x.dtype), jnp.where(keep, v[:, 0], 0.0),
                              jnp.where(keep, v[:, 1], 0.0), jnp.zeros((J.shape[0] - 3 * n + 1,), x.dtype)])
    return _mass_metric_step(_metric(chain), J, v, target)


def project_onto_active(chain: Chain, events: Events, es: EventState, iterations: int = 1) -> State:
    """``es.state`` moved onto the constraints switched on, in the mass metric: ``iterations`` Newton steps
    dx = -M^-1 J^T (J M^-1 J^T)^-1 Phi(x) on the rods' lengths, the stuck points' pins, the guided points' positions
    (held where they are), the sliders' lines and the held joints' limits, then the velocities projected onto the
    tangent space there (:func:`impulse_projection`, which never raises the kinetic energy)."""
    if chain.topology == GENERAL:
        from .mechanism import project_onto_active as mechanism_projection
        return mechanism_projection(chain, events, es, iterations)
    n, x, v = chain.n, es.state.x, es.state.v
    lo, hi, _ = limit_arc(events)
    limit = jnp.where(es.side > 0, hi, lo)
    for _ in range(iterations):
        J, scale = _active_rows(chain, es, x)
        d = jnp.linalg.norm(x[1:] - x[:-1], axis=-1)
        pin = jnp.where(es.stuck[:, None], es.pin, x)  # guided points held where they are
        line = jnp.sum(chain.s * x, -1) - chain.c
        theta = _pad_diff(jnp.arctan2(x[1:, 1] - x[:-1, 1], x[1:, 0] - x[:-1, 0]))
        # J (x + dx) = J x - Phi: each row's value moved by minus its residual (on the row's scale)
        free_slider = chain.slider_mask & ~chain.guided & ~es.stuck
        phi = jnp.concatenate([d - chain.l, jnp.where(free_slider, line, x[:, 0] - pin[:, 0]), x[:, 1] - pin[:, 1],
                               wrap_angle(theta - limit)[: J.shape[0] - 3 * n + 1]])
        on = jnp.any(J != 0, -1)
        x = x + _mass_metric_step(_metric(chain), J, x, jnp.where(on, J @ x.reshape(-1) - phi / scale, 0.0))
    return State(x, v + impulse_projection(chain, es, x, v), es.state.t)


def constrained_dynamics(chain: Chain, events: Events, es: EventState, x, v, t, control: Control, stab, impulse,
                         solver: Solver = Recursive()):
    """One solver call with the event constraints switched on (seed §7, §12.1): returns a, tau_w and the reactions R.

    Stuck points are guided with a^w = PD towards the pin, held joints active with alpha^w = 0 and the PD correction
    towards the limit angle (time constant ``stab``). With ``impulse`` (a traced bool) the same call is the impact
    impulse of seed §7 Z1–Z2: gravity, control forces and every velocity-product and PD term zeroed (the solver sees
    v = 0 and stab = inf), a^w = -v at the stuck points, alpha^w = -omega^z at the held joints; the velocity jump dv
    returned is the M-orthogonal projection of :func:`impulse_projection`, which that rule equals where the rods do
    not stretch (tau_w and R stay the seed rule's impulsive torques and reactions; the rollout does not use them).
    R = M a - F^e - (rod forces) - (constraint torque forces) is the force of the point constraints on each point
    (the multipliers of their KKT rows); for a stuck point, the ground reaction.
    """
    if chain.topology == GENERAL:
        from .mechanism import constrained_dynamics as mechanism_dynamics
        return mechanism_dynamics(chain, events, es, x, v, t, control, stab, impulse, solver)
    stuck, held = es.stuck, es.held
    w = 1.0 / stab
    g = jnp.where(impulse, 0.0, chain.g)
    ch = eqx.tree_at(lambda c: (c.guided, c.g), chain, (chain.guided | stuck, g))
    pd = -(x - es.pin) * w**2 - 2.0 * v * w
    a_w = jnp.where(stuck[:, None], jnp.where(impulse, -v, pd), jnp.where(impulse, 0.0, control.a_w))
    u = Control(jnp.where(impulse, 0.0, control.tau), jnp.where(impulse, 0.0, control.forces()), a_w)
    omega = joint_velocities(State(x, v, t))
    alpha_w = jnp.where(impulse, -omega, 0.0)
    lo, hi, _ = limit_arc(events)
    theta_bar = jnp.where(held, jnp.where(es.side > 0, hi, lo), 0.0)
    s_in = State(x, jnp.where(impulse, 0.0, v), t)
    stab_in = jnp.where(impulse, jnp.inf, stab)

    def part_one(_):  # no joint held: the Part I solver gives the same accelerations, at half the cost
        sol = solver(ch, s_in, u, stab_in)
        return sol.a, sol.forces, jnp.zeros_like(alpha_w)

    def part_two(_):
        sol = solver.held(ch, s_in, u, held, alpha_w, theta_bar, stab_in)
        return sol.a, sol.forces, sol.tau_w

    a, phi, tau_w = rare_cond(jnp.any(held), part_two, part_one, None)

    def reactions(_):
        _, _, r = links(x)
        rods = _pad_diff(-r * phi[:, None]) if chain.n > 1 else jnp.zeros_like(a)
        return _mass_times(chain, a) - external_forces(ch, s_in, u) - rods - torque_forces(x, tau_w)

    # R vanishes (exactly, instead of to round-off) where no point is guided, stuck or on a line
    R = rare_cond(jnp.any(ch.guided | chain.slider_mask), reactions, lambda _: jnp.zeros_like(a), None)
    if impulse is False:  # (the quiet trial: known at trace time)
        return a, tau_w, R
    # the velocity jump: the projection (the solver's seed rule keeps the rods' stretching rates, see
    # :func:`impulse_projection`)
    a = rare_cond(impulse, lambda _: impulse_projection(chain, es, x, v), lambda _: a, None)
    return a, tau_w, R
