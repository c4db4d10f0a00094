"""The backend object :class:`PointMajor`: ``rollout(..., backend=PointMajor())`` runs the point-major forward
(:mod:`diffchain._xla.point_major`) and its reverse mode (:mod:`diffchain._xla.point_major_adjoint`) for a batch.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .batching import _explicit, batch_form
from .._simulate.rollout import Backend
from .._model.model import Model
from .._state import Control, State
from .._simulate.projection import ChainIntegrator
from .._solvers.recursive_solver import Recursive
from .point_major import _block, lean_kind, lean_rollout
from .point_major_adjoint import ADJOINT_ALPHA, lean_rollout_vjp

if TYPE_CHECKING:
    from .._simulate.integrators import Integrator
    from .._solvers.base import Solver


class PointMajor(Backend):
    """Batched rollouts in the point-major lambda-first form of this module, chosen explicitly:
    ``rollout(..., backend=PointMajor())``.

    Under ``vmap`` the rollout runs :func:`lean_rollout` for the whole batch, and reverse mode runs
    :func:`lean_rollout_vjp` (with SeedQuantum, SemiImplicitEuler and RK4; other integrators take the ``vmap`` of the
    array form's reverse mode); forward mode is the array form's. The results are the array form's to round-off.
    Outside ``vmap`` the array form runs (its gradient recomputes the forward pass once). It applies to chains of
    point masses (free, guided or on a line; with or without damping and drag) of up to ``max_points`` points with the
    :class:`~diffchain.Recursive` solver, a plain integrator (``RK4()``, ``SemiImplicitEuler()``, ``SeedQuantum()``;
    not the default ``Projected()``), open-loop controls, a policy or none, and ``dt`` and the integrator known at
    trace time; otherwise :meth:`Backend.rollout` raises, and :meth:`supports` says why.

    ``max_points`` (default 16): the longest chain it takes. Its program is written out point by point, so its size
    and compile time grow with the number of points, and past some length the ``vmap`` of the array form (one scan
    over the points) is as fast; where that length lies depends on the device.
    """

    max_points: int = eqx.field(static=True, default=16)

    def __check_init__(self):
        if isinstance(self.max_points, bool) or not isinstance(self.max_points, int) or self.max_points < 2:
            raise ValueError(f"PointMajor: max_points must be an integer >= 2, got {self.max_points!r}")

    def supports(self, chain: Model, controls: Control, dt: ArrayLike, n_steps: int, solver: Solver,
                 integrator: Integrator) -> str | None:
        """None where this backend applies, otherwise the reason it does not."""
        if not isinstance(solver, Recursive):
            return f"needs the Recursive solver, got {type(solver).__name__}"
        if isinstance(integrator, ChainIntegrator):
            return (f"takes the plain integrators (RK4(), SemiImplicitEuler(), SeedQuantum()), not "
                    f"{type(integrator).__name__}, which projects onto the constraints: pass integrator=RK4()")
        if chain.has_links:
            return "takes chains of point masses only (this chain has rigid links)"
        if chain.forces:
            names = ", ".join(sorted({type(f).__name__ for f in chain.forces}))
            return (f"does not host force kinds (this chain has {names}): its point-major program writes out the "
                    f"chain's own forces only; use the default backend (backend=None)")
        if chain.n > self.max_points:
            return f"takes chains of up to max_points = {self.max_points} points, got {chain.n}"
        if any(isinstance(v, jax.core.Tracer) for v in jax.tree.leaves((dt, integrator))):
            return "needs dt and the integrator known at trace time (not traced values)"
        if isinstance(controls, Control) and n_steps not in (None, controls.tau.shape[0]):
            return f"needs n_steps to match the controls' {controls.tau.shape[0]} steps, got {n_steps}"
        return None

    def rollout(self, run: Callable[[Model, State, Control], tuple[State, State]], chain: Model, state: State,
                controls: Control, *, dt: ArrayLike, n_steps: int, solver: Solver,
                integrator: Integrator) -> tuple[State, State]:
        reason = self.supports(chain, controls, dt, n_steps, solver, integrator)
        if reason is not None:
            raise ValueError(f"rollout: backend=PointMajor() {reason}")
        steps = n_steps if n_steps is not None else controls.tau.shape[0]
        if isinstance(controls, Control) and controls.F is None:  # the point-major form reads F by point
            controls = Control(controls.tau, controls.forces(), controls.a_w)
        if chain.n == 1 or steps == 0:  # no rod or no step: nothing to batch point by point
            return run(chain, state, controls)
        # the slider lines with unit normals before the adjoint, which reads s and c as they are (PointKinds.lines)
        chain = eqx.tree_at(lambda c: (c.point_kinds.s, c.point_kinds.c), chain, chain.point_kinds.lines)
        policy, inputs, run_inputs = None, controls, run
        if callable(controls) and not isinstance(controls, Control):  # its closed-over values as explicit inputs
            policy, inputs = _explicit(controls, state)

            def run_inputs(chain, state, consts):
                return run(chain, state, lambda s: policy(consts, s))

        def batched(axis_size, in_batched, chain, state, inputs, with_starts=False):
            fast = [functools.partial(lean_rollout, axis_size, in_batched, dt=dt, n_steps=n_steps,
                                      integrator=integrator, policy=policy, kind=kind, with_starts=with_starts)
                    for kind in range(3)]
            return jax.lax.switch(lean_kind(chain), fast, chain, state, inputs)

        if type(integrator) not in ADJOINT_ALPHA:  # reverse mode: the array form's, vmap-ed
            return batch_form(run_inputs, batched, run_inputs)(chain, state, inputs)
        K = _block(steps)

        def run_starts(chain, state, inputs):  # with the states at the start of every K steps
            out = run_inputs(chain, state, inputs)
            return out, tuple(jnp.concatenate([q0[None], q[K - 1:-1:K]])
                              for q0, q in ((state.x, out[1].x), (state.v, out[1].v), (state.t, out[1].t)))

        def one_vjp(args, res, cts, wanted):  # one chain: the array form's reverse mode
            outputs, pull = jax.vjp(run_inputs, *args)
            leaves = jax.tree.leaves(outputs)
            cts = jax.tree.unflatten(jax.tree.structure(outputs),
                                     [jnp.zeros_like(o) if c is None else c for c, o in zip(cts, leaves)])
            return [c for c, a in zip(jax.tree.leaves(pull(cts)), jax.tree.leaves(args)) if _inexact(a)]

        def batched_vjp(axis_size, in_batched, args, res, cts, wanted):  # under vmap: lean_rollout_vjp
            leaves = [(path, a, b) for (path, a), b in zip(jax.tree_util.tree_flatten_with_path(args)[0],
                                                           jax.tree.leaves(in_batched)) if _inexact(a)]
            # (group, field): the chain's and the state's fields, the open-loop inputs' or the policy's argument index
            keys = [_key(path) if jnp.size(a) else ("chain", None) for path, a, _ in leaves]  # (none: no dampers)
            want = {k for k, w in zip(keys, wanted) if w}  # the adjoint computes only the cotangents asked for

            def fast(args, res, cts, kind):
                chain_bar, state_bar, inputs_bar = lean_rollout_vjp(
                    axis_size, in_batched, *args, (tuple(cts[:3]), tuple(cts[3:])), dt=dt, n_steps=n_steps,
                    integrator=integrator, starts=res, policy=policy, kind=kind,
                    chain_wanted={k for s, k in want if s == "chain"},
                    inputs_wanted={k for s, k in want if s == "inputs"})
                names = ("tau", "F", "a_w") if policy is None else range(len(inputs_bar))
                named = {**{("chain", k): v for k, v in chain_bar.items()}, **dict(zip(
                    [("state", k) for k in "xvt"] + [("inputs", k) for k in names],
                    state_bar + tuple(inputs_bar or ())))}
                zero = lambda a, b: jnp.zeros(jnp.shape(a) if b else (axis_size,) + jnp.shape(a), a.dtype)  # noqa
                # (the slider lines s, c: zero without sliders)
                return [(named[key] if key in named else zero(a, b)) if key in want else None
                        for key, (_, a, b) in zip(keys, leaves)]

            branches = [functools.partial(fast, kind=kind) for kind in range(3)]
            return jax.lax.switch(lean_kind(args[0]), branches, args, res, cts)

        reverse = (run_starts, functools.partial(batched, with_starts=True), one_vjp, batched_vjp)
        return batch_form(run_inputs, batched, run_inputs, reverse=reverse)(chain, state, inputs)


# a chain's arrays with a cotangent in the point-major adjoint: their paths in the model, their names there
CHAIN_LEAVES = {"m": "m", "dist.L": "l", "g": "g", "damper_c": "k_omega", "k_v": "k_v", "point_kinds.s": "s",
                "point_kinds.c": "c"}


def _key(path):
    """(group, name) of an argument's leaf: the chain's arrays by their names in the adjoint (CHAIN_LEAVES; None for
    the model's other arrays, whose cotangents are 0), the state's fields, the inputs' fields or argument indices."""
    group = ("chain", "state", "inputs")[path[0].idx]
    names = [str(getattr(p, "name", getattr(p, "idx", None))) for p in path[1:]]
    return (group, CHAIN_LEAVES.get(".".join(names))) if group == "chain" else (group, getattr(
        path[1], "name", getattr(path[1], "idx", None)))


def _inexact(a):
    return jnp.issubdtype(jnp.result_type(a), jnp.inexact)
