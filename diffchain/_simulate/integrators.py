"""Integrators: one step of a model (seed 000 §3, §12.2; a mechanism's with Baumgarte stabilisation, seed 001 §8.3).
Implementations are objects passed to :func:`diffchain.step` and :func:`diffchain.rollout` (``integrator=RK4()``).

:meth:`Integrator.step` advances a model by one step. The plain integrators here need only the accelerations
(``__call__(accel, state, dt)``, which :mod:`diffchain._xla.point_major`'s batched form also uses); those of
:mod:`diffchain._simulate.projection` need the model itself. Each carries the factor of its PD drift correction time
constant delta_eps = ``stab_factor`` * dt (seed §12.2 eq. 33 suggests several quanta, ~5); None integrates the exact
constraint accelerations without correction.

Backward in time: an integrator whose :attr:`Integrator.backward` is True takes a step ``dt < 0``. Every integrator of
the library does (they are explicit one-step schemes, as accurate backward as forward; the drift correction's time
constant stab_factor * dt changes sign with dt and so damps the drift in the direction of integration); an integrator
of your own says so by setting ``backward = True``. Only the symmetric schemes undo a step with the step back: RATTLE
to round-off (forces of the positions alone), the others to within their local error (velocity Verlet's a' is taken
at the predicted velocity, and a chain's constraint forces depend on the velocities).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from .._state import Control, State
from .._solvers.forward import accelerations

if TYPE_CHECKING:
    from .._model.model import Model
    from .._solvers.base import Solver


class Integrator(eqx.Module):
    """Advances a state by one quantum, given its accelerations ``accel(state)``: a :class:`State`, or any class with
    fields x, v, t whose x and v add and scale (:class:`diffchain._xla.point_major.PointState`)."""

    stab_factor: float | None = 5.0
    chains_only: ClassVar[bool] = False  # (it steps serial chains alone)
    backward: ClassVar[bool] = False  # (it takes dt < 0, backward in time; the library's integrators set it)

    def __check_init__(self):
        f = self.stab_factor
        if f is None or isinstance(f, jax.core.Tracer) or jnp.ndim(f) != 0:
            return
        if not jnp.issubdtype(jnp.result_type(f), jnp.number) or not (float(f) > 0 and float(f) < float("inf")):
            raise ValueError(f"{type(self).__name__}: stab_factor must be None (no drift correction) or a finite "
                             f"number > 0 (delta_eps = stab_factor * dt), got {f!r}")

    def stab(self, dt: ArrayLike) -> ArrayLike | None:
        return None if self.stab_factor is None else self.stab_factor * dt

    def __call__(self, accel: Callable[[State], jax.Array], state: State, dt: ArrayLike) -> State:
        raise NotImplementedError

    def step(self, model: Model, state: State, control: Control, dt: ArrayLike, solver: Solver) -> State:
        """One step of ``model``: this integrator on the accelerations of ``solver`` with its drift correction."""
        stab = self.stab(dt)
        return self(lambda s: accelerations(model, s, control, solver, stab), state, dt)


class SeedQuantum(Integrator):
    """Seed §3 steps 3–4: accelerations constant over the quantum, x += dt v + dt^2 a / 2, v += dt a.

    The seed's scheme as written. It is not symplectic (for a linear oscillator its one-step map has determinant
    1 + (dt omega)^2 / 2): the energy of a conservative chain grows, slowly on a single pendulum, exponentially on a
    chaotic one until the state is not finite. Use it to reproduce the seed; :class:`diffchain.Projected` is the
    default."""

    backward: ClassVar[bool] = True

    def __call__(self, accel: Callable[[State], jax.Array], state: State, dt: ArrayLike) -> State:
        a = accel(state)
        return type(state)(state.x + dt * state.v + 0.5 * dt**2 * a, state.v + dt * a, state.t + dt)


class VelocityVerlet(Integrator):
    """The seed's position update with a second-order velocity update: x += dt v + dt^2 a / 2, v += dt (a + a') / 2,
    a' the accelerations at the new positions with the predicted velocities v + dt a (velocity Verlet; for forces
    that depend on velocity, the modified form of Groot & Warren, J. Chem. Phys. 107 (1997), with lambda = 1/2).

    Its positions follow the seed's quadratic within the quantum, so event rollouts use it (the event times are roots
    of that quadratic); there a' is the next quantum's start accelerations, so it costs no more solver calls than the
    seed's quantum, whose energy drift it removes (:class:`SeedQuantum`). In a plain rollout it takes two calls per
    step."""

    backward: ClassVar[bool] = True

    def __call__(self, accel: Callable[[State], jax.Array], state: State, dt: ArrayLike) -> State:
        a = accel(state)
        x1 = state.x + dt * state.v + 0.5 * dt**2 * a
        a1 = accel(type(state)(x1, state.v + dt * a, state.t + dt))
        return type(state)(x1, state.v + 0.5 * dt * (a + a1), state.t + dt)


class SemiImplicitEuler(Integrator):
    """Symplectic Euler: v += dt a, x += dt v_new (conserves a shadow energy; cheap)."""

    backward: ClassVar[bool] = True

    def __call__(self, accel: Callable[[State], jax.Array], state: State, dt: ArrayLike) -> State:
        v = state.v + dt * accel(state)
        return type(state)(state.x + dt * v, v, state.t + dt)


class RK4(Integrator):
    """Classical fourth-order Runge–Kutta on (x, v).

    Its default drift correction is gentler (delta_eps = 50 dt): RK4 itself keeps the constraints to O(dt^4), and a
    stiff correction would trade energy accuracy for constraint accuracy that is not needed.
    """

    stab_factor: float | None = 50.0
    backward: ClassVar[bool] = True

    def __call__(self, accel: Callable[[State], jax.Array], state: State, dt: ArrayLike) -> State:
        def f(x, v, t):
            return v, accel(type(state)(x, v, t))

        x, v, t = state.x, state.v, state.t
        k1x, k1v = f(x, v, t)
        k2x, k2v = f(x + 0.5 * dt * k1x, v + 0.5 * dt * k1v, t + 0.5 * dt)
        k3x, k3v = f(x + 0.5 * dt * k2x, v + 0.5 * dt * k2v, t + 0.5 * dt)
        k4x, k4v = f(x + dt * k3x, v + dt * k3v, t + dt)
        return type(state)(x + dt / 6 * (k1x + 2 * k2x + 2 * k3x + k4x), v + dt / 6 * (k1v + 2 * k2v + 2 * k3v + k4v),
                           t + dt)
