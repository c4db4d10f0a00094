"""A flexible cantilever as a chain of rigid finite elements (seed 004 §1.7): :func:`flexible_cantilever`."""
from __future__ import annotations

from .._model.chain import Chain
from .._model.flexible import check_rfe, rfe_elements
from .._model.rods import from_joint_angles
from .._model.host import xp as _xp


def flexible_cantilever(n_segments, *, length=1.0, E=1.0, I=1.0, rho_A=1.0, damping=None, g=0.0, check=True):
    """A uniform Euler–Bernoulli beam of ``length`` (m), Young's modulus ``E`` (Pa), second moment of area ``I``
    (m^4) and mass per length ``rho_A`` (kg/m), clamped at x = 0 and lying along +x, as ``n_segments`` torsional
    springs k = E I / h (h = length / n_segments) and the rigid elements between them (the division of
    :meth:`diffchain.MechanismBuilder.flexible_link`, with the clamped half element as the ground):
    ``(chain, state)``, the state straight and at rest.

    The chain's points are the springs, at x_i = (i - 1/2) h, i = 1..n, and the tip, at x = length: point 1 is
    pinned (the clamp's half element is the ground) and its spring acts against the world; links 1..n-1 are the inner
    elements (length h), link n the tip's half element (h / 2); each a uniform bar of mass rho_A times its length
    and moment of inertia m len^2 / 12 about its middle. The joint angles theta_1..theta_n
    (:func:`~diffchain.joint_angles`) are the springs' turns, so ``dc.from_joint_angles(chain, theta, base=(h / 2,
    0))`` is a bent beam. ``damping``: the material's Kelvin–Voigt viscosity (Pa s), the joints' dampers
    ``k_omega`` = damping I / h (None: none). ``g``: gravity along -y (default none).

    Every value may be traced (inside ``jit``, ``grad``, ``vmap``): the chain's arrays (its ``torsion_k``,
    ``link_mass``, ``link_inertia``, ``l``) are then functions of them, so frequencies and deflections can be
    differentiated with respect to E, I, rho_A and the length. (:func:`~diffchain.natural_frequencies` reads the
    chain's joint kinds before tracing: build the chain inside ``grad`` or ``vmap``, not inside a ``jit``.)
    ``check`` as :func:`~diffchain.Chain`'s."""
    n = check_rfe("flexible_cantilever", n_segments, length=length, E=E, I=I, rho_A=rho_A, damping=damping)
    lengths, mass, inertia, k, c = rfe_elements(n, length, E, I, rho_A, damping)
    xp = _xp(length, E, I, rho_A, damping)
    l, mass, inertia = lengths[1:], mass[1:], inertia[1:]  # the first (clamped) half element is the ground
    per_joint = lambda v: xp.concatenate([v * xp.ones(n), xp.zeros(1)])  # noqa: E731  (no spring at the tip)
    chain = Chain(xp.zeros(n + 1), l, guided=[True] + [False] * n, g=g, link_mass=mass, link_inertia=inertia,
                  torsion_k=per_joint(k), k_omega=None if c is None else per_joint(c), check=check)
    return chain, from_joint_angles(chain, xp.zeros(n), base=(lengths[0], 0.0))
