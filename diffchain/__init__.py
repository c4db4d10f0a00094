"""diffchain: differentiable dynamics of planar kinematic chains in JAX."""
from ._version import __version__
from ._xla.flags import set_xla_cpu_flags, xla_cpu_flags
from ._model.checks import InputError
from ._model.model import Model, energy
from ._state import Control, State
from ._model.chain import Chain, cart_chain, free_chain, pendulum
from ._model.geometry import joint_accelerations, joint_angles, joint_velocities, link_angles
from ._solvers.base import Solution, Solver
from ._solvers.rank import Info
from ._solvers.banded import Banded
from ._solvers.dense import KKT, Larin, NullSpace, RangeSpace
from ._solvers.forward import forward_dynamics
from ._solvers.recursive_solver import Recursive
from ._xla.small_chain import ShortChain
from ._simulate.integrators import RK4, Integrator, SeedQuantum, SemiImplicitEuler, VelocityVerlet
from ._simulate.projection import RATTLE, Projected, project
from ._model.rods import check_state, constraint_violation, from_joint_angles
from ._simulate.rollout import Backend, rollout, step
from ._simulate.progress import ProgressMeter, TextProgressMeter, TqdmProgressMeter
from ._xla.point_major_backend import PointMajor
from ._xla.sharding import shard
from ._analysis.sensitivity import da_dF, dalpha_dtau
from ._model.builder import MechanismBuilder
from ._constraints.system import constraint_terms
from ._solvers.mechanism import lagrange_terms, reactions
from ._analysis.kinematics import (accelerations as acceleration_analysis, assemble, kinematic_analysis,
                         velocities as velocity_analysis)
from ._analysis.inverse import (actuator_forces, loop_closure_dynamics, loop_closure_terms,
                                  mechanism_inverse_dynamics)
from ._events.state import EventState, Events, StepReport, check_event_state
from ._events.quantum import event_step
from ._events.rollout import event_rollout
from ._analysis.diagnosis import Report, diagnose
from ._analysis.trust import TrustReport, gradient_trust
from ._constraints.kinds import Polynomial
from ._io.format import FileFormatError, load, load_events, save
from ._io.trajectory import Trajectory, load_trajectory, save_trajectory
from ._analysis.linearize import (event_linearize, from_minimal_coordinates, linearize, minimal_coordinates,
                                  natural_frequencies, step_hessians)
from ._io.mjcf import to_mjcf
from ._io.linkages import from_pylinkage, from_pyslvs
from ._analysis.sysid import load_angles_csv, save_angles_csv

__all__ = [
    # the model (built as a chain or by MechanismBuilder), its state and inputs
    "Model", "Chain", "Control", "State", "cart_chain", "free_chain", "pendulum", "from_joint_angles", "joint_accelerations",
    "joint_angles", "joint_velocities", "link_angles", "energy",
    # forward dynamics: one solver interface, every solver on every model it applies to (seeds 000-004)
    "Solver", "Solution", "Info", "Recursive", "ShortChain", "Banded", "KKT", "RangeSpace", "NullSpace", "Larin",
    "forward_dynamics",
    # integration, sensitivities
    "RK4", "Integrator", "SeedQuantum", "SemiImplicitEuler", "VelocityVerlet",
    "check_state", "constraint_violation", "rollout", "step", "da_dF", "dalpha_dtau", "Backend", "PointMajor",
    "ProgressMeter", "TextProgressMeter", "TqdmProgressMeter",
    "Projected", "RATTLE", "project",
    # batching: a batch spread over several devices
    "shard",
    # closed loops and mechanisms (seeds 001-004)
    "MechanismBuilder", "Polynomial", "constraint_terms", "lagrange_terms", "reactions", "acceleration_analysis",
    "assemble", "kinematic_analysis", "velocity_analysis", "actuator_forces", "loop_closure_dynamics",
    "loop_closure_terms", "mechanism_inverse_dynamics",
    # contacts, limits and held joints (seed 000 Part II, §7, §12)
    "EventState", "Events", "StepReport", "check_event_state", "event_rollout", "event_step",
    # whether a run can be trusted: finite, on its constraints, singular passages, exhausted budgets; and its gradient
    "Report", "diagnose", "TrustReport", "gradient_trust",
    # linearisations of one step for trajectory optimisation (iLQR, DDP): A, B, second order, minimal coordinates
    "linearize", "event_linearize", "step_hessians", "minimal_coordinates", "from_minimal_coordinates",
    "natural_frequencies",
    # files: models (JSON, a versioned format with a schema), trajectories (.npz), MuJoCo MJCF export, pylinkage import
    "save", "load", "load_events", "save_trajectory", "load_trajectory", "Trajectory", "FileFormatError",
    "to_mjcf", "from_pylinkage", "from_pyslvs",
    # measured trajectories for system identification: angles over time in a plain CSV file
    "load_angles_csv", "save_angles_csv",
    # bad input: the error it raises, eagerly and from a compiled program
    "InputError",
    # opt-in process settings
    "set_xla_cpu_flags", "xla_cpu_flags",
]
