"""The benchmark objects of seed 000 Part III (§13–14) as diffchain chains *and* as the seed's closed-form equations;
classic mechanisms (:func:`four_bar`); a flexible cantilever of rigid finite elements (:func:`flexible_cantilever`).

Every object has
* a builder ``<object>(**params) -> Benchmark``: the :func:`~diffchain.Chain` plus the maps between the seed's
  generalized coordinates q (angles from the upright / from the horizontal, cart position) and inputs u (torques,
  cart force with gain, friction) and diffchain's Cartesian :class:`State` / :class:`Control`;
* a closed form ``<object>_closed_form(q, qd, u, ...) -> qdd``: the seed's equations written out literally
  (B(q) qdd + c + h = tau solved for qdd), plain ``jax.numpy`` (works on numpy inputs).
``Benchmark.qdd(q, qd, u)`` runs the chain's forward dynamics and returns qdd in the seed's coordinates, so the two
can be compared (tests/systems/test_systems.py: they agree to ~1e-13 where the printed equations are right).

Coordinates. diffchain's joint angles are theta_1 = absolute link angle counter-clockwise from +x, theta_i relative.
* §13.2–13.3 use exactly these (theta_1 from the horizontal, h_1 ~ g cos theta_1).
* §13.1 and Gymnasium's Pendulum-v1 measure theta counter-clockwise from the upright: phi = pi/2 + theta.
* §14 (cart objects) measure *absolute* link angles psi_k clockwise from the upright (the centre of mass of link k
  is at x + ... + l_k sin psi_k): phi_k = pi/2 - psi_k. A generalized force Q_psi_k is a couple -Q_psi_k (counter-
  clockwise) on link k; the cart force is a point force on point 1.
Corrections found by the tests (details in tests/systems/test_systems.py and the closed forms' ``printed`` flags):
* §14.1: the seed prints +mu_p thetadot/(m_p l) in thetadd; dissipative pole friction needs -mu_p thetadot/(m_p l).
* §14.3: A_10 = I_1 + m_2 l_1^2 + ... must be I_1 + m_1 l_1^2 + (m_2 + m_3) L_1^2; Coulomb terms sign(x), sign(theta_i)
  must be signs of velocities (as printed they do work on the system instead of dissipating it).
"""
from __future__ import annotations

from ._common import (Benchmark, HALF_PI, cart_generalized_control, cart_q, cart_qdd, cart_state, rail_normal_force)
from .pendulums import (ACROBOT, acrobot, acrobot_closed_form, gym_pendulum, single_pendulum,
                        single_pendulum_closed_form, weightlifting_arm, weightlifting_arm_closed_form)
from .carts import (BOGDANOV, CARTPOLE, SI_WANG, cartpole, cartpole_closed_form, cartpole_normal_friction_closed_form,
                    double_cart_pendulum, double_cart_pendulum_closed_form, gym_cartpole, triple_cart_pendulum,
                    triple_cart_pendulum_closed_form, triple_cart_pendulum_coulomb)
from .mechanisms import four_bar
from .flexible import flexible_cantilever

__all__ = ["Benchmark", "HALF_PI", "cart_generalized_control", "cart_q", "cart_qdd", "cart_state", "rail_normal_force",
           "ACROBOT", "acrobot", "acrobot_closed_form", "gym_pendulum", "single_pendulum",
           "single_pendulum_closed_form", "weightlifting_arm", "weightlifting_arm_closed_form", "BOGDANOV",
           "CARTPOLE", "SI_WANG", "cartpole", "cartpole_closed_form", "cartpole_normal_friction_closed_form",
           "double_cart_pendulum", "double_cart_pendulum_closed_form", "gym_cartpole", "triple_cart_pendulum",
           "triple_cart_pendulum_closed_form", "triple_cart_pendulum_coulomb", "four_bar", "flexible_cantilever"]
