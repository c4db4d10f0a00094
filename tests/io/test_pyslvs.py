"""dc.from_pyslvs: Pyslvs' expressions (its own examples, written as Pyslvs writes them) imported as mechanisms whose
kinematics are the linkages' closed forms: with the crank driven, diffchain's assembly puts every joint where circle
and line intersections put it (numpy, independent of the import); a slider's links translate without turning; the
bars' masses are uniform bars'; malformed or unsupported joints are named by their index."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc

# Pyslvs' examples "Crank rocker", "Crank slider (RP joint)", "Crank slider (P joint)" and "Jansen's linkage (Single)"
CRANK_ROCKER = ("M[J[R, color[Green], P[0.0, 0.0], L[ground, L1]], J[R, color[Green], P[12.92, 32.53], L[L1, L2]],"
                " J[R, color[Green], P[73.28, 67.97], L[L2, L3]], J[R, color[Green], P[33.3, 66.95], L[L2]],"
                " J[R, color[Green], P[90.0, 0.0], L[ground, L3]],]")
RP_SLIDER = ("M[\n  J[R, color[Green], P[-67.38, 36.13], L[ground, L1]],\n"
             "  J[R, color[Green], P[-68.925, 55.925], L[L1, L2]],  # the crank's tip\n"
             "  J[RP, A[0.0], color[Green], P[11.88, 0.0], L[ground, L2, L3]],\n"
             "  J[R, color[Green], P[50.775, 24.7908], L[L3, L4]],\n"
             "  J[R, color[Green], P[74.375, 7.625], L[ground, L4]],\n"
             "  J[R, color[(255, 0, 0)], P[95.1972, 52.8805], L[L3]],\n]")
P_SLIDER = ("M[J[R, color[Green], P[-33.625, -19.625], L[ground, L1]], J[R, color[Green], P[-48.375, 12.125], L[L1, L3]],"
            " J[R, color[Green], P[17.125, 33.875], L[L2, L3]],"
            " J[P, A[30.0], color[Green], P[51.38, -12.63], L[ground, L2]],"
            " J[R, color[Green], P[50.35, 53.117], L[L2, L5]], J[R, color[Green], P[143.455, 65.967], L[L4, L5]],"
            " J[R, color[Green], P[99.244, 20.447], L[ground, L4]],]")
JANSEN = ("M[J[R, color[Green], P[0.0, 0.0], L[ground, L1]], J[R, color[Green], P[9.61, 11.52], L[L1, L2, L4]],"
          " J[R, color[Blue], P[-38.0, -7.8], L[ground, L3, L5]], J[R, color[Green], P[-35.24, 33.61], L[L2, L3]],"
          " J[R, color[Green], P[-77.75, -2.54], L[L3, L6]], J[R, color[Green], P[-20.1, -42.79], L[L4, L5, L7]],"
          " J[R, color[Green], P[-56.05, -35.42], L[L6, L7]], J[R, color[Green], P[-22.22, -91.74], L[L7]],]")
TIMES = np.arange(1, 64) * 0.1  # the crank turns at 1 rad/s: a whole turn


def drawn(expression):
    """The joints' drawn positions, from the expression's P[x, y]."""
    return np.asarray([[float(v) for v in p.split(",")] for p in re.findall(r"P\[([^\]]*)\]", expression)])


def circles(c0, r0, c1, r1, near):
    """The intersection of the circles (c0, r0) and (c1, r1) nearest to ``near``."""
    d = np.linalg.norm(c1 - c0)
    a = (r0**2 - r1**2 + d**2) / (2 * d)
    h = np.sqrt(r0**2 - a**2)
    mid, n = c0 + a * (c1 - c0) / d, np.array([-(c1 - c0)[1], (c1 - c0)[0]]) / d
    return min((mid + h * n, mid - h * n), key=lambda p: np.linalg.norm(p - near))


def rigid(a0, b0, c0, a, b):
    """Where c0 goes when the segment a0 b0 moves rigidly to a b."""
    u0, u = (b0 - a0) / np.linalg.norm(b0 - a0), (b - a) / np.linalg.norm(b - a)
    local = np.array([u0 @ (c0 - a0), u0[0] * (c0 - a0)[1] - u0[1] * (c0 - a0)[0]])
    return a + local[0] * u + local[1] * np.array([-u[1], u[0]])


def crank_rocker_closed_form(P, t):
    ln = lambda i, j: np.linalg.norm(P[i] - P[j])  # noqa: E731
    th = np.arctan2(*(P[1] - P[0])[::-1]) + t
    J1 = P[0] + ln(0, 1) * np.array([np.cos(th), np.sin(th)])
    J2 = circles(J1, ln(1, 2), P[4], ln(2, 4), P[2])
    return J1, J2, rigid(P[1], P[2], P[3], J1, J2)


def rp_slider_closed_form(P, t):
    ln = lambda i, j: np.linalg.norm(P[i] - P[j])  # noqa: E731
    th = np.arctan2(*(P[1] - P[0])[::-1]) + t
    J1 = P[0] + ln(0, 1) * np.array([np.cos(th), np.sin(th)])
    dx = np.sqrt(ln(1, 2) ** 2 - J1[1] ** 2)  # J2 on the line y = 0
    J2 = min((np.array([J1[0] + dx, 0.0]), np.array([J1[0] - dx, 0.0])), key=lambda p: abs(p[0] - P[2][0]))
    J3 = circles(J2, ln(2, 3), P[4], ln(3, 4), P[3])
    return J1, J2, J3, rigid(P[2], P[3], P[5], J2, J3)


def assembled(mech, state, times):
    solve = jax.jit(lambda s: dc.assemble(mech, s)[0])
    out = []
    for t in times:  # each from the last: the branch of the drawing
        state = solve(dc.State(state.x, state.v, jnp.asarray(t)))
        out.append(np.asarray(mech.points(state.x.reshape(-1))))
    return out


@pytest.mark.parametrize("name", ["crank rocker", "RP slider"])
def test_the_kinematics_are_the_closed_forms(name):
    expression, closed, moving = {"crank rocker": (CRANK_ROCKER, crank_rocker_closed_form, (1, 2, 3)),
                                  "RP slider": (RP_SLIDER, rp_slider_closed_form, (1, 2, 3, 5))}[name]
    mech, state = dc.from_pyslvs(expression, [(0, 1)], crank="driven")
    P = drawn(expression)
    idx = [mech.point_names.index(f"J{k}") for k in moving]
    for t, got in zip(TIMES, assembled(mech, state, TIMES)):
        np.testing.assert_allclose(got[idx], np.stack(closed(P, t)), atol=1e-9 * np.abs(P).max())


def test_a_p_joints_links_translate_along_its_slot_without_turning():
    mech, state = dc.from_pyslvs(P_SLIDER, [(0, 1)], crank="driven")
    P = drawn(P_SLIDER)
    ids = {k: mech.point_names.index(f"J{k}") for k in range(7)}
    slot = np.array([np.cos(np.radians(30.0)), np.sin(np.radians(30.0))])
    for got in assembled(mech, state, TIMES):
        along = got[ids[3]] - P[3]
        assert abs(along[0] * slot[1] - along[1] * slot[0]) < 1e-7  # J3 on its slot
        for a, b in ((3, 2), (3, 4), (2, 4)):  # L2 (J2, J3, J4) translates: its sides keep their directions
            np.testing.assert_allclose(got[ids[b]] - got[ids[a]], P[b] - P[a], atol=1e-8)


def test_jansens_linkage_turns_a_whole_turn_on_one_degree_of_freedom():
    mech, state = dc.from_pyslvs(JANSEN, [(0, 1)], crank="driven")
    solve = jax.jit(lambda s: dc.assemble(mech, s))
    for t in TIMES:
        state, info = solve(dc.State(state.x, state.v, jnp.asarray(t)))
        assert int(info.status) == 0 and float(info.residual) < 1e-12 and int(info.mobility) == 0
    free, start = dc.from_pyslvs(JANSEN, [(0, 1)])  # with a motor instead: one degree of freedom, one motor
    assert free.motor_idx.shape == (1, 4) and int(dc.assemble(free, start)[1].mobility) == 1


def test_the_bars_are_uniform_bars():
    mech, state = dc.from_pyslvs(CRANK_ROCKER, [(0, 1)], mass_per_length=0.5)
    P = drawn(CRANK_ROCKER)
    bars = [(0, 1), (1, 2), (1, 3), (2, 3), (2, 4)]  # L1; L2 (J1, J2, J3) as three bars; L3
    length = [np.linalg.norm(P[i] - P[j]) for i, j in bars]
    np.testing.assert_allclose(mech.bodies.mass, 0.5 * np.asarray([length[0], sum(length[1:4]), length[4]]),
                               rtol=1e-13)
    potential = 9.81 * sum(0.5 * L * (P[i][1] + P[j][1]) / 2 for (i, j), L in zip(bars, length))
    np.testing.assert_allclose(dc.energy(mech, state), potential, rtol=1e-13)


@pytest.mark.parametrize("expression, inputs, error, message", [
    ("J[R, P[0, 0], L[ground, L1]]", (), dc.FileFormatError, "not a Pyslvs expression"),
    ("M[J[R, P[0, 0], L[ground, L1]], J[Q, P[1, 0], L[L1]]]", (), dc.FileFormatError, r"^M\[1\]: expected J\[type"),
    ("M[J[R, P[0, 0], L[ground, L1]], J[RP, P[1, 0], L[ground, L1]]]", (), dc.FileFormatError,
     r"^M\[1\]: a joint of type RP needs its slot angle"),
    ("M[J[R, P[0, 0], L[ground, L1]], J[R, P[1, 0], L[L1, L2]], J[RP, A[0], P[2, 0], L[L2, L3]], J[R, P[3, 1], L[L3]]]",
     (), dc.FileFormatError, r"^M\[2\]: a RP joint in a slot of a moving link \(L2\) is not imported"),
    ("M[J[R, P[0, 0], L[ground, L1]], J[R, P[1, 0], L[L1, L2]]]", (), dc.FileFormatError,
     r"^M\[1\]: link 'L2' has this joint only"),
    (CRANK_ROCKER, [(1, 2)], ValueError, r"inputs\[0\] = \(1, 2\): the base joint must be a pin on the ground"),
    (CRANK_ROCKER, [(0, 9)], ValueError, r"inputs\[0\] must be a pair \(base joint, driven joint\) of indices below 5"),
])
def test_bad_expressions_and_inputs_are_refused_by_joint(expression, inputs, error, message):
    with pytest.raises(error, match=message):
        dc.from_pyslvs(expression, inputs)
