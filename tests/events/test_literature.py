"""Two gradient problems through contact from the literature, against their closed forms (docs/guide/gradients.md,
"Gradients through contact: two cases from the literature"; examples/contact_gradients.py draws them).

A point mass (``dc.Chain([1.0], [])``, gravity g) is thrown from x0 with velocity v; its impacts are perfectly
inelastic (it sticks where it hits a line, and is released when the line would have to pull it).

1. Time of impact (the ball-against-a-wall problem of DiffTaichi, Hu et al., ICLR 2020): thrown from (0, y0)
   against the wall x = d, it sticks at the height

       t* = d / v_x,   y = y0 + v_y t* - g t*^2 / 2,   dy/dv_x = -(v_y - g t*) t* / v_x,   dy/dv_y = t*.

   A simulation that resolves the impact at the step where it detects it (the point put back onto the wall, no
   event time) gets dy/dv_x = 0: the time of impact t* moves with v_x, and that is the whole of dy/dv_x.
2. A discontinuous objective (cf. Suh et al., "Do differentiable simulators give better policy gradients?",
   ICML 2022): thrown at speed v0 and angle theta from (0, y0) under a ceiling y = h above the ground y = 0. Below
   theta_c, sin(theta_c) = sqrt(2 g (h - y0)) / v0, it lands at x = v_x t_land, t_land = (v_y + sqrt(v_y^2 + 2 g
   y0)) / g; above, it hits the ceiling at t_1 = (v_y - sqrt(v_y^2 - 2 g (h - y0))) / g, sticks, drops and lands
   at x = v_x t_1. The landing distance jumps at theta_c; on each side its gradient is smooth.

Before its event the point follows the parabola exactly (velocity Verlet is exact under constant gravity) and the
event time is the root of that parabola's quadratic, so diffchain's values and derivatives equal the closed forms to
round-off: the tolerance is 1e-9 relative. Every case runs in one vmapped program that returns the value, the
forward-mode Jacobian (``jax.linearize``) and the reverse-mode one (its transpose, as ``jax.vjp`` computes it): one
compilation for the file.
"""
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc

G, DT, T = 9.81, 0.01, 160          # 1.6 s: every throw below has landed or stuck by then
Y0, D, V0, H = 1.0, 2.0, 6.0, 2.0   # launch height, wall, speed and ceiling of the two cases
THETA_C = float(np.arcsin(np.sqrt(2 * G * (H - Y0)) / V0))
WALL = np.array([D, 0.0, -1.0, 0.0])       # a line: a point of it, its unit normal (towards the free side)
CEILING = np.array([0.0, H, 0.0, -1.0])
GROUND = np.array([0.0, 0.0, 0.0, 1.0])


def _polar(theta):
    return np.array([V0 * np.cos(theta), V0 * np.sin(theta)])


# (line besides the ground, launch point, launch velocity): two wall throws; four throws under the ceiling, below and
# above theta_c, far from it and 0.01 rad from it
CASES = [(WALL, (0.0, Y0), (3.0, 4.0)), (WALL, (0.0, 0.5), (2.0, 5.0))] + [
    (CEILING, (0.0, Y0), _polar(th)) for th in (0.75, THETA_C - 0.01, THETA_C + 0.01, 0.9)]
LINES, X0, V = (np.array([c[i] for c in CASES], float) for i in range(3))


def exact(line, x0, v):
    """The closed forms: the point where the throw ends, (2,), and its Jacobian in v, (2, 2)."""
    (vx, vy), y0 = v, x0[1]
    if line[2] == -1.0:  # the wall x = line[0]: sticks at time t*
        t = (line[0] - x0[0]) / vx
        return np.array([line[0], y0 + vy * t - G * t**2 / 2]), np.array([[0, 0], [-(vy - G * t) * t / vx, t]])
    disc = vy**2 - 2 * G * (line[1] - y0)
    if disc > 0:  # hits the ceiling at t_1, drops
        t, dt_dvy = (vy - np.sqrt(disc)) / G, (1 - vy / np.sqrt(disc)) / G
    else:  # lands at t_land
        root = np.sqrt(vy**2 + 2 * G * y0)
        t, dt_dvy = (vy + root) / G, (1 + vy / root) / G
    return np.array([x0[0] + vx * t, 0.0]), np.array([[t, vx * dt_dvy], [0, 0]])


def naive(line, x0, v, dt, n_steps):
    """The same throw stepped at a fixed dt with the impact resolved at the step that detects it: the point is put
    back onto the line it crossed and stopped; no event time. A stuck point is released where gravity pulls it off
    its line. The same exact parabola between steps."""
    z0 = jnp.stack([jnp.asarray(line[:2]), jnp.array([0.0, 0.0])])
    z = jnp.stack([jnp.asarray(line[2:]), jnp.array([0.0, 1.0])])
    a = jnp.array([0.0, -G])

    def step(carry, _):
        x, v, stuck = carry  # stuck: the index of the line the point sticks to, -1 none
        stuck = jnp.where((stuck >= 0) & (z[stuck] @ a > 0), -1, stuck)
        x1, v1 = x + v * dt + a * dt**2 / 2, v + a * dt
        gaps = jnp.sum((x1 - z0) * z, -1)
        hit = jnp.argmin(gaps)
        new = (stuck < 0) & (gaps[hit] < 0)
        x1 = jnp.where(new, x1 - gaps[hit] * z[hit], x1)
        return (jnp.where(stuck >= 0, x, x1), jnp.where((stuck >= 0) | new, 0.0, v1),
                jnp.where(new, hit, stuck)), None

    return jax.lax.scan(step, (jnp.asarray(x0), jnp.asarray(v), -1), None, length=n_steps)[0][0]


@pytest.fixture(scope="module")
def diffchain_jacobians():
    """diffchain's end points and their Jacobians in v, forward and reverse mode, for every case in one program."""
    point = dc.Chain(jnp.array([1.0]), jnp.zeros((0,)), g=G)
    template = dc.Events(1, ground=0.0, lines=(WALL[None, :2], WALL[None, 2:]))  # lines: the ground, then this one

    def throw(line, x0, v):
        events = eqx.tree_at(lambda e: (e.z0, e.z), template,
                             (template.z0.at[1].set(line[:2]), template.z.at[1].set(line[2:])))
        start = dc.EventState(dc.State(x=x0[None], v=v[None]))
        final, (_, rep) = dc.event_rollout(point, events, start, None, DT, n_steps=T)
        return final.state.x[0], rep.impacts.sum()

    def jacobians(line, x0, v):
        end, lin, impacts = jax.linearize(lambda u: throw(line, x0, u), v, has_aux=True)
        transpose = jax.linear_transpose(lin, v)
        return (end, impacts, jax.vmap(lin, out_axes=1)(jnp.eye(2)),
                jax.vmap(lambda w: transpose(w)[0])(jnp.eye(2)))

    return [np.asarray(r) for r in jax.jit(jax.vmap(jacobians))(LINES, X0, V)]


@pytest.mark.slow
def test_diffchain_gradients_equal_the_closed_forms(diffchain_jacobians):
    """Every case: the end point, the forward- and the reverse-mode Jacobian equal the closed forms to 1e-9, and
    the event happened (one impact on the wall; on the ceiling, then on the ground, above theta_c)."""
    end, impacts, forward, reverse = diffchain_jacobians
    for k, (line, x0, v) in enumerate(zip(LINES, X0, V)):
        want, jac = exact(line, x0, v)
        np.testing.assert_allclose(end[k], want, rtol=1e-9, atol=1e-12, err_msg=f"case {k}")
        for got in (forward[k], reverse[k]):
            np.testing.assert_allclose(got, jac, rtol=1e-9, atol=1e-12, err_msg=f"case {k}")
    assert impacts.tolist() == [1, 1, 1, 1, 2, 2]
    # the ball-against-the-wall numbers of the guide
    np.testing.assert_allclose(forward[0][1], [0.5644444444444444, 0.6666666666666666], rtol=1e-12)


@pytest.mark.slow
def test_the_landing_distance_jumps_where_each_side_is_smooth(diffchain_jacobians):
    """Case 2 at theta_c -+ 0.01 rad: the landing distance drops by 2.85 m (the closed forms' jump at theta_c: the
    landing distance x_land(theta_c) = 4.41 m to the apex's v0^2 sin cos / g = 1.83 m), while the gradients on either
    side, extrapolated across the 0.02 rad, predict a change of under 0.2 m: no gradient sees the jump."""
    end, _, forward, _ = diffchain_jacobians
    below, above = 3, 4
    limits = [exact(CEILING, X0[below], _polar(THETA_C + s))[0][0] for s in (-1e-12, 1e-12)]
    apex = V0**2 * np.sin(THETA_C) * np.cos(THETA_C) / G  # where the grazing throw touches the ceiling
    np.testing.assert_allclose(limits, [4.4118, apex], rtol=1e-5)
    assert end[below][0] - end[above][0] > 2.5
    slopes = [forward[k][0] @ (V0 * np.array([-np.sin(th), np.cos(th)]))
              for k, th in ((below, THETA_C - 0.01), (above, THETA_C + 0.01))]
    assert sum(abs(s) * 0.01 for s in slopes) < 0.2, slopes


def test_naive_time_stepping_gets_the_gradients_wrong():
    """The impact resolved at step resolution: its end points approach the closed forms as dt -> 0, its gradients
    do not. The derivative that goes through the event time is 0 at every dt (exact: 0.56 to 2.4 in size): dy/dv_x
    on the wall, dx/dv_y under the ceiling on both sides of theta_c; the other one is the detecting step's time,
    within dt of the event time."""
    for dt in (1e-2, 1e-3):
        n = int(round(1.6 / dt))
        jac = jax.jit(jax.jacfwd(lambda v, line, x0: naive(line, x0, v, dt, n)))
        for k in (0, 1, 2, 5):
            want, exact_jac = exact(LINES[k], X0[k], V[k])
            end, got = np.asarray(naive(LINES[k], X0[k], V[k], dt, n)), np.asarray(jac(V[k], LINES[k], X0[k]))
            assert np.max(np.abs(end - want)) < 2 * dt * np.max(np.abs(V[k])), (k, dt, end, want)
            row, via_time, via_step = (1, 0, 1) if k < 2 else (0, 1, 0)  # wall: y in (v_x, v_y); ceiling: x
            assert got[row, via_time] == 0.0 and abs(exact_jac[row, via_time]) > 0.5, (k, dt, got, exact_jac)
            assert abs(got[row, via_step] - exact_jac[row, via_step]) <= dt * max(1.0, abs(V[k][0])), (k, dt)
