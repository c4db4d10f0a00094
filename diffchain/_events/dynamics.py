"""The accelerations inside an event quantum with the stuck points, held joints and sliders of the event state
switched on (:func:`constrained_dynamics`): a chain's by its solver's own forms (the recursion, seed 000 Part I and
Part II), a mechanism's by the event rows of :mod:`diffchain._events.constraints`, which also holds the impact rule
of every model.
"""
from __future__ import annotations


import equinox as eqx
import jax
import jax.numpy as jnp

from .._solvers.base import Solver
from .._solvers.recursive_solver import Recursive
from .._xla.batching import rare_cond
from .._model.forces import external_forces, torque_forces
from .constraints import constrained_dynamics as general_dynamics, impulse_projection
from .detection import limit_arc
from .state import EventState, Events
from .._model.geometry import _pad_diff, joint_velocities, links
from .._state import Control, State
from .._model.model import Model


def _where(c, x, y):
    return jax.tree_util.tree_map(lambda a, b: jnp.where(c, a, b), x, y)


def _mass_times(chain: Model, a):
    if chain.has_links:
        return (chain.M @ a.reshape(-1)).reshape(a.shape)
    return chain.m[:, None] * a


def constrained_dynamics(chain: Model, events: Events, es: EventState, x, v, t, control: Control, stab, impulse,
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
    if not chain.serial:
        return general_dynamics(chain, events, es, x, v, t, control, stab, impulse, solver)
    stuck, held = es.stuck, es.held
    w = 1.0 / stab
    g = jnp.where(impulse, 0.0, chain.g)
    ch = eqx.tree_at(lambda c: (c.point_kinds.guided, c.g), chain, (chain.guided | stuck, g))
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

    a, phi, tau_w = rare_cond(jnp.any(held), part_two, part_one, None, covers=True)

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
    a = rare_cond(impulse, lambda _: impulse_projection(chain, events, es, x, v, t), lambda _: a, None)
    return a, tau_w, R
