"""Closed loops in joint coordinates (seed 001 §8.11–8.12, seed 004 suspension): the generic solvers on (M, Q, J, gamma)
from a Lagrangian, loop-closure functions, closed-loop inverse dynamics."""
import jax
import jax.numpy as jnp

import diffchain as dc
import numpy as np

from diffchain._solvers import dense, mechanism as ms
from diffchain._analysis import inverse as mechsim

SOLVERS = [dc.KKT(), dc.RangeSpace(), dc.NullSpace(), dc.Larin(), dc.NullSpace(independent=(0, 3))]
e = lambda a: jnp.stack([jnp.cos(a), jnp.sin(a)])  # noqa: E731

# ---- seed 001 Fig. 8.3: two-link arm (B1: q1 at the origin, B4: q4 at the elbow) + linear actuator (cylinder B2
# pinned to the ground at (l1, 0), angle q2; piston B3, extension q3 = d); loop joint 5: piston tip = point of B1 at l2.
# The figure is missing from the seed; this geometry reproduces its text: a triangle loop with sides l1, l2, d,
# y = (q1, q4), G block-diagonal with a 3x1 and a 1x1 block, and d = 0 when l1 = l2 and q1 = 0.
L1, L4, l1, l2, g0 = 1.2, 1.0, 0.5, 0.8, 9.81
m = dict(B1=2.0, B2=1.0, B3=0.6, B4=1.5)
I = dict(B1=0.25, B2=0.05, B3=0.02, B4=0.12)
c2, c3 = 0.3, 0.25                       # cylinder CoM from joint 2; piston CoM behind the tip


def centres(q):
    q1, q2, q3, q4 = q
    base = jnp.array([l1, 0.0])
    return dict(B1=(0.5 * L1 * e(q1), q1), B4=(L1 * e(q1) + 0.5 * L4 * e(q1 + q4), q1 + q4),
                B2=(base + c2 * e(q2), q2), B3=(base + (q3 - c3) * e(q2), q2))


def kinetic(q, qd):
    T = 0.0
    for k, (c, ang) in centres(q).items():
        vc, w = jax.jvp(lambda q_: centres(q_)[k], (q,), (qd,))[1]
        T = T + 0.5 * m[k] * vc @ vc + 0.5 * I[k] * w**2
    return T


def potential(q):
    return g0 * sum(m[k] * c[1] for k, (c, _) in centres(q).items())


def loop(q, t):
    """Loop joint 5: piston tip minus the point of B1 at distance l2 from joint 1 (2 rows)."""
    return jnp.array([l1, 0.0]) + q[2] * e(q[1]) - l2 * e(q[0])


def gamma_fn(y):
    """Seed 001 §8.11: q = gamma(y) with d > 0 and the four-quadrant arctangent."""
    p = l2 * e(y[0]) - jnp.array([l1, 0.0])
    return jnp.stack([y[0], jnp.arctan2(p[1], p[0]), jnp.sqrt(p @ p), y[1]])


@jax.jit
def fig83_all(y, yd, tau):
    q, qd, G, g = mechsim.loop_closure_terms(gamma_fn, y, yd)
    M, Q = ms.lagrange_terms(kinetic, potential, q, qd, tau)
    J, k = dc.constraint_terms(loop, q, qd, 0.0)
    on = jnp.ones((2,), bool)
    outs = [s.system(M, Q, J, k, on).a for s in SOLVERS]
    ydd, qdd_lc = mechsim.loop_closure_dynamics(lambda q_: M, lambda q_, qd_: Q, gamma_fn, y, yd)
    Gp, gp, free = dense.null_space_basis(J, k, on, jnp.array([True, False, False, True]))
    return jnp.stack(outs), qdd_lc, ydd, G, g, Gp, gp, free, M, Q


def test_fig83_constraint_form_equals_loop_closure_form():
    rng = np.random.default_rng(3)
    for _ in range(3):
        y, yd, tau = rng.uniform(0.3, 2.5, 2), rng.uniform(-2, 2, 2), rng.uniform(-3, 3, 4)
        outs, qdd_lc, ydd, G, g, Gp, gp, free, _, _ = fig83_all(y, yd, tau)
        for qdd in outs:
            np.testing.assert_allclose(qdd, qdd_lc, rtol=1e-10, atol=1e-10)
        # eq. 8.51 with the user's independent coordinates (q1, q4) is d gamma/dy and G_dot y_dot (eqs. 8.58, 8.60)
        np.testing.assert_allclose(Gp[:, np.asarray(free)], G, atol=1e-12)
        np.testing.assert_allclose(gp, g, atol=1e-12)
        assert np.allclose(G[3], [0, 1]) and np.allclose(G[:3, 1], 0)       # the block structure of Fig. 8.3


def test_fig83_inverse_dynamics_reproduces_commanded_motion():
    """Example 8.2: actuators at joints 3 and 4: G_u = [[u2, 0], [0, 1]], u = [[1/u2, u1/u2, 1, 0], [0, 0, 0, 1]]
    tau_ID; forward dynamics with those forces gives back the commanded y_dd."""
    y, yd, ydd_cmd = jnp.array([0.9, -0.4]), jnp.array([0.7, 1.3]), jnp.array([-1.5, 2.0])
    zero = jnp.zeros(4)
    _, _, _, G, g, _, _, _, M, Q = fig83_all(y, yd, zero)
    tau_id = M @ (G @ ydd_cmd + g) - Q
    act = mechsim.actuator_forces(G, tau_id, jnp.eye(4)[:, 2:])
    assert int(act.kind) == mechsim.PROPER and float(act.residual) < 1e-10
    u1, u2 = G[1, 0], G[2, 0]
    seed = jnp.array([[1 / u2, u1 / u2, 1, 0], [0, 0, 0, 1]]) @ tau_id
    np.testing.assert_allclose(act.u, seed, rtol=1e-10)
    outs, _, ydd, *_ = fig83_all(y, yd, jnp.zeros(4).at[2:].set(act.u))
    np.testing.assert_allclose(ydd, ydd_cmd, rtol=1e-10, atol=1e-10)
    # only joint 4 actuated: under-actuated; all four: redundantly actuated, minimum-norm u
    assert int(mechsim.actuator_forces(G, tau_id, jnp.eye(4)[:, 3:]).kind) == mechsim.UNDER
    red = mechsim.actuator_forces(G, tau_id, jnp.eye(4))
    assert int(red.kind) == mechsim.REDUNDANT and float(red.residual) < 1e-10
    np.testing.assert_allclose(red.u, np.linalg.pinv(np.asarray(G.T)) @ np.asarray(G.T @ tau_id), rtol=1e-9)
    _, _, ydd2, *_ = fig83_all(y, yd, red.u)
    np.testing.assert_allclose(ydd2, ydd_cmd, rtol=1e-10, atol=1e-10)


def test_fig83_loop_closure_rollout_has_no_drift():
    """Integrating y (seed §8.11) keeps the loop closed to round-off over 2000 RK4 steps, without stabilisation."""
    def f(z):
        y, yd = z[:2], z[2:]
        ydd = fig83_all(y, yd, jnp.zeros(4))[2]
        return jnp.concatenate([yd, ydd])

    def rk4(z, _):
        h = 2e-3
        k1 = f(z); k2 = f(z + h / 2 * k1); k3 = f(z + h / 2 * k2); k4 = f(z + h * k3)  # noqa: E702
        z = z + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        return z, jnp.max(jnp.abs(loop(gamma_fn(z[:2]), 0.0)))

    _, err = jax.jit(lambda z: jax.lax.scan(rk4, z, None, length=2000))(jnp.array([1.0, 0.3, 0.0, 0.0]))
    assert float(jnp.max(err)) < 1e-13


# ---- seed 004: planar double-wishbone suspension, angles phi1..3, constraints f1, f2, spring-damper F(xi, xi_dot)
ls, lb, lc, l0, p, mm2 = 0.3, 0.25, 0.28, 0.2, 0.12, 4.0
I1, I2T, I3 = 0.05, 0.08, 0.03
lspr, dspr, beta, kspr, cspr = 0.35, 0.15, 0.4, 2000.0, 50.0
a_s, b_s = lspr**2 + 2 * dspr**2, dspr * np.sqrt(lspr**2 + dspr**2)


def susp_kinetic(s, sd):
    x2 = lambda s_: jnp.stack([ls * jnp.sin(s_[0]) - p * jnp.sin(s_[1]), ls * jnp.cos(s_[0]) + p * jnp.cos(s_[1])])  # noqa
    v2 = jax.jvp(x2, (s,), (sd,))[1]
    return 0.5 * (I1 * sd[0] ** 2 + I2T * sd[1] ** 2 + mm2 * v2 @ v2 + I3 * sd[2] ** 2)


def susp_f(s, t):
    return jnp.stack([ls * jnp.sin(s[0]) - lb * jnp.sin(s[1]) - lc * jnp.sin(s[2]),
                      ls * jnp.cos(s[0]) + lb * jnp.cos(s[1]) + lc * jnp.cos(s[2]) - l0])


def xi(s):
    return jnp.sqrt(a_s - 2 * b_s * jnp.cos(s[0] - beta)) - lspr


@jax.jit
def susp_library(s, sd):
    xi_v, xi_d = jax.jvp(xi, (s,), (sd,))
    F = kspr * xi_v + cspr * xi_d
    M, P1 = ms.lagrange_terms(susp_kinetic, lambda s_: 0.0 * s_[0], s, sd, -F * jax.grad(xi)(s))
    J, P2 = dc.constraint_terms(susp_f, s, sd, 0.0)
    K = jnp.block([[M, J.T], [J, jnp.zeros((2, 2))]])
    on = jnp.ones((2,), bool)
    return K, jnp.concatenate([P1, P2]), jnp.stack([sv.system(M, P1, J, P2, on).a for sv in SOLVERS[:4]])


def susp_printed(s, sd):
    """The seed's 5x5 system, transcribed symbol by symbol."""
    f1, f2, f3 = s
    d1, d2, d3 = sd
    c, sn = np.cos, np.sin
    xi_v = np.sqrt(a_s - 2 * b_s * c(f1 - beta)) - lspr
    xi_d = b_s * sn(f1 - beta) * d1 / (lspr + xi_v)
    F = kspr * xi_v + cspr * xi_d
    M12 = -mm2 * ls * p * c(f1 + f2)
    K = np.array([[I1 + mm2 * ls**2, M12, 0, ls * c(f1), -ls * sn(f1)],
                  [M12, I2T + mm2 * p**2, 0, -lb * c(f2), -lb * sn(f2)],
                  [0, 0, I3, -lc * c(f3), -lc * sn(f3)],
                  [ls * c(f1), -lb * c(f2), -lc * c(f3), 0, 0],
                  [-ls * sn(f1), -lb * sn(f2), -lc * sn(f3), 0, 0]])
    rhs = np.array([-mm2 * ls * p * d2**2 * sn(f1 + f2) - F * (b_s / (lspr + xi_v)) * sn(f1 - beta),
                    -mm2 * ls * p * d1**2 * sn(f1 + f2), 0.0,
                    ls * d1**2 * sn(f1) - lb * d2**2 * sn(f2) - lc * d3**2 * sn(f3),
                    ls * d1**2 * c(f1) + lb * d2**2 * c(f2) + lc * d3**2 * c(f3)])
    return K, rhs


def test_suspension_kkt_matches_seed_004_printed_form():
    rng = np.random.default_rng(4)
    for _ in range(5):
        s, sd = rng.uniform(-1.5, 1.5, 3), rng.uniform(-3, 3, 3)
        K, rhs, qdds = susp_library(jnp.asarray(s), jnp.asarray(sd))
        K_p, rhs_p = susp_printed(s, sd)
        np.testing.assert_allclose(K, K_p, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(rhs, rhs_p, rtol=1e-11, atol=1e-9)
        sol = np.linalg.solve(K_p, rhs_p)
        for qdd in qdds:
            np.testing.assert_allclose(qdd, sol[:3], rtol=1e-9, atol=1e-9)
