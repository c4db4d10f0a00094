"""Per-step linearisations for trajectory optimisation (iLQR, DDP, MPC): A = dx+/dx and B = dx+/du of one
:func:`~diffchain.step` or :func:`~diffchain.event_step`, and the second-order terms of the step for DDP; the natural
frequencies of the small oscillations about a rest state (:func:`natural_frequencies`).

Nothing here re-derives the dynamics: every derivative is ``jax.jacfwd`` of the library's own step. Across an event
(an impact or a limit hit inside the quantum) the step's derivative already includes how the event time moves with
the state (the event times are roots of the seed's quadratic, differentiated as such), which is the saltation term of
the hybrid linearisation; tests/analysis/test_linearize.py checks it against the closed-form saltation matrix.

Two coordinate systems:

* ``coords="points"``: x = (the state's positions x.ravel(), its velocities v.ravel()), 4N numbers for N coordinate
  points. On a model with constraints these are redundant; A maps onto the tangent of the constraints (the default
  integrator projects onto them) and is singular.
* ``coords="minimal"``: independent coordinates and their rates, x = (q, q_dot). A chain's q is its base (point 1:
  nothing if it is guided, a pin; its position along the rail if it is a slider; its (x, y) if it is free) followed by
  its joint angles theta_1..theta_{n-1} (:func:`diffchain.joint_angles`), q_dot the same rates. A mechanism's q are its
  motor angles (:meth:`Model.motor_angles`), which must be as many as its degrees of freedom (a fully actuated
  mechanism: a four-bar with its crank motor). :func:`minimal_coordinates` and :func:`from_minimal_coordinates` are the
  chart and its inverse.

u is the control's torques ``control.tau`` (``inputs="tau"``, the default) or its point forces ``control.F`` flattened
(``inputs="F"``: 2P numbers, e.g. the force on a cart); the rest of the given control is held.
"""
from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
from jax.typing import ArrayLike

from .._events.quantum import _event_quantum, check_event_integrator
from .._events.state import EventState, Events
from .._model.checks import compiled, describe
from .._model.geometry import joint_velocities, link_angles, wrap_angle
from .._model.rods import from_joint_angles
from .._model.model import Model, check_model
from .._simulate.integrators import Integrator, VelocityVerlet
from .._simulate.projection import Projected
from .._simulate.rollout import dt_checks, step
from .._solvers.base import Solver
from .._state import Control, State

COORDS = ("points", "minimal")


# -- the chart of minimal coordinates ---------------------------------------------------------------------------------
def _layout(model: Model, who: str, instead: str = "use coords='points'"):
    """The static layout of a model's minimal coordinates, read off its kinds before anything is traced: ("chain",
    base) with base "pinned" (point 1 guided: carried from the state), "rail" (a slider: its position along the
    line) or "free"; ("mechanism", number of motors). A ValueError where the chart does not apply: a chain with
    guided or sliding points beyond point 1 (its joint angles are then not independent coordinates), a mechanism
    with fewer or more motors than degrees of freedom."""
    check_model(model, who)
    if not model.serial:
        return "mechanism", _mechanism_motors(model, who, instead)
    guided, slider = model.guided, model.slider
    if isinstance(guided, jax.core.Tracer) or isinstance(slider, jax.core.Tracer):
        raise TypeError(f"{who}: coords='minimal' reads the chain's joint kinds (its boolean masks guided, slider) "
                        "before tracing: they are traced here (the chain passed into a jit or vmap of yours); close "
                        "over the chain (jax.jit(lambda s, u: ...(chain, s, u, ...))) or vmap over its float arrays "
                        "only")
    guided, slider = np.asarray(guided), np.asarray(slider) & ~np.asarray(guided)
    if guided[1:].any() or slider[1:].any():
        numbers = lambda mask: [int(i) + 1 for i in np.flatnonzero(mask)]  # noqa: E731  (numbered from 1)
        raise ValueError(f"{who}: coords='minimal' needs a chain whose points 2..n are free (their joint angles are "
                         f"then independent coordinates), got guided points {numbers(guided)} and sliders "
                         f"{numbers(slider)} (numbered from 1); {instead}")
    return "chain", "pinned" if guided[0] else "rail" if slider[0] else "free"


def _rail(model: Model):
    """Point 1's line {x : s.x = c}: its point c s and its unit tangent t = (s_y, -s_x) (the +x axis for s = +y)."""
    s, c = model.s[0], model.c[0]
    return c * s, jnp.stack([s[1], -s[0]])


def _mechanism_motors(model: Model, who: str, instead: str) -> int:
    """The number of motors, after a ValueError unless it is the mechanism's number of degrees of freedom (2N minus
    its nominal rank, else minus its rows switched on)."""
    k, dof = model.motor_idx.shape[0], None
    if model.nominal_rank >= 0:
        dof = 2 * model.n - model.nominal_rank
    elif not isinstance(model.on, jax.core.Tracer):
        dof = 2 * model.n - int(np.sum(np.asarray(model.on)))
    if k == 0 or (dof is not None and k != dof):
        raise ValueError(f"{who}: coords='minimal' for a mechanism takes its motor angles as the independent "
                         f"coordinates, so it needs as many motors as degrees of freedom: got {k} motors and "
                         f"{dof if dof is not None else 'an unknown number of'} degrees of freedom; {instead}")
    return k


def _check_state(state, who):
    if not isinstance(state, State):
        raise TypeError(f"{who}: state must be a diffchain.State, got {describe(state)}")
    if state.x.ndim != 2:
        raise ValueError(f"{who}: state must be one state, x of shape (N, 2), got {state.x.shape} (vmap over a "
                         "batch)")


def minimal_coordinates(model: Model, state: State, ref: npt.ArrayLike | None = None) -> jax.Array:
    """The minimal coordinates (q, q_dot) of ``state``, one flat vector (``coords="minimal"`` of :func:`~diffchain.linearize`): a
    chain's base (none for a pinned point 1, its position along the rail for a slider, (x, y) for a free point) and
    joint angles theta_1..theta_{n-1}, then their rates; a mechanism's motor angles, then their rates.

    The angles are wrapped to (-pi, pi], or with ``ref`` (minimal coordinates of the same layout, e.g. the previous
    step's) on the branch within pi of its angles, so that a trajectory's angles are continuous."""
    who = "minimal_coordinates"
    layout = _layout(model, who)
    _check_state(state, who)
    return _minimal(model, state, None if ref is None else jnp.asarray(ref), layout, who)


def from_minimal_coordinates(model: Model, z: npt.ArrayLike, state: State, *, n_newton: int = 3) -> State:
    """The :class:`State` with the minimal coordinates ``z`` (:func:`minimal_coordinates`), at ``state``'s time. What
    ``z`` does not hold comes from ``state``: a chain's pinned point 1 (its position and velocity); a mechanism's
    configuration branch, by ``n_newton`` Newton steps from ``state`` on Phi(q, t) = 0, motor angles(q) = z's angles
    (exact at ``z = minimal_coordinates(model, state)``, and so are the derivatives of the result there: the k-th
    derivative after k Newton steps), and its velocities from [Phi_q; J_m] q_dot = [-Phi_t; z's rates]."""
    who = "from_minimal_coordinates"
    layout = _layout(model, who)
    _check_state(state, who)
    return _from_minimal(model, jnp.asarray(z, state.x.dtype), state, layout, n_newton, who)


def _n_minimal(model, layout) -> int:
    kind, what = layout
    return what if kind == "mechanism" else {"pinned": 0, "rail": 1, "free": 2}[what] + model.n - 1


@compiled
def _minimal(model, state, ref, layout, who):
    kind, base = layout
    if kind == "chain":
        x, v = state.x, state.v
        phi = link_angles(x)
        theta = jnp.concatenate([phi[:1], phi[1:] - phi[:-1]])
        omega = joint_velocities(state)[:-1]
        if base == "free":
            q, qd = jnp.concatenate([x[0], theta]), jnp.concatenate([v[0], omega])
        elif base == "rail":
            _, t = _rail(model)
            q, qd = jnp.concatenate([(t @ x[0])[None], theta]), jnp.concatenate([(t @ v[0])[None], omega])
        else:
            q, qd = theta, omega
    else:
        q, qd = jax.jvp(model.motor_angles, (state.x.reshape(-1),), (state.v.reshape(-1),))
    first = q.shape[0] - (model.n - 1 if kind == "chain" else q.shape[0])  # the angles' first index
    z = jnp.concatenate([q, qd])
    angle = np.zeros(z.shape[0], bool)
    angle[first:q.shape[0]] = True
    if ref is None:
        return jnp.where(angle, wrap_angle(z), z)
    if ref.shape != z.shape:
        raise ValueError(f"{who}: ref must be minimal coordinates of the same model, shape {z.shape}, got "
                         f"{ref.shape}")
    ref = ref.astype(z.dtype)
    return jnp.where(angle, ref + wrap_angle(z - ref), z)


@compiled
def _from_minimal(model, z, state, layout, n_newton, who):
    kind, base = layout
    n_q = _n_minimal(model, layout)
    if z.shape != (2 * n_q,):
        raise ValueError(f"{who}: z must be the model's minimal coordinates (q, q_dot), shape ({2 * n_q},), got "
                         f"{z.shape}")
    q, qd = z[:n_q], z[n_q:]
    if kind == "chain":
        k = n_q - (model.n - 1)
        if base == "free":
            x0, v0 = q[:2], qd[:2]
        elif base == "rail":
            c, t = _rail(model)
            x0, v0 = c + q[0] * t, qd[0] * t
        else:
            x0, v0 = state.x[0], state.v[0]
        return from_joint_angles(model, q[k:], qd[k:], base=x0, base_velocity=v0, t=state.t)
    theta, omega, t = q, qd, state.t

    def residual(q_):
        return jnp.concatenate([model.phi(q_, t), wrap_angle(model.motor_angles(q_) - theta)])

    def solve(K, r):  # the minimum-norm solution of K dq = r (redundant constraint rows allowed, as assemble's)
        eps = 1e-14 * (1.0 + jnp.max(jnp.abs(K)) ** 2)
        return K.T @ jnp.linalg.solve(K @ K.T + eps * jnp.eye(K.shape[0], dtype=K.dtype), r)

    q = state.x.reshape(-1)
    for _ in range(n_newton):
        q = q - solve(jax.jacfwd(residual)(q), residual(q))
    K = jax.jacfwd(residual)(q)
    phi_t = jax.jacfwd(lambda t_: model.phi(q, t_))(t)
    qd = solve(K, jnp.concatenate([-phi_t, omega]))
    return State(q.reshape(state.x.shape), qd.reshape(state.x.shape), t)


# -- the linearisations -------------------------------------------------------------------------------------------
def _flat(state: State):
    return jnp.concatenate([state.x.reshape(-1), state.v.reshape(-1)])


def _unflat(X, like: State) -> State:
    k = like.x.size
    return State(X[:k].reshape(like.x.shape), X[k:].reshape(like.x.shape), like.t)


def _layout_of(model, coords, who):
    """The layout of :func:`_layout` for coords="minimal", None for "points", after a ValueError naming ``coords``."""
    check_model(model, who)
    if coords not in COORDS:
        raise ValueError(f"{who}: coords must be one of {COORDS}, got {coords!r}")
    return _layout(model, who) if coords == "minimal" else None


def _map(model, state: State, advance, layout, who: str):
    """(f, x0): the step ``advance(state, tau) -> state`` as a function f(x, tau) of flat coordinates (points where
    ``layout`` is None, else minimal), and the coordinates x0 of ``state``."""
    if layout is None:
        return (lambda X, tau: _flat(advance(_unflat(X, state), tau))), _flat(state)
    z0 = _minimal(model, state, None, layout, who)
    return (lambda z, tau: _minimal(model, advance(_from_minimal(model, z, state, layout, 3, who), tau), z, layout,
                                    who)), z0


INPUTS = ("tau", "F")


def _inputs(model, control, inputs, who):
    """(u0, to_control): the inputs u of ``control`` that B differentiates (``inputs``: "tau", the torques, or "F",
    the point forces flattened) and the map from u back to a control (the rest of ``control`` held)."""
    if control is None:
        control = model.zero_control(model.dtype)
    if not isinstance(control, Control):
        raise TypeError(f"{who}: control must be a diffchain.Control (or None: no input), got {describe(control)}")
    if inputs == "tau":
        return control.tau, lambda u: Control(u, control.F, control.a_w)
    if inputs == "F":
        F = jnp.zeros((model.n_points, 2), control.tau.dtype) if control.F is None else control.F
        return F.reshape(-1), lambda u: Control(control.tau, u.reshape(F.shape), control.a_w)
    raise ValueError(f"{who}: inputs must be one of {INPUTS} (B with respect to the torques or the point forces), "
                     f"got {inputs!r}")


def _step_map(model, state, control, dt, layout, inputs, solver, integrator, check, who):
    _check_state(state, who)
    u0, to_control = _inputs(model, control, inputs, who)

    def advance(s, u):
        return step(model, s, to_control(u), dt, solver=solver, integrator=integrator, check=check)

    f, x0 = _map(model, state, advance, layout, who)
    return f, x0, u0


def _event_map(model, events, es, control, dt, layout, inputs, solver, integrator, saltation, who):
    if not isinstance(events, Events):
        raise TypeError(f"{who}: events must be a diffchain.Events, got {describe(events)}")
    if not isinstance(es, EventState):
        raise TypeError(f"{who}: es must be a diffchain.EventState, got {describe(es)}")
    _check_state(es.state, who)
    u0, to_control = _inputs(model, control, inputs, who)
    # the cache of the last solver call (es.a, ...) holds no derivative with respect to the state: recompute it
    es = eqx.tree_at(lambda e: e.fresh, es, jnp.zeros_like(es.fresh))

    check_event_integrator(integrator, who)

    def advance(s, u):  # event_step, with the event times' derivatives held at zero unless ``saltation``
        new, _ = _event_quantum(model, events, eqx.tree_at(lambda e: e.state, es, s), to_control(u), dt, solver,
                                integrator, saltation)
        return new.state

    f, x0 = _map(model, es.state, advance, layout, who)
    return f, x0, u0


def linearize(model: Model, state: State, control: Control | None, dt: ArrayLike, *, coords: str = "points",
              inputs: str = "tau", solver: Solver | None = None, integrator: Integrator = Projected(),
              check: bool = False) -> tuple[jax.Array, jax.Array]:
    """(A, B) = (dx+/dx, dx+/du) of one :func:`~diffchain.step` from ``state`` under ``control`` (None: no input),
    in the coordinates ``coords``: "points" (x = the state's x and v flattened, 4N numbers) or "minimal" (the
    independent coordinates and their rates of :func:`minimal_coordinates`). u: the control's torques ``tau``, or
    with ``inputs="F"`` its point forces flattened (2P). ``solver`` and ``integrator`` as for ``step``;
    ``check=True`` adds ``step``'s run-time checks (host checks: leave them off in a batch).

    ``jax.jacfwd`` of the step itself. For a trajectory and a batch of copies, ``vmap`` it over the states and
    controls and compile the whole, with the model closed over:
    ``jax.jit(jax.vmap(jax.vmap(lambda s, u: dc.linearize(model, s, u, dt))))(states, controls)``, states and
    controls with leading axes (copies, steps), is one program."""
    layout = _layout_of(model, coords, "linearize")
    dt_checks(dt, "linearize", False, integrator)  # a known dt: finite, > 0 (or nonzero: Integrator.backward)
    return _linearize(model, state, control, dt, layout, inputs, solver, integrator, check)


@compiled
def _linearize(model, state, control, dt, layout, inputs, solver, integrator, check):
    f, x0, u0 = _step_map(model, state, control, dt, layout, inputs, solver, integrator, check, "linearize")
    return jax.jacfwd(f, argnums=(0, 1))(x0, u0)


def event_linearize(model: Model, events: Events, es: EventState, control: Control | None, dt: ArrayLike, *,
                    coords: str = "points", inputs: str = "tau", solver: Solver | None = None,
                    integrator: Integrator = VelocityVerlet(),
                    saltation: bool | jax.Array = True) -> tuple[jax.Array, jax.Array]:
    """(A, B) = (dx+/dx, dx+/du) of one :func:`~diffchain.event_step` from ``es`` (x: its state's positions and
    velocities, or their minimal coordinates; u as for :func:`linearize`; its event masks, pins and angle branches are
    held).

    For the sequence of events that the quantum from ``es`` meets. Where it contains an impact or a limit hit, the
    derivative includes how the event time moves with x: A is the hybrid (saltation) linearisation, the flow to the
    event, the saltation matrix of the jump, the flow after it. At a state where a small change adds or removes an
    event (a grazing contact) no linearisation describes the step.

    ``saltation=False`` holds the event times fixed: the same flows and jumps, but x moves no event in time (the
    saltation matrix's timing term dropped), the linearisation that a method blind to event times uses; to compare
    (``examples/ilqr.py`` runs iLQR through an impact with both). A boolean scalar array (traced under ``jit``)
    chooses at run time, one compiled program for both."""
    layout = _layout_of(model, coords, "event_linearize")
    dt_checks(dt, "event_linearize", False)  # a known dt: finite and > 0 (events need forward time)
    if not (isinstance(saltation, bool) or (isinstance(saltation, jax.Array) and saltation.shape == ()
                                            and saltation.dtype == bool)):
        raise TypeError(f"event_linearize: saltation must be True, False or a boolean scalar array, got "
                        f"{describe(saltation)}")
    return _event_linearize(model, events, es, control, dt, layout, inputs, solver, integrator, saltation)


@compiled
def _event_linearize(model, events, es, control, dt, layout, inputs, solver, integrator, saltation):
    f, x0, u0 = _event_map(model, events, es, control, dt, layout, inputs, solver, integrator, saltation,
                           "event_linearize")
    return jax.jacfwd(f, argnums=(0, 1))(x0, u0)


def step_hessians(model: Model, state: State, control: Control | None, dt: ArrayLike, lam: npt.ArrayLike, *,
                  coords: str = "points", inputs: str = "tau", solver: Solver | None = None,
                  integrator: Integrator = Projected(), check: bool = False) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The second-order terms of one :func:`~diffchain.step` for DDP: the Hessians of lam . x+(x, u) with respect
    to x and u, ``(f_xx, f_ux, f_uu)`` of shapes (nx, nx), (nu, nx), (nu, nu), i.e. sum_i lam_i d^2 x+_i / d. d., in
    the coordinates and inputs of :func:`linearize` (``lam``: e.g. the value function's gradient at x+, shape
    (nx,)). The full Hessians of a small system are these with lam a unit vector (``vmap`` over ``jnp.eye(nx)``).
    Forward over forward mode of the step: (nx + nu)^2 directions."""
    layout = _layout_of(model, coords, "step_hessians")
    dt_checks(dt, "step_hessians", False, integrator)
    return _step_hessians(model, state, control, dt, lam, layout, inputs, solver, integrator, check)


@compiled
def _step_hessians(model, state, control, dt, lam, layout, inputs, solver, integrator, check):
    f, x0, u0 = _step_map(model, state, control, dt, layout, inputs, solver, integrator, check, "step_hessians")
    lam = jnp.asarray(lam, x0.dtype)
    if lam.shape != x0.shape:
        raise ValueError(f"step_hessians: lam must have one entry per coordinate of x+, shape {x0.shape}, got "
                         f"{lam.shape}")
    grad = jax.jacfwd(lambda x, u: lam @ f(x, u), argnums=(0, 1))
    (gxx, _), (gux, guu) = jax.jacfwd(grad, argnums=(0, 1))(x0, u0)
    return gxx, gux, guu


# -- small oscillations -----------------------------------------------------------------------------------------------
def natural_frequencies(model: Model, state: State) -> tuple[jax.Array, jax.Array]:
    """(omega, modes): the natural angular frequencies (rad/s, ascending) and mode shapes of the small oscillations
    of ``model`` about the configuration of ``state`` (its velocities are ignored), in the minimal coordinates q of
    :func:`minimal_coordinates` (a chain's joint angles; a fully actuated mechanism's motor angles): the generalized
    eigenproblem K v = omega^2 M v with K = d^2 V / dq^2, V the potential energy (gravity, springs, the force kinds'
    potentials: :func:`~diffchain.energy` at rest), and M = J^T M_x J the mass matrix (M_x the model's, J = dx/dq),
    both by automatic differentiation through the chart (:func:`from_minimal_coordinates`). ``modes`` (n_q, n_q):
    column k the mode of omega[k], M-orthonormal (v^T M v = 1).

    ``state`` must be a static equilibrium of the model without inputs (no torques or forces holding it, no moving
    drivers): about another configuration K is not the linearisation's stiffness. A free motion (a rigid turn) has
    omega 0 (eigenvalues within round-off of 0), an unstable direction (K not positive semi-definite) omega NaN.
    Differentiable (forward and reverse mode) with respect to the model's arrays. A mechanism needs as many motors
    as degrees of freedom (their angles are its coordinates): motors left without torque change nothing, e.g. one at
    each spring of a :meth:`~diffchain.MechanismBuilder.flexible_link`."""
    who = "natural_frequencies"
    layout = _layout(model, who, "add motors (they may be left without torque) until there are as many, e.g. one "
                                 "at each spring of a flexible link")
    _check_state(state, who)
    return _natural_frequencies(model, state, layout)


@compiled
def _natural_frequencies(model, state, layout):
    who = "natural_frequencies"
    z0 = _minimal(model, state, None, layout, who)
    n_q = z0.shape[0] // 2
    q0 = z0[:n_q]

    def x(q):  # the coordinates at the minimal coordinates q (two Newton steps: exact to second order at q0)
        return _from_minimal(model, jnp.concatenate([q, jnp.zeros_like(q)]), state, layout, 2, who).x

    def V(q):
        return model.energy(State(x(q), jnp.zeros_like(state.x), state.t))

    J = jax.jacfwd(lambda q: x(q).reshape(-1))(q0)
    K, M = jax.hessian(V)(q0), J.T @ model.M @ J  # T = (1/2) qdot^T J^T M J qdot
    C = jnp.linalg.cholesky(M)
    Ci = jax.scipy.linalg.solve_triangular(C, jnp.eye(n_q, dtype=M.dtype), lower=True)
    w2, U = jnp.linalg.eigh(Ci @ K @ Ci.T)
    w2 = jnp.where(jnp.abs(w2) <= 100 * jnp.finfo(w2.dtype).eps * jnp.max(jnp.abs(w2)), 0.0, w2)  # a free motion
    return jnp.sqrt(w2), Ci.T @ U
