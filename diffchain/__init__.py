"""diffchain: differentiable dynamics of planar kinematic chains in JAX."""
import os as _os


def _jaxlib_version():
    """The installed jaxlib's release as a tuple of ints (``(0, 10, 2)``), read from its metadata without importing
    JAX (the flags must be set before JAX reads them); None if it cannot be read."""
    import importlib.metadata
    import re

    try:
        m = re.match(r"\d+(\.\d+)*", importlib.metadata.version("jaxlib"))
    except importlib.metadata.PackageNotFoundError:
        return None
    return tuple(int(p) for p in m.group(0).split(".")) if m else None


def _xla_cpu_workarounds():
    """XLA CPU flags set on import, before JAX creates its backend (opt out: DIFFCHAIN_KEEP_XLA_FLAGS=1).

    * ``--xla_cpu_use_fusion_emitters=false``: jaxlib 0.10.2's new CPU fusion emitter generates an out-of-bounds
      vector load (segfault) in the backward pass of some small float64 rollouts (RK4, 2-link pendulum);
    * ``--xla_cpu_experimental_ynn_fusion_type= --xla_cpu_use_xnnpack=false``: its YNN/XNNPACK reductions over
      length-2 axes are ~3x slower than plain XLA loops on the chain's 2-vectors.
    The flags only concern the CPU backend. Once JAX has created its backend they can no longer take effect.
    XLA aborts the process on a flag it does not know, so the YNN flag is set only from jaxlib 0.8.1 on (the first
    release whose XLA has it: 0.6.2, 0.7.0 and 0.8.0 do not). The other two exist in 0.6.2 (the oldest jaxlib
    supported) and are set on every version: on 0.6.2 they change nothing measurable (XNNPACK is off by default there;
    the fusion emitters made no difference to rollouts, their gradients or a batch of 1024, and the segfault's test
    passes with them), but they keep the releases in between, which were not examined, on the code paths of 0.10.2.
    """
    if _os.environ.get("DIFFCHAIN_KEEP_XLA_FLAGS"):
        return
    flags = _os.environ.get("XLA_FLAGS", "")
    version = _jaxlib_version()
    wanted = ["--xla_cpu_use_fusion_emitters=false", "--xla_cpu_experimental_ynn_fusion_type=",
              "--xla_cpu_use_xnnpack=false"]
    if version is not None and version < (0, 8, 1):
        wanted.remove("--xla_cpu_experimental_ynn_fusion_type=")
    extra = [f for f in wanted if f.split("=")[0] not in flags]
    if extra:
        _os.environ["XLA_FLAGS"] = " ".join([flags] + extra).strip()


_xla_cpu_workarounds()
from .model import Chain, Control, State, cart_chain, free_chain, pendulum
from .geometry import (from_joint_angles, joint_accelerations, joint_angles, joint_velocities, link_angles)
from .forces import energy
from .solvers import KKT, Recursive, Solver, forward_dynamics
from .integrate import (RK4, Integrator, SeedQuantum, SemiImplicitEuler, check_state, constraint_violation, rollout,
                        step)
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

__all__ = [
    # the chain, its state and inputs (model.py, geometry.py, forces.py)
    "Chain", "Control", "State", "cart_chain", "free_chain", "pendulum", "from_joint_angles", "joint_accelerations",
    "joint_angles", "joint_velocities", "link_angles", "energy",
    # forward dynamics, integration, sensitivities
    "KKT", "Recursive", "Solver", "forward_dynamics", "RK4", "Integrator", "SeedQuantum", "SemiImplicitEuler",
    "check_state", "constraint_violation", "rollout", "step", "da_dF", "dalpha_dtau",
    # closed loops and mechanisms (seeds 001-004)
    "Mechanism", "MechanismBuilder", "Larin", "NullSpace", "RangeSpace", "constraint_terms", "lagrange_terms",
    "mechanism_dynamics", "reactions", "acceleration_analysis", "assemble", "kinematic_analysis", "velocity_analysis",
    "actuator_forces", "loop_closure_dynamics", "loop_closure_terms", "mechanism_inverse_dynamics",
    "mechanism_rollout", "closed_chain_dynamics",
    # active joints, contacts, limits (seed 000 Part II, §7, §12)
    "ActiveKKT", "ActiveRecursive", "active_dynamics_kkt", "active_dynamics_recursive", "EventState", "Events",
    "StepReport", "check_event_state", "event_rollout", "event_step",
]
