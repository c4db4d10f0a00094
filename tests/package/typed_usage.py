"""Typical user code, checked by mypy against the package's annotations (tests/package/test_types.py): it must
type-check with no error. It also runs (``python tests/package/typed_usage.py``), so that it is correct code."""
from __future__ import annotations

import pathlib
import tempfile

import jax
import jax.numpy as jnp

import diffchain as dc


def chain_run() -> float:
    """A pendulum: forward dynamics by two solvers, a rollout with a policy, a step, its linearisation and its natural
    frequencies hanging down."""
    chain: dc.Model = dc.pendulum(3, mass=1.0, length=0.5)
    state: dc.State = dc.from_joint_angles(chain, jnp.array([0.3, -0.2, 0.1]))
    control = dc.Control(tau=jnp.zeros(chain.n))
    a: jax.Array = dc.forward_dynamics(chain, state, control, solver=dc.Recursive())
    sol: dc.Solution = dc.forward_dynamics(chain, state, control, solver=dc.KKT(), return_forces=True)
    tensions: jax.Array = sol.forces

    def policy(s: dc.State) -> dc.Control:
        return dc.Control(tau=-0.1 * dc.joint_velocities(s))

    final, trajectory = dc.rollout(chain, state, policy, 0.01, n_steps=20, integrator=dc.RK4())
    angles: jax.Array = dc.joint_angles(final)
    next_state: dc.State = dc.step(chain, state, control, 0.01, solver=dc.Banded())
    A, B = dc.linearize(chain, state, control, 0.01, coords="minimal")
    report: dc.Report = dc.diagnose(chain, trajectory)
    energy: jax.Array = dc.energy(chain, trajectory)
    omega, modes = dc.natural_frequencies(chain, dc.from_joint_angles(chain, jnp.array([-jnp.pi / 2, 0.0, 0.0])))
    return float(jnp.sum(a) + jnp.sum(tensions) + jnp.sum(angles) + jnp.sum(next_state.x) + jnp.sum(A) + jnp.sum(B)
                 + energy[-1] + jnp.sum(omega) + jnp.sum(modes)) if bool(report.ok) else float("nan")


def chain_events() -> int:
    """The pendulum dropped on a floor and stopped at a joint limit: an event rollout with open-loop torques."""
    chain = dc.Chain(jnp.ones(3), jnp.ones(2), guided=jnp.array([True, False, False]))
    events = dc.Events(chain.n, ground=-1.5, theta_min=-1.0, theta_max=1.0)
    es = dc.EventState(dc.from_joint_angles(chain, [0.5, 0.0]))
    es = dc.check_event_state(chain, events, es)
    final, (states, reports) = dc.event_rollout(chain, events, es, dc.Control(tau=jnp.zeros((30, 3))), 0.01)
    one, report = dc.event_step(chain, events, final, dc.Control(n=3), 0.01)
    impacts: jax.Array = reports.impacts
    return int(jnp.sum(impacts)) + int(jnp.sum(report.impacts)) + int(states.x.shape[0]) + int(one.x.shape[0])


def four_bar() -> float:
    """A four-bar built with MechanismBuilder: dense solvers, reactions, a rollout, saved and loaded, MJCF."""
    mb = dc.MechanismBuilder()
    O, A = mb.ground("O", (0.0, 0.0)), mb.ground("A", (4.0, 0.0))
    B, C = mb.point("B", (0.0, 1.0)), mb.point("C", (4.0, 3.0))
    crank = mb.body("crank", O, B, mass=1.0, inertia=0.1)
    mb.body("coupler", B, C, mass=2.0)
    mb.body("rocker", A, C, mass=1.0)
    mb.motor("drive", "ground", crank)
    mech, state = mb.build()
    state, info = dc.assemble(mech, state)
    control = dc.Control(tau=jnp.array([0.5]), F=jnp.zeros((mech.n_points, 2)))
    for solver in (dc.KKT(), dc.RangeSpace(), dc.NullSpace(), dc.Larin()):
        dc.forward_dynamics(mech, state, control, solver=solver)
    sol = dc.forward_dynamics(mech, state, control, return_forces=True)
    forces: dict[str, jax.Array] = dc.reactions(mech, state, sol.forces)
    final, _ = dc.rollout(mech, state, dc.Control(tau=jnp.zeros((10, 1))), 1e-3)
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "four_bar.json"
        dc.save(mech, path)
        again: dc.Model = dc.load(path)
        dc.save_trajectory(pathlib.Path(folder) / "run.npz", again, final, dt=1e-3)
        saved: dc.Trajectory = dc.load_trajectory(pathlib.Path(folder) / "run.npz")
    xml: str = dc.to_mjcf(mech, state)
    return float(sum(jnp.sum(f) for f in forces.values()) + jnp.sum(saved.states.x) + len(xml) + info.residual)


if __name__ == "__main__":
    print(chain_run(), chain_events(), four_bar())
