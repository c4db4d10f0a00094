"""diffchain: differentiable dynamics of planar kinematic chains in JAX."""
from ._xla_flags import set_xla_cpu_flags, xla_cpu_flags
from .model import Chain, Control, State, cart_chain, free_chain, pendulum
from .geometry import (from_joint_angles, joint_accelerations, joint_angles, joint_velocities, link_angles)
from .forces import energy
from .solvers import KKT, Recursive, Solver, forward_dynamics
from .integrators import RK4, Integrator, SeedQuantum, SemiImplicitEuler
from .projection import RATTLE, Projected, project
from .integrate import Backend, check_state, constraint_violation, rollout, step
from .lean import PointMajor
from .sharding import shard
from .sensitivity import da_dF, dalpha_dtau
from .mechanism import Mechanism, MechanismBuilder
from .mechsolvers import Larin, NullSpace, RangeSpace, constraint_terms, lagrange_terms, mechanism_dynamics, reactions
from .kinematics import (accelerations as acceleration_analysis, assemble, kinematic_analysis,
                         velocities as velocity_analysis)
from .mechsim import (actuator_forces, loop_closure_dynamics, loop_closure_terms, mechanism_inverse_dynamics,
                      mechanism_rollout)
from .banded import closed_chain_dynamics
from .active import ActiveKKT, ActiveRecursive, active_dynamics_kkt, active_dynamics_recursive
from .eventstate import EventState, Events, StepReport, check_event_state
from .events import event_rollout, event_step
from .diagnosis import Report, diagnose

__all__ = [
    # the chain, its state and inputs (model.py, geometry.py, forces.py)
    "Chain", "Control", "State", "cart_chain", "free_chain", "pendulum", "from_joint_angles", "joint_accelerations",
    "joint_angles", "joint_velocities", "link_angles", "energy",
    # forward dynamics, integration, sensitivities
    "KKT", "Recursive", "Solver", "forward_dynamics", "RK4", "Integrator", "SeedQuantum", "SemiImplicitEuler",
    "check_state", "constraint_violation", "rollout", "step", "da_dF", "dalpha_dtau", "Backend", "PointMajor",
    "Projected", "RATTLE", "project",
    # batching: a batch spread over several devices (sharding.py)
    "shard",
    # closed loops and mechanisms (seeds 001-004)
    "Mechanism", "MechanismBuilder", "Larin", "NullSpace", "RangeSpace", "constraint_terms", "lagrange_terms",
    "mechanism_dynamics", "reactions", "acceleration_analysis", "assemble", "kinematic_analysis", "velocity_analysis",
    "actuator_forces", "loop_closure_dynamics", "loop_closure_terms", "mechanism_inverse_dynamics",
    "mechanism_rollout", "closed_chain_dynamics",
    # active joints, contacts, limits (seed 000 Part II, §7, §12)
    "ActiveKKT", "ActiveRecursive", "active_dynamics_kkt", "active_dynamics_recursive", "EventState", "Events",
    "StepReport", "check_event_state", "event_rollout", "event_step",
    # whether a run can be trusted: finite, on its constraints, singular passages, exhausted budgets (diagnosis.py)
    "Report", "diagnose",
    # opt-in process settings
    "set_xla_cpu_flags", "xla_cpu_flags",
]
