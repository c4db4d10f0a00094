"""Time stepping: ``step`` and rollouts with ``lax.scan`` (seed 000 §3, §12.2), for any integrator of
:mod:`diffchain._simulate.integrators` (the default: RK4 followed by the projection onto the constraints,
:class:`~diffchain._simulate.projection.Projected`)."""
from __future__ import annotations

import abc
import functools
import operator
from typing import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from .integrators import Integrator
from .._state import Control, State
from .._model.checks import InputError, compiled, control_checks, describe, finite_state_check, runtime_checks
from .._model.rods import state_checks
from .._model.model import Model, check_model
from .progress import ProgressMeter, check_progress, with_progress
from .projection import Projected
from .._solvers.implicit import KKT_SOLUTION
from .._analysis.diagnosis import check_run, run_checks
from .._solvers.base import Solver
from .._solvers.choice import check_solver
from .._solvers.recursive_solver import Recursive


REMEDY = "a smaller dt, or the default integrator Projected()"


class Backend(eqx.Module):
    """How :func:`~diffchain.rollout` runs under ``vmap``, chosen explicitly with ``rollout(..., backend=...)``. Without one
    (``backend=None``), the ``vmap`` of a rollout is the ``vmap`` of the one-chain program. Implementations:
    :class:`diffchain.PointMajor`."""

    @abc.abstractmethod
    def rollout(self, run: Callable[[Model, State, Control], tuple[State, State]], chain: Model, state: State,
                controls: Control, *, dt: ArrayLike, n_steps: int, solver: Solver,
                integrator: Integrator) -> tuple[State, State]:
        """The rollout ``run(chain, state, controls)`` (the one-chain program), in this backend's form."""


@compiled
def step(model: Model, state: State, control: Control, dt: ArrayLike, *, solver: Solver | None = None,
         integrator: Integrator = Projected(), check: bool = True) -> State:
    """One time quantum of length ``dt``: the functional ``step(model, state, control) -> state`` of a :func:`Chain`
    or a mechanism (its control: the motor torques, ``Control(tau=(n_motors,))``); ``solver`` as for
    :func:`rollout`.

    Arguments of the wrong type or shape raise at trace time. ``check=True`` also checks that ``dt`` is finite and
    nonzero (> 0 for an integrator that does not integrate backward in time, :attr:`Integrator.backward`), the control
    and the state finite (:class:`diffchain.InputError`), and that the new state is finite and on the constraints
    (as :func:`diffchain.diagnose` measures them), when the program runs if they are traced: inside a loop of your own that is
    one check per step, which ``check=False`` switches off (``rollout`` checks its inputs and its run once per call
    instead).
    """
    who = "step"
    solver = check_arguments(model, solver, integrator, who)
    if not isinstance(control, Control):
        raise TypeError(f"{who}: control must be a diffchain.Control, got {describe(control)}")
    model.check_inputs(state, control, who)
    pending = dt_checks(dt, who, check, integrator) + control_checks(control, who, check)
    pending += [finite_state_check(state, f"{who}: the state")] if check else []
    new = integrator.step(model, state, control, dt, solver)
    if check:  # and the result: finite and on the constraints (diffchain._analysis.diagnosis)
        one = jax.tree_util.tree_map(lambda a: jnp.asarray(a)[None], new)
        pending += run_checks(who, model, one, REMEDY)
    if pending:
        x, v = runtime_checks((new.x, new.v), pending)
        new = State(x, v, new.t)
    return new


def check_arguments(model, solver, integrator, who: str):
    """``solver`` (the model's default where None), after a TypeError naming ``model``, ``solver`` or ``integrator``
    when it is not a :class:`~diffchain.Model`, a :class:`Solver` that applies to the model, an :class:`Integrator`."""
    check_model(model, who)
    if not isinstance(integrator, Integrator):
        raise TypeError(f"{who}: integrator must be an Integrator instance: Projected(), RATTLE(), RK4(), "
                        f"SemiImplicitEuler(), SeedQuantum() (or a subclass of diffchain.Integrator), got "
                        f"{describe(integrator)}")
    if integrator.chains_only and not model.serial:
        raise TypeError(f"{who}: integrator must be a plain integrator (RK4(), SemiImplicitEuler(), SeedQuantum(), "
                        f"VelocityVerlet()) or one of them Projected(): {type(integrator).__name__} works on chains")
    return check_solver(solver, who, model)


def dt_checks(dt, who: str, traced: bool = True, integrator: Integrator | None = None) -> list:
    """Raise now unless ``dt`` is a finite real scalar, > 0 or, for an ``integrator`` that integrates backward in time
    (:attr:`Integrator.backward`), nonzero (None: an event rollout, whose events need forward time); for a traced
    ``dt``, the check to run with the program (a list for :func:`diffchain._model.checks.runtime_checks`; empty if not
    ``traced``)."""
    if jnp.ndim(dt) != 0:
        raise ValueError(f"{who}: dt must be a scalar time step, got shape {jnp.shape(dt)}")
    if not jnp.issubdtype(jnp.result_type(dt), jnp.number) or jnp.issubdtype(jnp.result_type(dt), jnp.complexfloating):
        raise TypeError(f"{who}: dt must be a real number, got {describe(dt)}")
    backward = integrator is not None and integrator.backward
    if backward:
        message = f"{who}: dt must be finite and nonzero (a negative dt integrates backward in time)"
    elif integrator is None:
        message = f"{who}: dt must be finite and > 0 (events need forward time: their times are the roots ahead)"
    else:
        message = (f"{who}: dt must be finite and > 0 for integrator={integrator!r}, which does not integrate "
                   "backward in time (an Integrator that does sets backward = True)")
    if not isinstance(dt, jax.core.Tracer):
        value = float(dt)
        if not (abs(value) < float("inf") and (value != 0 if backward else value > 0)):
            raise InputError(f"{message}, got {value}")
        return []
    ok = jnp.isfinite(dt) & ((dt != 0) if backward else (dt > 0))
    return [(~ok, message, dt)] if traced else []


def check_n_steps(n_steps, who: str):
    """``n_steps`` as an int >= 0 (None passes): it sets the length of the scan, so it must be known at trace time."""
    if n_steps is None:
        return None
    if isinstance(n_steps, jax.core.Tracer):
        raise TypeError(f"{who}: n_steps must be a Python int known at trace time (it sets the length of the scan), "
                        f"got a traced value; mark it static (jax.jit(..., static_argnames='n_steps'))")
    if isinstance(n_steps, (bool, np.bool_)) or jnp.ndim(n_steps) != 0:
        raise TypeError(f"{who}: n_steps must be an int >= 0, got {describe(n_steps)}")
    try:
        n_steps = operator.index(n_steps)
    except TypeError:
        raise TypeError(f"{who}: n_steps must be an int >= 0, got {describe(n_steps)}") from None
    if n_steps < 0:
        raise ValueError(f"{who}: n_steps must be an int >= 0, got {n_steps}")
    return n_steps


def mechanism_state_checks(mech, state: State, who: str, tol: float = 1e-6) -> list:
    """The checks that the start ``state`` of the mechanism ``mech`` is finite and on its constraints: the loop closure
    |Phi(q, t)| within ``tol`` of its longest length and its rate |Phi_q q_dot + Phi_t| within 100 ``tol`` (1 + max|v|),
    each with the round-off of the dtype (:mod:`diffchain._analysis.diagnosis` measures them as it does a run's),
    for :func:`diffchain._model.checks.runtime_checks`. A start drawn by hand is put there by :func:`diffchain.assemble`
    (and its velocities by :func:`diffchain.velocity_analysis`); rolling out from elsewhere would move it there in the
    first steps without a word (the projection, the drift correction)."""
    from .._analysis.diagnosis import _measures

    m = _measures(mech, jax.tree_util.tree_map(lambda a: jnp.asarray(a)[None], state), rtol=tol)
    return [finite_state_check(state, f"{who}: the start"),
            (m.finite[0] & (m.pos[0] > m.pos_tol[0]), f"{who}: the start must satisfy the mechanism's loop closure "
             f"Phi(q, t) = 0 (to {tol:g} of its longest length), got |Phi| = {{0:.3g}} (allowed: {{1:.3g}}); assemble "
             "it first: state, info = dc.assemble(mechanism, guess)", jnp.stack([m.pos[0], m.pos_tol[0]])),
            (m.finite[0] & (m.vel[0] > m.vel_tol[0]), f"{who}: the start's velocities must satisfy the mechanism's "
             "velocity constraints Phi_q q_dot + Phi_t = 0, got |Phi_q q_dot + Phi_t| = {0:.3g} (allowed: {1:.3g}); "
             "compute them with state, info = dc.velocity_analysis(mechanism, state)", jnp.stack([m.vel[0],
                                                                                              m.vel_tol[0]]))]


def check_controls(chain, controls, n_steps, who):
    """The shape and type checks of :func:`rollout`'s ``controls`` (and their agreement with ``n_steps``)."""
    if controls is None or (callable(controls) and not isinstance(controls, Control)):
        if n_steps is None:
            raise ValueError(f"{who}: a policy (or controls=None) needs n_steps")
        return controls
    if not isinstance(controls, Control):
        raise TypeError(f"{who}: controls must be a diffchain.Control with a leading time axis (tau (T, n)), a policy "
                        f"policy(state) -> Control, or None; got {describe(controls)}")
    if controls.tau.ndim != 2:
        k = chain.zero_control(controls.tau.dtype).tau.shape[0]
        raise ValueError(f"{who}: controls must carry a leading time axis, tau of shape (T, {k}), got tau of shape "
                         f"{controls.tau.shape} (for one control held over "
                         "n_steps, pass the policy lambda s: control)")
    T = controls.tau.shape[0]
    if n_steps is not None and n_steps != T:
        raise ValueError(f"{who}: n_steps={n_steps} but the controls have {T} steps")
    return controls


def _check_dtypes(chain, state, controls, who):
    arrays = [jnp.zeros((), chain.dtype), state.x] + ([controls.tau] if isinstance(controls, Control) else [])
    if jnp.result_type(*arrays) != state.x.dtype:
        kind = "chain" if chain.serial else "mechanism"
        raise TypeError(f"{who}: the state is {state.x.dtype} but the {kind} is {chain.dtype}"
                        + (f" and the controls {controls.tau.dtype}" if isinstance(controls, Control) else "")
                        + ": the steps would promote the state; build them in one dtype")


@compiled
def rollout(model: Model, state: State, controls: Control | Callable[[State], Control] | None, dt: ArrayLike, *,
            n_steps: int | None = None, solver: Solver | None = None, integrator: Integrator = Projected(),
            checkpoint: int | None = None, check: bool = True, backend: Backend | None = None,
            progress: ProgressMeter | None = None) -> tuple[State, State]:
    """Simulate a :class:`Model` (a chain or a mechanism) from ``state``; returns (final state, trajectory of the
    states after each step, stacked on axis 0).

    ``solver`` defaults to :class:`~diffchain.Recursive` for a chain and :class:`~diffchain.KKT` for a mechanism
    (which takes the dense solvers only). The default integrator ``Projected()`` keeps the constraints (rods and
    sliders; a mechanism's loop closure and its rate) to round-off.

    ``dt`` may be negative: the run then goes backward in time, with any integrator of the library
    (:attr:`Integrator.backward`). Only the symmetric schemes undo a step with the step back:
    :class:`~diffchain.RATTLE` to round-off, the others to within their local error.

    Arguments of the wrong type or shape raise at trace time (TypeError / ValueError naming them), as do known bad
    values (``dt`` not finite or zero, non-finite controls: :class:`diffchain.InputError`). ``check=True`` also
    validates the start with :func:`check_state` (on the rod and slider constraints, finite; a mechanism's start on its
    constraints Phi(q, t) = 0 and their rate, to 1e-6 of its size: :func:`diffchain.assemble` puts it there) and, when
    they are traced, ``dt`` and the controls: once per call, when the program runs (one ``lax.cond``;
    :func:`diffchain._model.checks.runtime_checks`), and the run itself: a ``ValueError`` says when its final state is
    not finite or off the rods and sliders beyond a tolerance that scales with the dtype
    (as :func:`diffchain.diagnose` measures it). ``check=False`` skips these (e.g. to
    study the drift correction on purpose, or for a program without host callbacks; :func:`diffchain.diagnose` then
    reports on the run without raising): from a start no motion can keep on the constraints, the PD drift correction
    may drag the chain into a singular pose and the rollout diverge.

    ``controls`` is a :class:`Control` whose leaves have a leading time axis (open loop), a policy
    ``policy(state) -> Control`` (closed loop), or None (no input); give ``n_steps`` for the last two.
    ``checkpoint=k`` recomputes the forward pass in segments of k steps during reverse-mode differentiation (memory
    O(T/k + k) instead of O(T)). With the recursive solver, reverse mode stores only each step's state and KKT
    solution (:func:`diffchain._solvers.recursive.kkt_solve`, :func:`diffchain._solvers.recursive.link_solve`) and
    recomputes the elementwise terms around it. ``backend`` chooses how a batch runs under ``vmap``: None, the ``vmap``
    of this program; ``PointMajor()``, the batched point-major program (:class:`~diffchain.PointMajor`) and its own
    adjoint (chains of point masses; the same results to round-off). ``progress``: a
    :class:`~diffchain.TextProgressMeter` or :class:`~diffchain.TqdmProgressMeter` shows the steps done while the
    compiled program runs (None: no meter, and no callback in the program).
    """
    who = "rollout"
    solver = check_arguments(model, solver, integrator, who)
    if not isinstance(state, State):
        raise TypeError(f"{who}: state must be a diffchain.State, got {describe(state)}")
    n_steps = check_n_steps(n_steps, who)
    if checkpoint is not None and (isinstance(checkpoint, bool) or not isinstance(checkpoint, (int, np.integer))
                                   or checkpoint < 1):
        raise ValueError(f"{who}: checkpoint must be None or an int >= 1 (steps per recomputed segment), got "
                         f"{checkpoint!r}")
    if backend is not None and not model.serial:
        raise TypeError(f"{who}: a mechanism runs with backend=None (the batched backends are for chains of point "
                        f"masses), got {describe(backend)}")
    progress = check_progress(progress, who)
    if progress is not None and backend is not None:
        raise TypeError(f"{who}: progress is shown by the default program (backend=None), not by "
                        f"{type(backend).__name__}()")
    controls = check_controls(model, controls, n_steps, who)
    model.check_inputs(state, controls, who, steps=True)
    _check_dtypes(model, state, controls, who)
    pending = dt_checks(dt, who, check, integrator)
    pending += control_checks(controls, who, check) if isinstance(controls, Control) else []
    if check:  # the start on the rods and sliders, or on a mechanism's constraints
        pending += state_checks(model, state) if model.serial else mechanism_state_checks(model, state, who)
    if pending:  # one run-time check, tied to the start (small: no array of the inputs passes through it)
        state = State(runtime_checks((state.x,), pending)[0], state.v, state.t)

    def plain(model, state, controls):
        return _rollout(model, state, controls, dt, n_steps, solver, integrator, checkpoint, progress)

    if backend is None:
        final, traj = plain(model, state, controls)
    elif not isinstance(backend, Backend):
        raise TypeError(f"rollout: backend must be None or a diffchain backend such as diffchain.PointMajor(), got "
                        f"{describe(backend)}")
    else:
        final, traj = backend.rollout(plain, model, state, controls, dt=dt, n_steps=n_steps, solver=solver,
                                      integrator=integrator)
    if check:  # the run itself: finite and on its constraints (diffchain._analysis.diagnosis): its final state
        final, traj = check_run("rollout", model, final, traj, REMEDY)
    return final, traj


def _rollout(chain, state, controls, dt, n_steps, solver, integrator, checkpoint, progress=None):
    def body(s, u):
        if not isinstance(u, Control):
            raise TypeError(f"rollout: the policy must return a diffchain.Control, got {describe(u)}")
        chain.check_inputs(s, u, "rollout")  # (at trace time: a policy's control)
        s = integrator.step(chain, s, u, dt, solver)
        return s, s

    if isinstance(solver, Recursive):
        # reverse mode keeps only the state and the KKT solutions of each step and recomputes the elementwise terms
        # around them, instead of storing every intermediate (the sweeps are never recomputed: kkt_solve, link_solve)
        body = jax.checkpoint(body, policy=jax.checkpoint_policies.save_only_these_names(KKT_SOLUTION),
                              prevent_cse=False)
    return _scan_rollout(chain, body, state, controls, n_steps, checkpoint, lambda s: s, progress=progress)


def _scan_rollout(chain: Model, body, init, controls, n_steps, checkpoint, to_state, keep=(), progress=None,
                  who="rollout"):
    """``lax.scan`` of ``body(carry, control) -> (carry, output)`` over open-loop controls, a policy of the
    :class:`State` ``to_state(carry)``, or None (zero input); optionally checkpointed in segments (see :func:`rollout`)
    whose reverse pass keeps their start and the values named ``keep`` (``jax.ad_checkpoint.checkpoint_name``), and
    with a :class:`~diffchain.ProgressMeter` (:func:`diffchain._simulate.progress.with_progress`)."""
    if controls is None:
        controls = lambda s: chain.zero_control(s.x.dtype)  # noqa: E731
    if callable(controls) and not isinstance(controls, Control):
        if n_steps is None:
            raise ValueError("rollout: a policy (or controls=None) needs n_steps")
        policy, xs = controls, None
    else:
        policy, xs = None, controls
        T = jax.tree_util.tree_leaves(controls)[0].shape[0]
        if n_steps is not None and n_steps != T:
            raise ValueError(f"rollout: n_steps={n_steps} but the controls have {T} steps")
        n_steps = T

    def closed(s, u):
        return body(s, policy(to_state(s)) if policy is not None else u)

    if checkpoint is None:
        if progress is not None:  # (the step number travels with the controls)
            closed, xs = with_progress(closed, progress, who, n_steps), (xs, jnp.arange(n_steps))
        return jax.lax.scan(closed, init, xs, length=n_steps)
    if n_steps % checkpoint:
        raise ValueError(f"rollout: n_steps={n_steps} must be a multiple of checkpoint={checkpoint}")
    seg = n_steps // checkpoint
    xs_seg = None if xs is None else jax.tree_util.tree_map(lambda u: u.reshape(seg, checkpoint, *u.shape[1:]), xs)

    @functools.partial(jax.checkpoint, policy=jax.checkpoint_policies.save_only_these_names(*keep) if keep else None)
    def segment(s, us):
        return jax.lax.scan(closed, s, us, length=checkpoint)

    if progress is not None:  # after each segment, outside what the reverse pass recomputes
        segment, xs_seg = with_progress(segment, progress, who, seg, checkpoint), (xs_seg, jnp.arange(seg))
    final, traj = jax.lax.scan(segment, init, xs_seg, length=seg)
    return final, jax.tree_util.tree_map(lambda u: u.reshape(n_steps, *u.shape[2:]), traj)
