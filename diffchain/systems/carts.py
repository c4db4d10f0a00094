"""Seed 000 §14: the cart-pole (and Gymnasium's CartPole-v1), the double pendulum on a cart (Bogdanov 2004) and the
triple pendulum on a cart (Si & Wang 2001), each as a chain and as the seed's closed form.
"""
from __future__ import annotations


import jax.numpy as jnp

from .._model.chain import Chain
from .._state import Control
from .._solvers.forward import forward_dynamics
from ._common import (Benchmark, _cart_chain, cart_generalized_control, cart_q, cart_qdd,
                      cart_state, rail_normal_force)


CARTPOLE = dict(m_c=1.0, m_p=0.1, l=0.5, mu_c=0.0005, mu_p=0.000002, g=9.81)


def cartpole(friction="barto", check=True, **params) -> Benchmark:
    """§14.1 (Barto, Sutton & Anderson 1983): cart m_c on the x axis, uniform pole of mass m_p and half length l
    (I_c = m_p (2l)^2 / 12, hence the 4/3), q = [x, theta] with theta clockwise from the upright, u = F on the cart.
    Pole friction -mu_p thetadot at the pivot is joint damping (k_omega_1 = mu_p). Cart friction:
      "barto":  a force -mu_c sgn(xdot) (the form of Barto's equations; mu_c is then a force in newtons);
      "normal": Coulomb friction -mu_c N_c sgn(N_c xdot), N_c the rail's normal force (Florian 2007), solved exactly:
                N_c is affine in the friction force f, N_c = N_0 + k f, so f = -mu_c s N_0 / (1 + mu_c s k),
                s = sgn(N_0 xdot) (two forward-dynamics evaluations; valid while 1 + mu_c s k > 0, which holds for
                these parameters -- its failure is Painlevé's paradox);
      "none":   frictionless (Gymnasium's CartPole) -- pass mu_p=0 too.
    ``check=False``: traced parameters are not checked (``Chain``'s; a program without host callbacks)."""
    p = {**CARTPOLE, **params}
    chain = _cart_chain(p["m_c"], [2 * p["l"]], [p["m_p"]], [p["l"]], [p["m_p"] * (2 * p["l"]) ** 2 / 12],
                        k_omega=jnp.array([p["mu_p"], 0.0]), g=p["g"], check=check)

    def to_control(q, qd, u):
        base = cart_generalized_control(jnp.stack([jnp.asarray(u, chain.m.dtype).reshape(()), 0.0 * qd[0]]))
        if friction == "none":
            return base
        if friction == "barto":
            return cart_generalized_control(jnp.stack([u - p["mu_c"] * jnp.sign(qd[0]), 0.0 * qd[0]]))
        state = cart_state(chain, q, qd)
        unit = Control(F=jnp.zeros((2, 2)).at[0, 0].set(1.0))
        N = lambda ctl: rail_normal_force(chain, state, ctl, forward_dynamics(chain, state, ctl))  # noqa: E731
        N0 = N(base)
        k = N(Control(base.tau, base.forces() + unit.F)) - N0
        s = jnp.sign(N0 * qd[0])
        f = -p["mu_c"] * s * N0 / (1 + p["mu_c"] * s * k)
        return Control(base.tau, base.forces() + f * unit.F)

    return Benchmark(chain, lambda q, qd: cart_state(chain, q, qd), to_control, cart_qdd, cart_q)


def cartpole_closed_form(q, qd, u, printed=True, **params):
    """§14.1 as printed (``printed=True``: +mu_p thetadot/(m_p l)) or with the dissipative sign (``printed=False``):
        thetadd = ([(-F - m_p l thetadot^2 sin + mu_c sgn xdot)/(m_c + m_p)] cos + g sin -/+ mu_p thetadot/(m_p l))
                  / (l [4/3 - m_p cos^2/(m_c + m_p)])
        xdd = (F + m_p l [thetadot^2 sin - thetadd cos] - mu_c sgn xdot) / (m_c + m_p)."""
    p = {**CARTPOLE, **params}
    m_c, m_p, l, mu_c, mu_p, g = (p[k] for k in ("m_c", "m_p", "l", "mu_c", "mu_p", "g"))
    th, thd, xd, F = q[1], qd[1], qd[0], u
    M = m_c + m_p
    pole = mu_p * thd / (m_p * l) * (1.0 if printed else -1.0)
    thdd = (((-F - m_p * l * thd**2 * jnp.sin(th) + mu_c * jnp.sign(xd)) / M) * jnp.cos(th) + g * jnp.sin(th) + pole) \
        / (l * (4.0 / 3.0 - m_p * jnp.cos(th) ** 2 / M))
    xdd = (F + m_p * l * (thd**2 * jnp.sin(th) - thdd * jnp.cos(th)) - mu_c * jnp.sign(xd)) / M
    return jnp.stack([xdd, thdd])


def cartpole_normal_friction_closed_form(q, qd, u, **params):
    """Cart-pole with Coulomb cart friction -mu_c N_c sgn(N_c xdot) (the correction of Florian 2007; derived here by
    Newton–Euler, s = sgn(N_c xdot), first assuming N_c > 0 and recomputing once if N_c comes out negative):
        thetadd = (g sin + cos [(-F - m_p l thetadot^2 (sin + mu_c s cos))/(m_c + m_p) + mu_c s g]
                   - mu_p thetadot/(m_p l)) / (l [4/3 - m_p cos (cos - mu_c s sin)/(m_c + m_p)])
        N_c = (m_c + m_p) g - m_p l (thetadd sin + thetadot^2 cos)
        xdd = (F + m_p l (thetadot^2 sin - thetadd cos) - mu_c N_c s) / (m_c + m_p)."""
    p = {**CARTPOLE, **params}
    m_c, m_p, l, mu_c, mu_p, g = (p[k] for k in ("m_c", "m_p", "l", "mu_c", "mu_p", "g"))
    th, thd, xd, F = q[1], qd[1], qd[0], u
    M, sn, cs = m_c + m_p, jnp.sin(th), jnp.cos(th)

    def solve(s):
        thdd = (g * sn + cs * ((-F - m_p * l * thd**2 * (sn + mu_c * s * cs)) / M + mu_c * s * g)
                - mu_p * thd / (m_p * l)) / (l * (4.0 / 3.0 - m_p * cs * (cs - mu_c * s * sn) / M))
        N = M * g - m_p * l * (thdd * sn + thd**2 * cs)
        return thdd, N

    thdd, N = solve(jnp.sign(xd))
    thdd, N = solve(jnp.sign(N * xd))
    xdd = (F + m_p * l * (thd**2 * sn - thdd * cs) - mu_c * N * jnp.sign(N * xd)) / M
    return jnp.stack([xdd, thdd])


def gym_cartpole(g=9.8, m_c=1.0, m_p=0.1, l=0.5, check=True, pole="link") -> Benchmark:
    """Gymnasium CartPole-v1's parameters (classic_control/cartpole.py): no friction, g = 9.8. ``pole="link"``: the
    pole a uniform rigid link (as :func:`cartpole`); ``pole="points"``: its dynamically equivalent point masses,
    m_p/4 at the pivot (on the cart) and 3 m_p/4 at 4l/3 on a massless rod (the same mass, centre of mass and central
    inertia m_p (2l)^2/12, so the same motion), a chain of point masses (:class:`diffchain.ShortChain` solves it)."""
    if pole == "link":
        return cartpole(friction="none", check=check, g=g, m_c=m_c, m_p=m_p, l=l, mu_c=0.0, mu_p=0.0)
    if pole != "points":
        raise ValueError(f'gym_cartpole: pole must be "link" or "points", got {pole!r}')
    chain = Chain(jnp.stack([m_c + m_p / 4, 3 * m_p / 4]), jnp.stack([4 * l / 3]), slider=[True, False],
                  s=jnp.zeros((2, 2)).at[0, 1].set(1.0), c=0.0, g=g, check=check)

    def to_control(q, qd, u):
        return cart_generalized_control(jnp.stack([jnp.asarray(u, chain.m.dtype).reshape(()), 0.0 * qd[0]]))

    return Benchmark(chain, lambda q, qd: cart_state(chain, q, qd), to_control, cart_qdd, cart_q)


BOGDANOV = dict(m0=1.5, m1=0.5, m2=0.75, L1=0.5, L2=0.75, g=9.81)


def _bogdanov(p):
    p = {**BOGDANOV, **p}
    l1, l2 = p["L1"] / 2, p["L2"] / 2
    I1, I2 = p["m1"] * p["L1"] ** 2 / 12, p["m2"] * p["L2"] ** 2 / 12
    return p, l1, l2, I1, I2


def double_cart_pendulum(**params) -> Benchmark:
    """§14.2 (Bogdanov 2004, Table 1): cart m0, uniform links (l_i = L_i/2, I_i = m_i L_i^2/12 central),
    q = [x, theta_1, theta_2] with absolute angles clockwise from the upright, u = force on the cart."""
    p, l1, l2, I1, I2 = _bogdanov(params)
    chain = _cart_chain(p["m0"], [p["L1"], p["L2"]], [p["m1"], p["m2"]], [l1, l2], [I1, I2], g=p["g"])

    def to_control(q, qd, u):
        u = jnp.asarray(u, chain.m.dtype).reshape(())
        return cart_generalized_control(jnp.stack([u, 0.0 * u, 0.0 * u]))

    return Benchmark(chain, lambda q, qd: cart_state(chain, q, qd), to_control, cart_qdd, cart_q)


def double_cart_pendulum_closed_form(q, qd, u, **params):
    """§14.2: B(q) qdd + C(q, qd) qd + h(q) = f(u) with d_1..d_6, f_1, f_2 of Table 1, as printed."""
    p, l1, l2, I1, I2 = _bogdanov(params)
    m0, m1, m2, L1, g = p["m0"], p["m1"], p["m2"], p["L1"], p["g"]
    d1, d2, d3 = m0 + m1 + m2, m1 * l1 + m2 * L1, m2 * l2
    d4, d5, d6 = m1 * l1**2 + m2 * L1**2 + I1, m2 * L1 * l2, m2 * l2**2 + I2
    f1, f2 = (m1 * l1 + m2 * L1) * g, m2 * l2 * g
    t1, t2, w1, w2 = q[1], q[2], qd[1], qd[2]
    c1, c2, c12, s1, s2, s12 = jnp.cos(t1), jnp.cos(t2), jnp.cos(t1 - t2), jnp.sin(t1), jnp.sin(t2), jnp.sin(t1 - t2)
    B = jnp.array([[d1, d2 * c1, d3 * c2], [d2 * c1, d4, d5 * c12], [d3 * c2, d5 * c12, d6]])
    C = jnp.array([[0.0, -d2 * s1 * w1, -d3 * s2 * w2], [0.0, 0.0, d5 * s12 * w2], [0.0, -d5 * s12 * w1, 0.0]])
    h = jnp.array([0.0, -f1 * s1, -f2 * s2])
    return jnp.linalg.solve(B, jnp.array([u, 0.0, 0.0]) - C @ jnp.asarray(qd) - h)


SI_WANG = dict(g=9.8, M=1.014, m1=0.4506, m2=0.219, m3=0.0568, l1=0.37, l2=0.3, l3=0.05, L1=0.43, L2=0.33, L3=0.13,
               I1=0.0042, I2=0.0012, I3=0.00010609, Cc=5.5, C1=0.00026875, C2=0.00026875, C3=0.00026875,
               Ks=24.7125, mu_x=0.07, mu1=0.003, mu2=0.003, mu3=0.003, A37=1.3, A38=0.506, A39=0.219, A40=0.568)


def triple_cart_pendulum_coulomb(q, qd, coulomb="velocity", **params):
    """The Coulomb part of f(q, u) of §14.3 as generalized forces [Q_x, Q_1, Q_2, Q_3]:
    [-sgn mu_x A37, -sgn mu_1 A38, -sgn mu_2 A39, -sgn mu_3 A40] of (x, theta_1..3) as printed (``coulomb="printed"``),
    or of their rates (``"velocity"``: friction opposing each generalized velocity, the evident intent). The print puts
    each term on its own row only, i.e. friction against the *absolute* link rates; Coulomb friction in the joints
    (relative rates, like the viscous C_1..C_3 of the C matrix) would couple neighbouring rows -- the print does not
    say which is meant, so this follows the print. sgn(0) = 0: no static friction (stiction) is modelled."""
    p = {**SI_WANG, **params}
    z = jnp.asarray(q if coulomb == "printed" else qd)
    c = jnp.array([p["mu_x"] * p["A37"], p["mu1"] * p["A38"], p["mu2"] * p["A39"], p["mu3"] * p["A40"]])
    return -jnp.sign(z) * c


def triple_cart_pendulum(coulomb="velocity", **params) -> Benchmark:
    """§14.3 (Si & Wang 2001, Tables 2–3): cart M, links with mass m_i at l_i from their base, central inertia I_i,
    q = [x, theta_1..3] (absolute, clockwise from the upright), u = control voltage (cart force K_s u).
    Viscous joint friction C_1..C_3 (relative velocities, as the printed C matrix has it) = joint damping k_omega;
    cart viscous friction -C_c xdot and the Coulomb terms (:func:`triple_cart_pendulum_coulomb`) enter as Control."""
    p = {**SI_WANG, **params}
    chain = _cart_chain(p["M"], [p["L1"], p["L2"], p["L3"]], [p["m1"], p["m2"], p["m3"]], [p["l1"], p["l2"], p["l3"]],
                        [p["I1"], p["I2"], p["I3"]], k_omega=jnp.array([p["C1"], p["C2"], p["C3"], 0.0]), g=p["g"])

    def to_control(q, qd, u):
        Q = triple_cart_pendulum_coulomb(q, qd, coulomb, **params)
        return cart_generalized_control(Q.at[0].add(p["Ks"] * u - p["Cc"] * qd[0]))

    return Benchmark(chain, lambda q, qd: cart_state(chain, q, qd), to_control, cart_qdd, cart_q)


def triple_cart_pendulum_closed_form(q, qd, u, printed=True, coulomb="printed", **params):
    """§14.3: B(q) qdd + C(q, qd) qd + h(q) = f(q, u) with A_1..A_40 of Table 2, as printed (``printed=True``) or
    with A_10 = I_1 + m_1 l_1^2 + (m_2 + m_3) L_1^2 (``printed=False``; the print has m_2 l_1^2). ``coulomb`` as in
    :func:`triple_cart_pendulum_coulomb` (the print: "printed")."""
    p = {**SI_WANG, **params}
    g, M, m1, m2, m3, l1, l2, l3, L1, L2 = (p[k] for k in ("g", "M", "m1", "m2", "m3", "l1", "l2", "l3", "L1", "L2"))
    I1, I2, I3, Cc, C1, C2, C3 = (p[k] for k in ("I1", "I2", "I3", "Cc", "C1", "C2", "C3"))
    A = {1: M + m1 + m2 + m3, 2: m1 * l1 + (m2 + m3) * L1, 3: m2 * l2 + m3 * L2, 4: m3 * l3, 5: Cc,
         6: -m1 * l1 - (m2 + m3) * L1, 7: -(m2 * l2 + m3 * L2), 8: -m3 * l3, 9: m1 * l1 + (m2 + m3) * L1,
         10: I1 + (m2 if printed else m1) * l1**2 + (m2 + m3) * L1**2, 11: (m2 * l2 + m3 * L2) * L1,
         12: m3 * l3 * L1, 13: C1 + C2, 14: (m2 * l2 + m3 * L2) * L1, 15: -C2, 16: m3 * l3 * L1,
         17: -g * (m1 * l1 + m2 * L1 + m3 * L1), 18: m2 * l2 + m3 * L2, 19: (m2 * l2 + m3 * L2) * L1,
         20: I2 + m3 * L2**2 + m2 * l2**2, 21: m3 * l3 * L2, 22: -(m2 * l2 + m3 * L2) * L1, 23: -C2, 24: C2 + C3,
         25: m3 * l3 * L2, 26: -C3, 27: -g * (m2 * l2 + m3 * L2), 28: m3 * l3, 29: m3 * l3 * L1, 30: m3 * l3 * L2,
         31: I3 + m3 * l3**2, 32: C3, 33: -m3 * l3 * L1, 34: -g * m3 * l3, 35: -m3 * l3 * L2, 36: -C3}
    t1, t2, t3 = q[1], q[2], q[3]
    w1, w2, w3 = qd[1], qd[2], qd[3]
    cos, sin = jnp.cos, jnp.sin
    B = jnp.array([
        [A[1], A[2] * cos(t1), A[3] * cos(t2), A[4] * cos(t3)],
        [A[9] * cos(t1), A[10], A[11] * cos(t1 - t2), A[12] * cos(t1 - t3)],
        [A[18] * cos(t2), A[19] * cos(t1 - t2), A[20], A[21] * cos(t2 - t3)],
        [A[28] * cos(t3), A[29] * cos(t1 - t3), A[30] * cos(t2 - t3), A[31]]])
    z = 0.0 * t1
    C = jnp.array([
        [A[5] + z, A[6] * sin(t1) * w1, A[7] * sin(t2) * w2, A[8] * sin(t3) * w3],
        [z, A[13] + z, A[14] * sin(t1 - t2) * w2 + A[15], A[16] * sin(t1 - t3) * w3],
        [z, A[22] * sin(t1 - t2) * w1 + A[23], A[24] + z, A[25] * sin(t2 - t3) * w3 + A[26]],
        [z, A[33] * sin(t1 - t3) * w1, A[35] * sin(t2 - t3) * w2 + A[36], A[32] + z]])
    h = jnp.array([z, A[17] * sin(t1), A[27] * sin(t2), A[34] * sin(t3)])
    f = triple_cart_pendulum_coulomb(q, qd, coulomb, **params).at[0].add(p["Ks"] * u)
    return jnp.linalg.solve(B, f - C @ jnp.asarray(qd) - h)
