"""The benchmark objects of seed 000 Part III (§13–14) as diffchain chains *and* as the seed's closed-form equations.

Every object has
* a builder ``<object>(**params) -> Benchmark``: the :class:`~diffchain.Chain` plus the maps between the seed's
  generalized coordinates q (angles from the upright / from the horizontal, cart position) and inputs u (torques,
  cart force with gain, friction) and diffchain's Cartesian :class:`State` / :class:`Control`;
* a closed form ``<object>_closed_form(q, qd, u, ...) -> qdd``: the seed's equations written out literally
  (B(q) qdd + c + h = tau solved for qdd), plain ``jax.numpy`` (works on numpy inputs).
``Benchmark.qdd(q, qd, u)`` runs the chain's forward dynamics and returns qdd in the seed's coordinates, so the two
can be compared (tests/test_systems.py: they agree to ~1e-13 where the printed equations are right).

Coordinates. diffchain's joint angles are theta_1 = absolute link angle counter-clockwise from +x, theta_i relative.
* §13.2–13.3 use exactly these (theta_1 from the horizontal, h_1 ~ g cos theta_1).
* §13.1 and Gymnasium's Pendulum-v1 measure theta counter-clockwise from the upright: phi = pi/2 + theta.
* §14 (cart objects) measure *absolute* link angles psi_k clockwise from the upright (the centre of mass of link k
  is at x + ... + l_k sin psi_k): phi_k = pi/2 - psi_k. A generalized force Q_psi_k is a couple -Q_psi_k (counter-
  clockwise) on link k; the cart force is a point force on point 1.
Corrections found by the tests (details in tests/test_systems.py and the closed forms' ``printed`` flags):
* §14.1: the seed prints +mu_p thetadot/(m_p l) in thetadd; dissipative pole friction needs -mu_p thetadot/(m_p l).
* §14.3: A_10 = I_1 + m_2 l_1^2 + ... must be I_1 + m_1 l_1^2 + (m_2 + m_3) L_1^2; Coulomb terms sign(x), sign(theta_i)
  must be signs of velocities (as printed they do work on the system instead of dissipating it).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import jax.numpy as jnp

from .forces import external_forces
from .geometry import (from_joint_angles, joint_accelerations, joint_angles, joint_velocities, link_angles,
                       link_angular_velocities)
from .inertia import mass_matrix
from .model import Chain, Control, State
from .solvers import Recursive, forward_dynamics

HALF_PI = jnp.pi / 2


def _wrap(a):
    return jnp.arctan2(jnp.sin(a), jnp.cos(a))


class Benchmark(NamedTuple):
    """A benchmark object: its chain and the maps between the seed's (q, qd, u) and diffchain's State/Control.

    to_state(q, qd) -> State;  to_control(q, qd, u) -> Control (inputs, gains and the friction terms that diffchain
    has no model feature for);  to_qdd(state, a) -> qdd (point accelerations a back to the seed's coordinates);
    to_q(state) -> (q, qd) (angles wrapped to (-pi, pi]; for policies in ``dc.rollout``).
    """

    chain: Chain
    to_state: Callable
    to_control: Callable
    to_qdd: Callable
    to_q: Callable

    def qdd(self, q, qd, u, solver=Recursive()):
        """qdd of the seed's coordinates computed by diffchain's forward dynamics (the chain model)."""
        state = self.to_state(q, qd)
        return self.to_qdd(state, forward_dynamics(self.chain, state, self.to_control(q, qd, u), solver=solver))


# ---------------------------------------------------------------- shared maps: pinned chains (relative joint angles)

def _pinned(chain: Chain, offset=0.0) -> Benchmark:
    """Point 1 fixed; q = diffchain joint angles minus ``offset`` on theta_1; u = torques at joints 1..n-1."""
    shift = jnp.zeros(chain.n - 1).at[0].set(offset)

    def to_state(q, qd):
        return from_joint_angles(chain, jnp.asarray(q) + shift, qd)

    def to_control(q, qd, u):
        u = jnp.atleast_1d(jnp.asarray(u, chain.m.dtype))
        return Control(tau=jnp.concatenate([u, jnp.zeros(chain.n - u.shape[0], u.dtype)]))

    def to_qdd(state, a):
        return joint_accelerations(state, a)[:-1]

    def to_q(state):
        return _wrap(joint_angles(state) - shift), joint_velocities(state)[:-1]

    return Benchmark(chain, to_state, to_control, to_qdd, to_q)


# ---------------------------------------------------------------- shared maps: carts (absolute angles from upright, cw)

def cart_state(chain: Chain, q, qd) -> State:
    """State of a cart chain from q = [x, psi_1..psi_k] (psi absolute, clockwise from the upright) and qd."""
    q, qd = jnp.asarray(q, chain.m.dtype), jnp.asarray(qd, chain.m.dtype)
    phi, phid = HALF_PI - q[1:], -qd[1:]
    theta = jnp.concatenate([phi[:1], jnp.diff(phi)])
    theta_d = jnp.concatenate([phid[:1], jnp.diff(phid)])
    return from_joint_angles(chain, theta, theta_d, base=jnp.stack([q[0], 0.0 * q[0]]),
                             base_velocity=jnp.stack([qd[0], 0.0 * qd[0]]))


def cart_qdd(state: State, a):
    """[xdd, psidd_1..psidd_k] from point accelerations: xdd = a_1,x and psidd_k = -phidd_k = -L_k^T (a_{k+1} - a_k)."""
    return jnp.concatenate([a[0, :1], -link_angular_velocities(state.x, a)])


def cart_q(state: State):
    """(q, qd) = ([x, psi_1..psi_k], rates) of a cart chain's state (inverse of :func:`cart_state`)."""
    psi = _wrap(HALF_PI - link_angles(state.x))
    psid = -link_angular_velocities(state.x, state.v)
    return jnp.concatenate([state.x[0, :1], psi]), jnp.concatenate([state.v[0, :1], psid])


def cart_generalized_control(Q) -> Control:
    """Control realising generalized forces Q = [Q_x, Q_psi_1..Q_psi_k]: a force Q_x on the cart, a couple -Q_psi_k on
    link k. A couple T_k on link k alone is tau_k - tau_{k+1} = T_k (seed §4.2), so tau_k = sum_{j >= k} T_j."""
    Q = jnp.asarray(Q)
    T = -Q[1:]
    tau = jnp.concatenate([jnp.cumsum(T[::-1])[::-1], jnp.zeros(1, Q.dtype)])
    F = jnp.zeros((Q.shape[0], 2), Q.dtype).at[0, 0].set(Q[0])
    return Control(tau=tau, F=F)


def _cart_chain(m_cart, L, mass, com, inertia, k_omega=0.0, g=9.81) -> Chain:
    k = len(L)
    s = jnp.zeros((k + 1, 2)).at[0].set(jnp.array([0.0, 1.0]))
    return Chain(jnp.array([m_cart] + [0.0] * k), jnp.asarray(L), slider=[True] + [False] * k, s=s, c=0.0,
                 link_mass=jnp.asarray(mass), link_com=jnp.stack([jnp.asarray(com), jnp.zeros(k)], -1),
                 link_inertia=jnp.asarray(inertia), k_omega=k_omega, g=g)


def rail_normal_force(chain: Chain, state: State, control: Control, a):
    """Vertical force of the rail on the cart, N_c = sum over the points of (M a - F^e)_y: rods and joint torques
    are internal, so the y-components of all constraint forces sum to the rail's reaction (pins: none here)."""
    r = (mass_matrix(chain) @ a.reshape(-1)).reshape(-1, 2) - external_forces(chain, state, control)
    return jnp.sum(r[:, 1])


# ---------------------------------------------------------------- §13.1 single pendulum

def single_pendulum() -> Benchmark:
    """§13.1 (Perkins & Barto): unit point mass at the end of a massless unit rod, g = 1, theta counter-clockwise
    from the upright, tau at the fixed joint in the direction of theta (|tau| <= 0.225 usually)."""
    return _pinned(Chain([1.0, 1.0], [1.0], guided=[True, False], g=1.0), offset=HALF_PI)


def single_pendulum_closed_form(q, qd, u):
    """§13.1: thetadd = sin theta + tau."""
    return jnp.sin(q) + u


def gym_pendulum(g=10.0, m=1.0, l=1.0) -> Benchmark:
    """Gymnasium Pendulum-v1 (classic_control/pendulum.py): a uniform rod (I_c = m l^2/12) pinned at one end,
    theta counter-clockwise from the upright, torque u at the pin: thetadd = 3g/(2l) sin theta + 3/(m l^2) u."""
    chain = Chain([m, 0.0], [l], guided=[True, False], link_mass=[m], link_inertia=[m * l**2 / 12], g=g)
    return _pinned(chain, offset=HALF_PI)


# ---------------------------------------------------------------- §13.2 Acrobot

ACROBOT = dict(m1=1.0, m2=1.0, l1=1.0, l2=1.0, lc1=0.5, lc2=0.5, I1=1.0, I2=1.0, g=9.81)


def acrobot(**params) -> Benchmark:
    """§13.2 Acrobot with torques at both joints. Links with distributed mass: m_i at l_ci along the link, I_i about
    the centre of mass (the printed B_22 = m_2 l_c2^2 + I_2 is the inertia about joint 2 only if I_2 is central).
    q = (theta_1 from +x counter-clockwise, theta_2 relative): diffchain's own joint angles. u = (tau_1, tau_2)."""
    p = {**ACROBOT, **params}
    chain = Chain([1.0, 0.0, 0.0], [p["l1"], p["l2"]], guided=[True, False, False], g=p["g"],
                  link_mass=[p["m1"], p["m2"]], link_com=[[p["lc1"], 0.0], [p["lc2"], 0.0]],
                  link_inertia=[p["I1"], p["I2"]])
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


# ---------------------------------------------------------------- §13.3 three-link weightlifting arm

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


# ---------------------------------------------------------------- §14.1 cart-pole

CARTPOLE = dict(m_c=1.0, m_p=0.1, l=0.5, mu_c=0.0005, mu_p=0.000002, g=9.81)


def cartpole(friction="barto", **params) -> Benchmark:
    """§14.1 (Barto, Sutton & Anderson 1983): cart m_c on the x axis, uniform pole of mass m_p and half length l
    (I_c = m_p (2l)^2 / 12, hence the 4/3), q = [x, theta] with theta clockwise from the upright, u = F on the cart.
    Pole friction -mu_p thetadot at the pivot is joint damping (k_omega_1 = mu_p). Cart friction:
      "barto":  a force -mu_c sgn(xdot) (the form of Barto's equations; mu_c is then a force in newtons);
      "normal": Coulomb friction -mu_c N_c sgn(N_c xdot), N_c the rail's normal force (Florian 2007), solved exactly:
                N_c is affine in the friction force f, N_c = N_0 + k f, so f = -mu_c s N_0 / (1 + mu_c s k),
                s = sgn(N_0 xdot) (two forward-dynamics evaluations; valid while 1 + mu_c s k > 0, which holds for
                these parameters -- its failure is Painlevé's paradox);
      "none":   frictionless (Gymnasium's CartPole) -- pass mu_p=0 too."""
    p = {**CARTPOLE, **params}
    chain = _cart_chain(p["m_c"], [2 * p["l"]], [p["m_p"]], [p["l"]], [p["m_p"] * (2 * p["l"]) ** 2 / 12],
                        k_omega=jnp.array([p["mu_p"], 0.0]), g=p["g"])

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
        k = N(Control(base.tau, base.F + unit.F)) - N0
        s = jnp.sign(N0 * qd[0])
        f = -p["mu_c"] * s * N0 / (1 + p["mu_c"] * s * k)
        return Control(base.tau, base.F + f * unit.F)

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


def gym_cartpole(g=9.8, m_c=1.0, m_p=0.1, l=0.5) -> Benchmark:
    """Gymnasium CartPole-v1's parameters (classic_control/cartpole.py): no friction, g = 9.8."""
    return cartpole(friction="none", g=g, m_c=m_c, m_p=m_p, l=l, mu_c=0.0, mu_p=0.0)


# ---------------------------------------------------------------- §14.2 double pendulum on a cart (Bogdanov 2004)

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


# ---------------------------------------------------------------- §14.3 triple pendulum on a cart (Si & Wang 2001)

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
