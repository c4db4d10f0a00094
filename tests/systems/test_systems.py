"""The benchmark objects of seed 000 Part III (§13–14): chain model vs the seed's closed forms (diffchain.systems).

Three independent descriptions are compared at random states and inputs (float64):
  * the chain (diffchain's Cartesian recursion with distributed-mass links, sliders, joint damping),
  * the seed's closed-form equations, transcribed literally in diffchain/systems.py,
  * a Lagrangian derived here by autodiff of T(q, qdot) and V(q) written from the centres of mass (no diffchain code):
    M = d^2T/dqdot^2, qdd = M^-1 (Q + dL/dq - (d^2T/dqdot dq) qdot), friction as a Rayleigh function / Coulomb forces.

Findings (each pinned by a test below):
  * §13.1, §13.2, §13.3, §14.2 as printed agree with the chain to ~1e-15 (relative). §13.2 needs I_1, I_2 about the
    centres of mass; §13.3's normalized B, c, h are unit point masses at joints 2, 3 and the payload m at the tip.
  * §14.1 (cart-pole): the seed prints "+ mu_p thetadot / (m_p l)" in thetadd. The chain, the Lagrangian and the energy
    balance say "-": with "+" the pole friction *feeds* energy, dE/dt = F xdot - mu_c |xdot| + mu_p thetadot^2.
    Error of the print: 2 mu_p thetadot / (m_p l^2 (4/3 - m_p cos^2/(m_c+m_p))), ~1e-4 rad/s^2 at thetadot = 3.
  * §14.1 friction (Florian 2007): Barto's "mu_c sgn(xdot)" is a friction force of constant magnitude mu_c = 0.0005 N.
    With that reading the (sign-corrected) equations are exact rigid-body dynamics. Coulomb friction proportional to
    the rail's normal force N_c (which the chain yields as a constraint reaction) gives the corrected form in
    systems.cartpole_normal_friction_closed_form (derived by Newton–Euler; it agrees with the chain to 1e-15 even at
    mu_c = 0.3). With mu_c = 0.0005 the two friction models differ by mu_c (N_c - 1) ~ 5e-3 N on the cart.
  * §14.3 (Si & Wang): A_10 is printed I_1 + m_2 l_1^2 + (m_2 + m_3) L_1^2; it must be I_1 + m_1 l_1^2 + ... (the
    Lagrangian's M[1,1]). The printed value is 0.0852 instead of 0.1169 (-27%); qdd errors are O(1) and larger.
    The Coulomb terms -sign(x) mu_x A37, -sign(theta_i) mu_i A_{37+i} use the signs of positions: as printed they are
    not friction (their power is positive in about half of the state space); signs of the velocities are meant.
  * Gymnasium: CartPole-v1, Acrobot-v1 ("book") and Pendulum-v1 agree with the chain to round-off; Acrobot's "nips"
    variant drops the m_2 l_1 l_c2 thetadot_1^2 sin theta_2 term and disagrees by design.
"""
import functools
import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc
from diffchain import systems as S

N = 64
TOL = 1e-10


def batch(fn):
    return jax.jit(jax.vmap(fn))


def abs_err(a, b):
    """max |a - b| over all samples and components (the agreement criterion, TOL = 1e-10 absolute)."""
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


def rel_err(a, b):
    """max |a - b| / (1 + max |b|) per sample, the worst sample."""
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.max(np.abs(a - b), -1) / (1 + np.max(np.abs(b), -1))))


def samples(nq, nu, u_max, cart=False, seed=0):
    """N random states (angles anywhere, rates in [-3, 3], cart within x_max = 2.4) and inputs in [-u_max, u_max]."""
    RNG = np.random.default_rng(seed)
    q = RNG.uniform(-np.pi, np.pi, (N, nq))
    qd = RNG.uniform(-3, 3, (N, nq))
    if cart:
        q[:, 0] = RNG.uniform(-2.4, 2.4, N)
    u = RNG.uniform(-u_max, u_max, (N, nu) if nu else (N,))
    return jnp.asarray(q), jnp.asarray(qd), jnp.asarray(u)


# ------------------------------------------------------------------ independent Lagrangians (no diffchain code)

def lagrange_qdd(T, V, q, qd, Q):
    """Euler–Lagrange by autodiff: M qdd = Q + dL/dq - (d/dq dT/dqdot) qdot."""
    M = jax.hessian(T, argnums=1)(q, qd)
    dLdq = jax.grad(lambda q: T(q, qd) - V(q))(q)
    mixed = jax.jacfwd(jax.grad(T, argnums=1), argnums=0)(q, qd)
    return jnp.linalg.solve(M, Q + dLdq - mixed @ qd)


def pinned_TV(L, m, lc, I, g, offset=0.0):
    """Pinned chain, q = relative joint angles (theta_1 from +x plus ``offset``); link k: m_k at lc_k, I_k central."""
    L, m, lc, I = map(jnp.asarray, (L, m, lc, I))

    def coms(q):
        phi = jnp.cumsum(q) + offset
        e = jnp.stack([jnp.cos(phi), jnp.sin(phi)], -1)
        base = jnp.concatenate([jnp.zeros((1, 2)), jnp.cumsum(L[:, None] * e, 0)[:-1]])
        return base + lc[:, None] * e

    def T(q, qd):
        _, v = jax.jvp(coms, (q,), (qd,))
        return 0.5 * jnp.sum(m * jnp.sum(v**2, -1)) + 0.5 * jnp.sum(I * jnp.cumsum(qd) ** 2)

    return T, lambda q: g * jnp.sum(m * coms(q)[:, 1])


def cart_TV(mc, L, m, lc, I, g):
    """Cart at (x, 0); link k: absolute angle psi_k clockwise from the upright, mass m_k at lc_k, I_k central."""
    L, m, lc, I = map(jnp.asarray, (L, m, lc, I))

    def coms(q):
        x, psi = q[0], q[1:]
        e = jnp.stack([jnp.sin(psi), jnp.cos(psi)], -1)
        base = jnp.concatenate([jnp.zeros((1, 2)), jnp.cumsum(L[:, None] * e, 0)[:-1]]) + jnp.array([x, 0.0])
        return base + lc[:, None] * e

    def T(q, qd):
        _, v = jax.jvp(coms, (q,), (qd,))
        return 0.5 * mc * qd[0] ** 2 + 0.5 * jnp.sum(m * jnp.sum(v**2, -1)) + 0.5 * jnp.sum(I * qd[1:] ** 2)

    return T, lambda q: g * jnp.sum(m * coms(q)[:, 1])


def power_balance(chain, state, control):
    """dE/dt of the chain's total energy along its own dynamics (jvp of dc.energy along (v, a))."""
    a = dc.forward_dynamics(chain, state, control)
    E = lambda x, v: dc.energy(chain, dc.State(x, v))  # noqa: E731
    return jax.jvp(E, (state.x, state.v), (state.v, a))[1]


# ------------------------------------------------------------------ §13.1 single pendulum, Pendulum-v1

PEND = S.single_pendulum()
_pend = batch(lambda q, qd, u: (PEND.qdd(q, qd, u), S.single_pendulum_closed_form(q, qd, u)))


def test_single_pendulum_matches_seed():
    q, qd, u = samples(1, 1, 0.225, seed=1)
    chain, closed = _pend(q, qd, u)
    assert abs_err(chain, closed) < TOL


GYM_PEND = S.gym_pendulum()


def gym_pendulum_thetadd(th, u, g=10.0, m=1.0, l=1.0):
    """gymnasium/envs/classic_control/pendulum.py (v1.4.0), PendulumEnv.step:
    newthdot = thdot + (3 * g / (2 * l) * np.sin(th) + 3.0 / (m * l**2) * u) * dt."""
    return 3 * g / (2 * l) * jnp.sin(th) + 3.0 / (m * l**2) * u


_gym_pend = batch(lambda q, qd, u: (GYM_PEND.qdd(q, qd, u), gym_pendulum_thetadd(q, u)))


def test_gym_pendulum_is_a_uniform_rod():
    q, qd, u = samples(1, 1, 2.0, seed=2)
    chain, gym = _gym_pend(q, qd, u)
    assert abs_err(chain, gym) < TOL


# ------------------------------------------------------------------ §13.2 Acrobot

ACRO = S.acrobot()
_acro_T, _acro_V = pinned_TV([1.0, 1.0], [1.0, 1.0], [0.5, 0.5], [1.0, 1.0], 9.81)
_acro = batch(lambda q, qd, u: (ACRO.qdd(q, qd, u), S.acrobot_closed_form(q, qd, u),
                                lagrange_qdd(_acro_T, _acro_V, q, qd, u)))


def test_acrobot_matches_seed_and_lagrangian():
    """I_1, I_2 are central: B_22 = m_2 l_c2^2 + I_2 is the inertia of link 2 about joint 2."""
    q, qd, u = samples(2, 2, 1.0, seed=3)
    chain, closed, lag = _acro(q, qd, u)
    assert abs_err(chain, closed) < TOL
    assert abs_err(lag, closed) < TOL


def gym_acrobot_dsdt(s, a, book=True):
    """gymnasium/envs/classic_control/acrobot.py (v1.4.0), AcrobotEnv._dsdt, LINK_MOI = 1, g = 9.8; theta_1 from
    the downward vertical, torque a on joint 2 only."""
    m1 = m2 = l1 = I1 = I2 = 1.0
    lc1 = lc2 = 0.5
    g = 9.8
    theta1, theta2, dtheta1, dtheta2 = s
    cos, sin, pi = jnp.cos, jnp.sin, jnp.pi
    d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * cos(theta2)) + I1 + I2
    d2 = m2 * (lc2**2 + l1 * lc2 * cos(theta2)) + I2
    phi2 = m2 * lc2 * g * cos(theta1 + theta2 - pi / 2.0)
    phi1 = (-m2 * l1 * lc2 * dtheta2**2 * sin(theta2) - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin(theta2)
            + (m1 * lc1 + m2 * l1) * g * cos(theta1 - pi / 2) + phi2)
    if book:
        ddtheta2 = ((a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * sin(theta2) - phi2)
                    / (m2 * lc2**2 + I2 - d2**2 / d1))
    else:  # "nips"
        ddtheta2 = (a + d2 / d1 * phi1 - phi2) / (m2 * lc2**2 + I2 - d2**2 / d1)
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return jnp.stack([ddtheta1, ddtheta2])


GYM_ACRO = S.acrobot(g=9.8)


def _gym_acro_fn(q, qd, a):
    chain = GYM_ACRO.qdd(q - jnp.array([jnp.pi / 2, 0.0]), qd, jnp.stack([0.0 * a, a]))
    s = jnp.concatenate([q, qd])
    return chain, gym_acrobot_dsdt(s, a), gym_acrobot_dsdt(s, a, book=False)


_gym_acro = batch(_gym_acro_fn)


def test_gym_acrobot_book_matches_chain_nips_does_not():
    q, qd, a = samples(2, 0, 1.0, seed=4)
    chain, book, nips = _gym_acro(q, qd, a)
    assert abs_err(chain, book) < TOL
    assert rel_err(chain, nips) > 1e-2  # nips drops the thetadot_1^2 term of c_2


# ------------------------------------------------------------------ §13.3 weightlifting arm

PAYLOAD = 1.7
ARM = S.weightlifting_arm(payload=PAYLOAD)
_arm_T, _arm_V = pinned_TV([1.0, 1.0, 1.0], [1.0, 1.0, PAYLOAD], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0], 9.81)
_arm = batch(lambda q, qd, u: (ARM.qdd(q, qd, u), S.weightlifting_arm_closed_form(q, qd, u, payload=PAYLOAD),
                               lagrange_qdd(_arm_T, _arm_V, q, qd, u)))


def test_weightlifting_arm_matches_seed_and_lagrangian():
    """The printed normalized B, c, h are exactly unit point masses at joints 2, 3 and the payload at the tip."""
    q, qd, u = samples(3, 3, 5.0, seed=5)
    chain, closed, lag = _arm(q, qd, u)
    assert abs_err(chain, closed) < TOL
    assert abs_err(lag, closed) < TOL


# ------------------------------------------------------------------ §14.1 cart-pole

CP = S.CARTPOLE
CARTPOLE = S.cartpole()
_cp_T, _cp_V = cart_TV(CP["m_c"], [2 * CP["l"]], [CP["m_p"]], [CP["l"]], [CP["m_p"] * (2 * CP["l"]) ** 2 / 12], CP["g"])


def _cp_lagrange(q, qd, F):
    Q = jnp.stack([F - CP["mu_c"] * jnp.sign(qd[0]), -CP["mu_p"] * qd[1]])
    return lagrange_qdd(_cp_T, _cp_V, q, qd, Q)


def _cp_energy_rate(q, qd, qdd):
    E = lambda q, qd: _cp_T(q, qd) + _cp_V(q)  # noqa: E731
    return jax.jvp(E, (q, qd), (qd, qdd))[1]


def _cp_fn(q, qd, F):
    chain = CARTPOLE.qdd(q, qd, F)
    printed = S.cartpole_closed_form(q, qd, F)
    fixed = S.cartpole_closed_form(q, qd, F, printed=False)
    state = CARTPOLE.to_state(q, qd)
    power = power_balance(CARTPOLE.chain, state, CARTPOLE.to_control(q, qd, F))
    return chain, printed, fixed, _cp_lagrange(q, qd, F), power, _cp_energy_rate(q, qd, printed)


_cp = batch(_cp_fn)


def test_cartpole_pole_friction_sign():
    """The seed's thetadd has +mu_p thetadot/(m_p l); the chain, the Lagrangian and the energy balance need -.

    With the sign fixed, Barto's equations (cart friction = a force of constant magnitude mu_c) are exact. The print is
    off by exactly 2 mu_p thetadot / (m_p l^2 (4/3 - m_p cos^2 theta / (m_c + m_p))) in thetadd, and its energy rate is
    F xdot - mu_c |xdot| + mu_p thetadot^2 (the pole friction pumps energy in)."""
    q, qd, F = samples(2, 0, 10.0, cart=True, seed=6)
    chain, printed, fixed, lag, chain_power, printed_power = map(np.asarray, _cp(q, qd, F))
    assert abs_err(chain, fixed) < TOL
    assert abs_err(lag, fixed) < TOL
    m_c, m_p, l, mu_c, mu_p = (CP[k] for k in ("m_c", "m_p", "l", "mu_c", "mu_p"))
    th, thd, xd = np.asarray(q[:, 1]), np.asarray(qd[:, 1]), np.asarray(qd[:, 0])
    gap = 2 * mu_p * thd / (m_p * l**2 * (4 / 3 - m_p * np.cos(th) ** 2 / (m_c + m_p)))
    np.testing.assert_allclose(printed[:, 1] - chain[:, 1], gap, rtol=1e-6, atol=1e-14)
    assert np.max(np.abs(gap)) > 5e-5  # well above round-off: the print is measurably wrong
    work = np.asarray(F) * xd - mu_c * np.abs(xd)
    np.testing.assert_allclose(chain_power, work - mu_p * thd**2, rtol=0, atol=1e-10)
    np.testing.assert_allclose(printed_power, work + mu_p * thd**2, rtol=0, atol=1e-10)


CP_NORMAL = S.cartpole("normal")
CP_NORMAL_BIG = S.cartpole("normal", mu_c=0.3)


def _cp_normal_fn(q, qd, F):
    state = CP_NORMAL.to_state(q, qd)
    ctl = CP_NORMAL.to_control(q, qd, F)
    a = dc.forward_dynamics(CP_NORMAL.chain, state, ctl)
    N_c = S.rail_normal_force(CP_NORMAL.chain, state, ctl, a)
    return (CP_NORMAL.to_qdd(state, a), S.cartpole_normal_friction_closed_form(q, qd, F), ctl.F[0, 0] - F, N_c,
            CP_NORMAL_BIG.qdd(q, qd, F), S.cartpole_normal_friction_closed_form(q, qd, F, mu_c=0.3))


_cp_normal = batch(_cp_normal_fn)


def test_cartpole_coulomb_friction_with_normal_force():
    """Florian (2007): Coulomb cart friction is mu_c |N_c| opposing xdot, N_c = (m_c + m_p) g - m_p l (thetadd sin +
    thetadot^2 cos) the rail's normal force. The chain gets N_c as the sum of the vertical constraint reactions; since
    N_c is affine in the friction force, the friction exactly (systems.cartpole). The closed form derived for this model
    (systems.cartpole_normal_friction_closed_form: denominator l (4/3 - m_p cos (cos - mu_c s sin)/(m_c + m_p))) agrees,
    also with a large mu_c = 0.3. Barto's constant 0.0005 N is ~10x smaller than mu_c N_c ~ 5.4e-3 N."""
    q, qd, F = samples(2, 0, 10.0, cart=True, seed=7)
    chain, closed, friction, N_c, chain_big, closed_big = map(np.asarray, _cp_normal(q, qd, F))
    assert abs_err(chain, closed) < TOL
    assert abs_err(chain_big, closed_big) < TOL
    np.testing.assert_allclose(np.abs(friction), CP["mu_c"] * np.abs(N_c), rtol=1e-12)
    assert np.all(friction * np.asarray(qd[:, 0]) <= 0)
    m_c, m_p, l, g = (CP[k] for k in ("m_c", "m_p", "l", "g"))
    th, thd = np.asarray(q[:, 1]), np.asarray(qd[:, 1])
    np.testing.assert_allclose(N_c, (m_c + m_p) * g - m_p * l * (chain[:, 1] * np.sin(th) + thd**2 * np.cos(th)),
                               rtol=1e-12)


GYM_CP = S.gym_cartpole()


def gym_cartpole_accel(state, force):
    """gymnasium/envs/classic_control/cartpole.py (v1.4.0), CartPoleEnv.step: g = 9.8, masscart 1, masspole 0.1,
    length 0.5 (half the pole), no friction."""
    gravity, masspole, total_mass, length = 9.8, 0.1, 1.1, 0.5
    polemass_length = masspole * length
    x, x_dot, theta, theta_dot = state
    costheta, sintheta = jnp.cos(theta), jnp.sin(theta)
    temp = (force + polemass_length * theta_dot**2 * sintheta) / total_mass
    thetaacc = (gravity * sintheta - costheta * temp) / (length * (4.0 / 3.0 - masspole * costheta**2 / total_mass))
    xacc = temp - polemass_length * thetaacc * costheta / total_mass
    return jnp.stack([xacc, thetaacc])


_gym_cp = batch(lambda q, qd, F: (GYM_CP.qdd(q, qd, F), gym_cartpole_accel(jnp.stack([q[0], qd[0], q[1], qd[1]]), F)))


def test_gym_cartpole_matches_chain():
    q, qd, F = samples(2, 0, 10.0, cart=True, seed=8)
    chain, gym = _gym_cp(q, qd, F)
    assert abs_err(chain, gym) < TOL


# ------------------------------------------------------------------ §14.2 double pendulum on a cart (Bogdanov)

BG = S.BOGDANOV
DOUBLE = S.double_cart_pendulum()
_bg_T, _bg_V = cart_TV(BG["m0"], [BG["L1"], BG["L2"]], [BG["m1"], BG["m2"]], [BG["L1"] / 2, BG["L2"] / 2],
                       [BG["m1"] * BG["L1"] ** 2 / 12, BG["m2"] * BG["L2"] ** 2 / 12], BG["g"])
_double = batch(lambda q, qd, u: (DOUBLE.qdd(q, qd, u), S.double_cart_pendulum_closed_form(q, qd, u),
                                  lagrange_qdd(_bg_T, _bg_V, q, qd, jnp.stack([u, 0.0, 0.0]))))


def test_double_cart_pendulum_matches_seed():
    """§14.2 as printed (Bogdanov 2004, Table 1) is right: chain, closed form and Lagrangian agree."""
    q, qd, u = samples(3, 0, 10.0, cart=True, seed=9)
    chain, closed, lag = _double(q, qd, u)
    assert abs_err(chain, closed) < TOL
    assert abs_err(lag, closed) < TOL


# ------------------------------------------------------------------ §14.3 triple pendulum on a cart (Si & Wang)

SW = S.SI_WANG
TRIPLE = S.triple_cart_pendulum()
TRIPLE_PRINTED_COULOMB = S.triple_cart_pendulum(coulomb="printed")
_sw_T, _sw_V = cart_TV(SW["M"], [SW["L1"], SW["L2"], SW["L3"]], [SW["m1"], SW["m2"], SW["m3"]],
                       [SW["l1"], SW["l2"], SW["l3"]], [SW["I1"], SW["I2"], SW["I3"]], SW["g"])


def _sw_rayleigh(qd):
    """Viscous cart friction and joint friction on relative velocities (the printed C's constant terms)."""
    w = jnp.concatenate([qd[1:2], jnp.diff(qd[1:])])
    return 0.5 * SW["Cc"] * qd[0] ** 2 + 0.5 * jnp.sum(jnp.array([SW["C1"], SW["C2"], SW["C3"]]) * w**2)


def _sw_fn(q, qd, u):
    coulomb = S.triple_cart_pendulum_coulomb(q, qd, "velocity")
    Q = coulomb.at[0].add(SW["Ks"] * u) - jax.grad(_sw_rayleigh)(qd)
    state = TRIPLE.to_state(q, qd)
    return (TRIPLE.qdd(q, qd, u),
            S.triple_cart_pendulum_closed_form(q, qd, u, printed=False, coulomb="velocity"),
            S.triple_cart_pendulum_closed_form(q, qd, u, printed=True, coulomb="velocity"),
            lagrange_qdd(_sw_T, _sw_V, q, qd, Q),
            jax.hessian(_sw_T, argnums=1)(q, qd)[1, 1],
            TRIPLE_PRINTED_COULOMB.qdd(q, qd, u),
            S.triple_cart_pendulum_closed_form(q, qd, u, printed=False, coulomb="printed"),
            power_balance(TRIPLE.chain, state, TRIPLE.to_control(q, qd, u)),
            jnp.dot(Q, qd))


_sw = batch(_sw_fn)
SW_SAMPLES = samples(4, 0, 1.0, cart=True, seed=10)


@functools.cache
def sw_results():
    return tuple(map(np.asarray, _sw(*SW_SAMPLES)))


def test_triple_cart_pendulum_A10_transcription_error():
    """§14.3 prints A_10 = I_1 + m_2 l_1^2 + (m_2 + m_3) L_1^2. The Lagrangian's M[1,1] (and the chain) give
    I_1 + m_1 l_1^2 + (m_2 + m_3) L_1^2 = 0.11686 (printed: 0.08516, -27%). With that single correction the closed form
    agrees with the chain and the Lagrangian to round-off; the printed one is wrong by O(1) in qdd."""
    chain, fixed, printed, lag, M11, *_ = sw_results()
    assert abs_err(chain, fixed) < TOL
    assert abs_err(lag, fixed) < TOL
    A10 = SW["I1"] + SW["m1"] * SW["l1"] ** 2 + (SW["m2"] + SW["m3"]) * SW["L1"] ** 2
    np.testing.assert_allclose(M11, A10, rtol=1e-14)
    A10_printed = SW["I1"] + SW["m2"] * SW["l1"] ** 2 + (SW["m2"] + SW["m3"]) * SW["L1"] ** 2
    assert abs(A10_printed / A10 - 1) > 0.25
    assert rel_err(chain, printed) > 0.1


def test_triple_cart_pendulum_coulomb_terms():
    """The print's f(q, u) has -sign(x) mu_x A37, -sign(theta_i) mu_i A_{37+i}: signs of *positions*. The chain takes
    either form as generalized forces and agrees with the closed form for both; but only the velocity form dissipates:
    the printed terms' power is positive at many states. The chain's energy rate equals the power of all
    non-conservative generalized forces (input, viscous, Coulomb)."""
    q, qd, u = SW_SAMPLES
    *_, chain_printed, closed_printed, chain_power, forces_power = sw_results()
    assert abs_err(chain_printed, closed_printed) < TOL
    np.testing.assert_allclose(chain_power, forces_power, rtol=0, atol=1e-9)
    printed_power = np.sum(np.asarray(jax.vmap(lambda q, qd: S.triple_cart_pendulum_coulomb(q, qd, "printed"))(q, qd))
                           * np.asarray(qd), -1)
    velocity_power = np.sum(np.asarray(jax.vmap(S.triple_cart_pendulum_coulomb)(q, qd)) * np.asarray(qd), -1)
    assert np.all(velocity_power <= 0)
    assert np.mean(printed_power > 0) > 0.2


def test_triple_cart_pendulum_solvers_agree():
    """The KKT solver gives the same qdd as the recursion on the richest object (links, slider, damping)."""
    kkt = batch(lambda q, qd, u: TRIPLE.qdd(q, qd, u, solver=dc.KKT()))(*SW_SAMPLES)
    assert abs_err(kkt, sw_results()[0]) < TOL


@pytest.mark.parametrize("name", ["single_pendulum", "acrobot", "weightlifting_arm", "cartpole", "double_cart_pendulum",
                                  "triple_cart_pendulum"])
def test_state_maps_round_trip(name):
    """to_q(to_state(q, qd)) == (q, qd), and the states are on the constraint manifold."""
    bm = getattr(S, name)()
    nq = bm.chain.n - 1 + int(bool(bm.chain.slider[0]))
    rng = np.random.default_rng(11)
    q, qd = rng.uniform(-3, 3, nq), rng.uniform(-3, 3, nq)
    state = bm.to_state(q, qd)
    dc.check_state(bm.chain, state, tol=1e-12)
    q2, qd2 = bm.to_q(state)
    np.testing.assert_allclose(q2, q, atol=1e-12)
    np.testing.assert_allclose(qd2, qd, atol=1e-12)


# ------------------------------------------------------------------ the real Gymnasium code (optional dependency)

needs_gym = pytest.mark.skipif(importlib.util.find_spec("gymnasium") is None, reason="gymnasium not installed")


@needs_gym
def test_transcriptions_match_installed_gymnasium():
    """The equations copied above are Gymnasium's (run its own code at a few states)."""
    from gymnasium.envs.classic_control.acrobot import AcrobotEnv
    from gymnasium.envs.classic_control.cartpole import CartPoleEnv
    from gymnasium.envs.classic_control.pendulum import PendulumEnv

    rng = np.random.default_rng(0)
    acro, cp, pend = AcrobotEnv(), CartPoleEnv(), PendulumEnv()
    for _ in range(5):
        s, a = rng.uniform(-3, 3, 4), float(rng.uniform(-1, 1))
        np.testing.assert_allclose(np.asarray(acro._dsdt(np.append(s, a))[2:4], float), gym_acrobot_dsdt(s, a),
                                   rtol=1e-12)
        s = rng.uniform(-0.2, 0.2, 4)
        cp.state = s.copy()
        cp.step(1)
        np.testing.assert_allclose((np.asarray(cp.state)[[1, 3]] - s[[1, 3]]) / cp.tau,
                                   gym_cartpole_accel(s, 10.0), rtol=1e-9)
        th, thd, u = rng.uniform(-3, 3), rng.uniform(-1, 1), rng.uniform(-2, 2)
        pend.state = np.array([th, thd])
        pend.step(np.array([u]))
        np.testing.assert_allclose((pend.state[1] - thd) / pend.dt, gym_pendulum_thetadd(th, u), rtol=1e-9)


def test_four_bar_is_the_crank_rocker_its_docstring_draws():
    """systems.four_bar: the drawn state closes the loop, the link lengths are those documented, the lengths pass
    Grashof's test with the crank shortest (s + l <= p + q: the crank turns fully, the rocker swings), and the crank
    does turn fully: the loop assembles (Freudenstein's rocker angle exists) at every crank angle."""
    mech, s0 = S.four_bar(stop=1.28)
    assert mech.point_names[:5] == ("A0", "B0", "A", "B", "C") and mech.limit_names == ("stop",)
    assert float(jnp.max(jnp.abs(mech.phi(s0.x.reshape(-1), 0.0)))) < 1e-14
    P = {n: np.asarray(p) for n, p in zip(mech.point_names, mech.points(s0.x.reshape(-1)))}
    d, a, b, c = (np.linalg.norm(P[u] - P[v]) for u, v in (("A0", "B0"), ("A0", "A"), ("A", "B"), ("B0", "B")))
    np.testing.assert_allclose([a, b, c], [1.0, 1.80, 1.43], atol=5e-3)
    s, l_ = min(a, b, c, d), max(a, b, c, d)
    assert s == a and s + l_ <= a + b + c + d - s - l_  # Grashof, crank shortest
    np.testing.assert_allclose(np.arctan2(*(P["B"] - P["B0"])[::-1]), 1.36, atol=5e-3)  # the rocker as drawn
    th = np.linspace(0.0, 2 * np.pi, 73)  # B on both circles (about A, radius b; about B0, radius c) for every crank angle
    A = np.stack([a * np.cos(th), a * np.sin(th)], -1)
    gap = np.linalg.norm(A - P["B0"], axis=-1)
    assert np.all((gap <= b + c) & (gap >= abs(b - c)))
    assert S.four_bar(motor=False)[0].motor_idx.shape[0] == 0 and S.four_bar()[0].motor_idx.shape[0] == 1
    assert S.four_bar()[0].limit_names == () and S.four_bar(dtype=jnp.float32)[0].dtype == jnp.float32
