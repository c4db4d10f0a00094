""":func:`event_rollout`: event quanta (:mod:`diffchain._events.quantum`) in one ``lax.scan``.
"""
from __future__ import annotations

from typing import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._simulate.integrators import Integrator, VelocityVerlet
from .._solvers.base import Solver
from .._solvers.choice import check_solver
from .._model.model import Model, check_model
from .state import EventState, Events, StepReport, check_event_state
from .._state import Control, State
from .._model.checks import compiled, runtime_checks
from .._analysis.diagnosis import check_run
from .._solvers.implicit import KKT_SOLUTION
from .._simulate.progress import ProgressMeter, check_progress
from .quantum import SLOTS, _event_quantum, check_event_integrator


@compiled
def event_rollout(model: Model, events: Events, es: EventState,
                  controls: Control | Callable[[State], Control] | None, dt: ArrayLike, *,
                  n_steps: int | None = None, solver: Solver | None = None, integrator: Integrator = VelocityVerlet(),
                  checkpoint: int | None = 1, check: bool = True,
                  progress: ProgressMeter | None = None) -> tuple[EventState, tuple[EventState, StepReport]]:
    """:func:`event_step` in a ``lax.scan``; returns (final EventState, (EventStates, StepReports) after each quantum).

    ``integrator``: :class:`diffchain.VelocityVerlet` (the default) or :class:`diffchain.SeedQuantum` (the seed as
    written), plain or projected, as for :func:`event_step`. ``controls`` as in :func:`diffchain.rollout`: a stacked
    :class:`Control`, a policy ``policy(state) -> Control`` (it sees the :class:`State`), or None; ``checkpoint=k``
    recomputes segments of k quanta in reverse mode (default 1: the reverse pass keeps each quantum's start, the
    result of its slots and its solver solutions, and recomputes the rest instead of storing its hundreds of
    intermediate arrays; None stores them). ``model`` may be a :func:`Chain` or a
    mechanism (with ``dc.Events(mechanism, ...)``, ``dc.EventState(state, model=mechanism)`` and the motor
    torques as controls, ``Control(tau=(T, n_motors))``); ``solver`` defaults to the recursion for a chain, dense KKT
    for a mechanism. ``dt`` must be > 0 (events need forward time). The start is validated by
    :func:`check_event_state` unless ``check=False`` (e.g. to study drift on purpose), and so is the run: a
    ``ValueError`` says when its final state is not finite or off the rods and sliders beyond a tolerance that scales
    with the dtype (as :func:`diffchain.diagnose` measures it). Quanta that used up their budget are counted in the
    StepReports (``exhausted``) and by :func:`diffchain.diagnose`, not raised. ``progress``: a progress meter, as for
    :func:`diffchain.rollout`.
    """
    chain = model  # (a chain or a mechanism)
    from .._simulate.rollout import check_controls, describe, _scan_rollout, check_n_steps, control_checks, dt_checks

    who = "event_rollout"
    solver = check_solver(solver, who, check_model(chain, who))
    check_event_integrator(integrator, who)
    progress = check_progress(progress, who)
    if not isinstance(es, EventState):
        raise TypeError(f"{who}: es must be a diffchain.EventState (e.g. dc.EventState(state)), got {describe(es)}")
    n_steps = check_n_steps(n_steps, who)
    controls = check_controls(chain, controls, n_steps, who)
    chain.check_inputs(es.state, controls, who, steps=True)
    pending = dt_checks(dt, who, check)  # (integrator None: events need forward time)
    pending += control_checks(controls, who, check) if isinstance(controls, Control) else []
    if pending:
        es = eqx.tree_at(lambda e: e.state.x, es, runtime_checks((es.state.x,), pending)[0])
    es = check_event_state(chain, events, es) if check else es
    es = eqx.tree_at(lambda e: e.fresh, es, jnp.zeros_like(es.fresh))  # the cache may come from another chain or dt
    if controls is None:  # zero input: the cached control is set to it once and passed as each quantum's control, so
        # that the quanta neither compare it with the cache nor write it again
        es = eqx.tree_at(lambda e: e.control, es, jax.tree_util.tree_map(jnp.zeros_like, es.control))

    def body(carry, u):
        u = carry.control if controls is None else u
        carry, rep = _event_quantum(chain, events, carry, u, dt, solver, integrator)
        return carry, (carry, rep)

    # quantum by quantum, reverse mode also keeps the slots' result and the solver solutions: the slots then run once
    # more only in their own pullback (in longer segments that would make the memory O(n_steps) again)
    keep = (SLOTS, KKT_SOLUTION) if checkpoint == 1 else ()
    dt = jnp.asarray(dt, chain.dtype)
    final, traj = _scan_rollout(chain, body, es, controls, n_steps, checkpoint, lambda c: c.state, keep, progress, who)
    if check:  # the run itself: finite and on its rods and sliders (diffchain._analysis.diagnosis): its final state
        final, traj = check_run(who, chain, final, traj, "a smaller dt, or a lower Events threshold")
    return final, traj
