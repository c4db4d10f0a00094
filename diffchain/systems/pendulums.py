"""Seed 000 §13: the single pendulum (and Gymnasium's Pendulum-v1), the Acrobot and the three-link weightlifting arm,
each as a chain and as the seed's closed form.
"""
from __future__ import annotations


import jax.numpy as jnp

from .._model.chain import Chain
from ._common import (HALF_PI, Benchmark, _pinned)


def single_pendulum() -> Benchmark:
    """§13.1 (Perkins & Barto): unit point mass at the end of a massless unit rod, g = 1, theta counter-clockwise
    from the upright, tau at the fixed joint in the direction of theta (|tau| <= 0.225 usually)."""
    return _pinned(Chain([1.0, 1.0], [1.0], guided=[True, False], g=1.0), offset=HALF_PI)


def single_pendulum_closed_form(q, qd, u):
    """§13.1: thetadd = sin theta + tau."""
    return jnp.sin(q) + u


def gym_pendulum(g=10.0, m=1.0, l=1.0, check=True) -> Benchmark:
    """Gymnasium Pendulum-v1 (classic_control/pendulum.py): a uniform rod (I_c = m l^2/12) pinned at one end,
    theta counter-clockwise from the upright, torque u at the pin: thetadd = 3g/(2l) sin theta + 3/(m l^2) u.
    ``check=False``: traced parameters are not checked (``Chain``'s; a program without host callbacks)."""
    chain = Chain([m, 0.0], [l], guided=[True, False], link_mass=[m], link_inertia=[m * l**2 / 12], g=g,
                  check=check)
    return _pinned(chain, offset=HALF_PI)


ACROBOT = dict(m1=1.0, m2=1.0, l1=1.0, l2=1.0, lc1=0.5, lc2=0.5, I1=1.0, I2=1.0, g=9.81)


def acrobot(check=True, **params) -> Benchmark:
    """§13.2 Acrobot with torques at both joints. Links with distributed mass: m_i at l_ci along the link, I_i about
    the centre of mass (the printed B_22 = m_2 l_c2^2 + I_2 is the inertia about joint 2 only if I_2 is central).
    q = (theta_1 from +x counter-clockwise, theta_2 relative): diffchain's own joint angles. u = (tau_1, tau_2).
    ``check=False``: traced parameters are not checked (``Chain``'s; a program without host callbacks)."""
    p = {**ACROBOT, **params}
    chain = Chain([1.0, 0.0, 0.0], [p["l1"], p["l2"]], guided=[True, False, False], g=p["g"],
                  link_mass=[p["m1"], p["m2"]], link_com=[[p["lc1"], 0.0], [p["lc2"], 0.0]],
                  link_inertia=[p["I1"], p["I2"]], check=check)
    return _pinned(chain)


def acrobot_closed_form(q, qd, u, **params):
    """§13.2: B(theta) thetadd + c(theta, thetadot) + h(theta) = tau, B, c, h as printed."""
    p = {**ACROBOT, **params}
    m1, m2, l1, lc1, lc2, I1, I2, g = (p[k] for k in ("m1", "m2", "l1", "lc1", "lc2", "I1", "I2", "g"))
    t1, t2 = q[0], q[1]
    d1, d2 = qd[0], qd[1]
    B11 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * jnp.cos(t2)) + I1 + I2
    B12 = m2 * (lc2**2 + l1 * lc2 * jnp.cos(t2)) + I2
    B22 = m2 * lc2**2 + I2
    c1 = -m2 * l1 * lc2 * d2**2 * jnp.sin(t2) - 2 * m2 * l1 * lc2 * d1 * d2 * jnp.sin(t2)
    c2 = m2 * l1 * lc2 * d1**2 * jnp.sin(t2)
    h1 = (m1 * lc1 + m2 * l1) * g * jnp.cos(t1) + m2 * lc2 * g * jnp.cos(t1 + t2)
    h2 = m2 * lc2 * g * jnp.cos(t1 + t2)
    B = jnp.array([[B11, B12], [B12, B22]])
    return jnp.linalg.solve(B, jnp.asarray(u) - jnp.array([c1 + h1, c2 + h2]))


def weightlifting_arm(payload=1.0, g=9.81) -> Benchmark:
    """§13.3 (Rosenstein & Barto) in the seed's normalized form: unit link lengths, massless links, unit point masses
    at joints 2 and 3 and the payload mass ``payload`` (the seed's m) at the end of link 3. Reading off the printed B:
    B_22 = 1 + 2 m (1 + cos theta_3) and B_33 = m fix this model exactly. q = diffchain joint angles, u = tau_1..3."""
    return _pinned(Chain([1.0, 1.0, 1.0, payload], [1.0, 1.0, 1.0], guided=[True, False, False, False], g=g))


def weightlifting_arm_closed_form(q, qd, u, payload=1.0, g=9.81):
    """§13.3: B thetadd + c + h = tau with the printed normalized B, c, h (m = payload)."""
    m = payload
    t1, t2, t3 = q[0], q[1], q[2]
    d1, d2, d3 = qd[0], qd[1], qd[2]
    c2_, c3_, c23 = jnp.cos(t2), jnp.cos(t3), jnp.cos(t2 + t3)
    s2, s3, s23 = jnp.sin(t2), jnp.sin(t3), jnp.sin(t2 + t3)
    B11 = 3 + 2 * c2_ + m * (3 + 2 * c2_ + 2 * c23 + 2 * c3_)
    B12 = 1 + c2_ + m * (2 + c2_ + c23 + 2 * c3_)
    B13 = m * (1 + c23 + c3_)
    B22 = 1 + m * 2 * (1 + c3_)
    B23 = m * (1 + c3_)
    B33 = m
    c1 = (-d1 * d2 * 2 * (s2 + m * (s2 + s23)) - d1 * d3 * m * 2 * (s23 + s3) - d2**2 * (s2 + m * (s2 + s23))
          - d2 * d3 * m * 2 * (s23 + s3) - d3**2 * m * (s23 + s3))
    c2 = d1**2 * (s2 + m * (s2 + s23)) - d1 * d3 * m * 2 * s3 - d2 * d3 * m * 2 * s3 - d3**2 * m * s3
    c3 = d1**2 * m * (s23 + s3) + d1 * d2 * m * 2 * s3 + d2**2 * m * s3
    h1 = g * ((2 + m) * jnp.cos(t1) + (1 + m) * jnp.cos(t1 + t2) + m * jnp.cos(t1 + t2 + t3))
    h2 = g * ((1 + m) * jnp.cos(t1 + t2) + m * jnp.cos(t1 + t2 + t3))
    h3 = g * m * jnp.cos(t1 + t2 + t3)
    B = jnp.array([[B11, B12, B13], [B12, B22, B23], [B13, B23, B33]])
    return jnp.linalg.solve(B, jnp.asarray(u) - jnp.array([c1 + h1, c2 + h2, c3 + h3]))
