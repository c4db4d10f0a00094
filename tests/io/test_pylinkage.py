"""dc.from_pylinkage: pylinkage's own mechanism files (written by pylinkage, the test extra) imported as mechanisms
whose kinematics are pylinkage's: with the crank driven as pylinkage turns it, diffchain's assembly at every step puts
every joint where pylinkage's own simulation does; the bars' masses are uniform bars' (the potential energy in closed
form); entries diffchain cannot read are named by their JSON path."""
import copy
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc

pylinkage = pytest.importorskip("pylinkage", reason="pylinkage is a test extra (Python >= 3.11)")
from pylinkage.mechanism import fourbar, mechanism_from_dict, mechanism_to_dict, mechanism_to_json, slider_crank  # noqa: E402,I001

G = 9.81


def _fourbar():
    return fourbar(crank=1.0, coupler=3.0, rocker=3.0, ground=4.0)


def _with_tracker(doc):
    """A coupler point, 1.5 m from the crank's tip at 0.6 rad from the coupler (pylinkage's tracker joint)."""
    doc = copy.deepcopy(doc)
    coupler = next(link for link in doc["links"] if link["id"] == "coupler")
    doc["joints"].append({"id": "P", "type": "tracker", "position": [0.0, 0.0], "ref_joint1_id": coupler["joints"][0],
                          "ref_joint2_id": coupler["joints"][1], "distance": 1.5, "angle": 0.6})
    return doc


def _pylinkage_run(doc):
    """pylinkage's simulation of ``doc``: the joints' positions after each of its steps, (steps, joints, 2)."""
    return np.asarray(list(mechanism_from_dict(copy.deepcopy(doc)).step()))


def _diffchain_run(doc, steps, **kw):
    """The imported mechanism's joints (in ``doc``'s order) assembled at t = 1 .. steps (one pylinkage step per
    second), each step from the last."""
    mech, state = dc.from_pylinkage(doc, crank="driven", **kw)
    idx = [mech.point_names.index(j["id"]) for j in doc["joints"]]
    solve = jax.jit(lambda s: dc.assemble(mech, s)[0])
    out = []
    for k in range(steps):
        state = solve(dc.State(state.x, state.v, jnp.asarray(k + 1.0)))
        out.append(np.asarray(mech.points(state.x.reshape(-1)))[idx])
    return np.stack(out)


@pytest.mark.parametrize("name", ["four-bar", "four-bar with a coupler point", "slider-crank"])
def test_the_kinematics_are_pylinkages(name):
    doc = {"four-bar": lambda: mechanism_to_dict(_fourbar()),
           "four-bar with a coupler point": lambda: _with_tracker(mechanism_to_dict(_fourbar())),
           "slider-crank": lambda: mechanism_to_dict(slider_crank(crank=1.0, rod=3.0))}[name]()
    want = _pylinkage_run(doc)
    assert want.shape[0] > 90 and np.ptp(want[:, :, 0]) > 1.0  # a whole turn of the crank, the joints moving
    got = _diffchain_run(doc, want.shape[0])
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_a_file_written_by_pylinkage_is_a_mechanism_of_uniform_bars_with_a_motor(tmp_path):
    path = tmp_path / "fourbar.json"
    mechanism_to_json(_fourbar(), path)
    mech, state = dc.from_pylinkage(path, mass_per_length=2.0)
    # crank (0, 0)-(1, 0), coupler (1, 0)-(2.5, 1.5 sqrt 3), rocker to (4, 0): the bars' centres, masses 2, 6, 6
    y_top = 1.5 * np.sqrt(3.0)
    np.testing.assert_allclose(dc.energy(mech, state), G * (6.0 * y_top / 2 + 6.0 * y_top / 2), rtol=1e-13)
    assert mech.bodies.mass.tolist() == [2.0, 6.0, 6.0]
    np.testing.assert_allclose(mech.bodies.inertia, [2.0 / 12, 6.0 * 9 / 12, 6.0 * 9 / 12], rtol=1e-13)
    assert mech.motor_idx.shape == (1, 4)  # the crank's motor: a torque drives it, and its work is the energy gained
    tau = 200.0
    final, _ = dc.rollout(mech, state, dc.Control(tau=jnp.full((300, 1), tau)), 1e-3)
    tip = mech.point_names.index("coupler.0_crank.tip")
    x = np.asarray(mech.points(final.x.reshape(-1)))[tip]
    turned = np.arctan2(x[1], x[0])  # from 0: the crank starts along +x about (0, 0)
    assert turned > 1.0
    np.testing.assert_allclose(dc.energy(mech, final) - dc.energy(mech, state), tau * turned, rtol=1e-9)


def test_a_link_of_three_joints_is_rigid():
    doc = mechanism_to_dict(_fourbar())
    coupler = next(link for link in doc["links"] if link["id"] == "coupler")
    doc["joints"].append({"id": "E", "type": "revolute", "position": [1.0, 2.0]})
    coupler["joints"].append("E")
    mech, state = dc.from_pylinkage(doc, crank="driven")
    tri = [mech.point_names.index(n) for n in coupler["joints"]]

    def sides(s):
        p = np.asarray(mech.points(s.x.reshape(-1)))[tri]
        return [np.linalg.norm(p[a] - p[b]) for a, b in ((0, 1), (0, 2), (1, 2))]

    moved = dc.assemble(mech, dc.State(state.x, state.v, jnp.asarray(40.0)))[0]
    np.testing.assert_allclose(sides(moved), sides(state), rtol=1e-12)
    p, q = (np.asarray(mech.points(s.x.reshape(-1)))[tri] for s in (state, moved))
    cross = lambda p: np.linalg.det(np.stack([p[1] - p[0], p[2] - p[0]]))  # noqa: E731  (not its mirror image)
    np.testing.assert_allclose(cross(q), cross(p), rtol=1e-12)
    # one body of the mass of three uniform bars (2 kg/m): B-C 3 m, B-E 2 m, C-E
    ce = np.hypot(2.5 - 1.0, 1.5 * np.sqrt(3.0) - 2.0)
    assert len(mech.bodies.mass) == 3 and np.isclose(mech.bodies.mass[1], 3.0 + 2.0 + ce)


@pytest.mark.parametrize("edit, path, message", [
    (lambda d: d["links"][2]["joints"].__setitem__(1, "nowhere"), r"links\[2\]\.joints\[1\]", 'unknown joint "nowhere"'),
    (lambda d: d["joints"][1].__setitem__("position", [1.0, "a"]), r"joints\[1\]\.position\[1\]", "a finite number"),
    (lambda d: d["joints"][0].__setitem__("type", "cam"), r"joints\[0\]\.type", "expected one of"),
    (lambda d: d["links"][1].__setitem__("type", "arc_driver"), r"links\[1\]\.type", "oscillating crank"),
    (lambda d: d["joints"].append({"id": "T", "type": "tracker", "ref_joint1_id": "crank.motor_ground.A",
                                   "ref_joint2_id": "ground.D_rocker.1"}), r"joints\[4\]", "are not on one link"),
    (lambda d: d["joints"].append(dict(d["joints"][0])), r"joints\[4\]\.id", "a second joint"),
])
def test_bad_entries_are_named_by_their_json_path(edit, path, message):
    doc = mechanism_to_dict(_fourbar())
    edit(doc)
    with pytest.raises(dc.FileFormatError, match=f"^{path}: .*{message}"):
        dc.from_pylinkage(doc)


def test_bad_arguments_and_files_are_refused(tmp_path):
    doc = mechanism_to_dict(_fourbar())
    with pytest.raises(ValueError, match="crank must be 'motor' or 'driven', got 'fast'"):
        dc.from_pylinkage(doc, crank="fast")
    with pytest.raises(ValueError, match="mass_per_length must be a finite number > 0, got 0"):
        dc.from_pylinkage(doc, mass_per_length=0)
    (tmp_path / "x.json").write_text(json.dumps({"joints": 3}))
    with pytest.raises(dc.FileFormatError, match="not a pylinkage mechanism"):
        dc.from_pylinkage(tmp_path / "x.json")
    (tmp_path / "y.json").write_text("{")
    with pytest.raises(dc.FileFormatError, match="not JSON"):
        dc.from_pylinkage(tmp_path / "y.json")
