"""diffchain: differentiable dynamics of planar kinematic chains in JAX."""
from .model import Chain, Control, State, cart_chain, free_chain, pendulum
from .geometry import (from_joint_angles, joint_accelerations, joint_angles, joint_velocities, link_angles)
from .solvers import KKT, Recursive, Solver, forward_dynamics
from .integrate import (RK4, Integrator, SeedQuantum, SemiImplicitEuler, check_state, constraint_violation, rollout,
                        step)
from .sensitivity import da_dF, dalpha_dtau
