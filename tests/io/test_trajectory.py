"""Trajectories with their model (diffchain.save_trajectory / load_trajectory, diffchain/_io/trajectory.py): a
rollout's states and controls and an event rollout's states, step reports and events come back exactly (the same
pytrees, dtypes and bits), with the model."""
import json
import zipfile

import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc
from diffchain import systems

from test_format import assert_same


@pytest.fixture(scope="module")
def event_run():  # (compiling the event rollout: about 6 s)
    """A 3-link pendulum released above the floor y = -2.2 hits it within 300 quanta (its lowest point reaches
    -3 m without the floor): the log holds impacts."""
    chain = dc.pendulum(3, length=1.0)
    events = dc.Events(chain, ground=-2.2)
    state = dc.from_joint_angles(chain, jnp.asarray([-0.3, 0.2, 0.1]))
    tau = dc.Control(tau=jnp.zeros((300, 4)))
    final, (traj, log) = dc.event_rollout(chain, events, dc.EventState(state), tau, 5e-3)
    return chain, events, traj, log, tau


def test_rollout_round_trip(tmp_path):
    model, state = systems.four_bar()
    controls = dc.Control(tau=jnp.linspace(0.0, 1.0, 30)[:, None])
    final, states = dc.rollout(model, state, controls, 1e-3, integrator=dc.SemiImplicitEuler(), check=False)
    path = tmp_path / "run.npz"
    dc.save_trajectory(path, model, states, controls, dt=1e-3)
    assert path.exists()
    tr = dc.load_trajectory(path)
    assert isinstance(tr, dc.Trajectory)
    assert_same(tr.model, model)
    assert_same(tr.states, states)
    assert_same(tr.controls, controls)
    assert tr.events_log is None and tr.events is None and float(tr.dt) == 1e-3
    with np.load(path) as z:   # readable by NumPy alone: the model's JSON is its model file's text
        assert json.loads(str(z["model.json"][()]))["format"] == "diffchain.model"
        np.testing.assert_array_equal(z["states.x"], states.x)


@pytest.mark.slow
def test_event_rollout_round_trip(event_run, tmp_path):
    chain, events, traj, log, tau = event_run
    assert int(jnp.sum(log.impacts)) >= 1   # (the log is not empty)
    path = tmp_path / "events.npz"
    dc.save_trajectory(path, chain, traj, tau, log, events=events, dt=5e-3)
    tr = dc.load_trajectory(path)
    assert_same(tr.model, chain)
    assert_same(tr.events, events)
    assert_same(tr.states, traj)          # EventStates: their State, masks and cached control
    assert_same(tr.events_log, log)
    assert_same(tr.controls, tau)
    dc.save_trajectory(tmp_path / "states.npz", chain, traj.state)   # just the states, no controls
    tr = dc.load_trajectory(tmp_path / "states.npz")
    assert_same(tr.states, traj.state)
    assert tr.controls is None and tr.events_log is None and tr.dt is None


def test_batched_states(tmp_path):
    """A batch of copies (leading axes time x batch) keeps its shape; a float32 model keeps its dtype."""
    chain = dc.pendulum(2, mass=np.float32(1.0), length=np.float32(1.0))
    x = np.zeros((5, 3, 3, 2), np.float32)
    x[..., 1, 0], x[..., 2, 0] = 1.0, 2.0
    states = dc.State(x, t=np.zeros((5, 3), np.float32))
    dc.save_trajectory(tmp_path / "b.npz", chain, states)
    tr = dc.load_trajectory(tmp_path / "b.npz")
    assert_same(tr.states, states)
    assert tr.states.x.dtype == jnp.float32 and tr.states.x.shape == (5, 3, 3, 2)
    np.testing.assert_array_equal(tr.states.x, x)
    assert tr.model.dtype == jnp.float32


def test_bad_input_and_bad_files(tmp_path):
    chain = dc.pendulum(1)
    with pytest.raises(TypeError, match="save_trajectory: states must be a diffchain.State or EventState"):
        dc.save_trajectory(tmp_path / "x.npz", chain, np.zeros((3, 2, 2)))
    with pytest.raises(TypeError, match=r"save_trajectory: controls must be a diffchain Control, got"):
        dc.save_trajectory(tmp_path / "x.npz", chain, dc.State(np.zeros((3, 2, 2))), controls=lambda s: None)
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(dc.FileFormatError, match="not a .npz archive"):
        dc.load_trajectory(tmp_path / "text.npz")
    np.savez(tmp_path / "plain.npz", x=np.zeros(3))
    with pytest.raises(dc.FileFormatError, match="^header: missing: not a diffchain trajectory file"):
        dc.load_trajectory(tmp_path / "plain.npz")
    good = tmp_path / "good.npz"
    dc.save_trajectory(good, chain, dc.State(np.zeros((3, 2, 2))))
    with np.load(good) as z:
        entries = {k: z[k] for k in z.files}
    header = json.loads(str(entries["header"][()]))
    for edit, message in ((lambda h: h.update(format_version=9), r"^format_version: the file is of format version 9"),
                          (lambda h: h["states"].update(type="Control"), r"^states\.type: expected 'State' or "),
                          (lambda h: h["states"]["x"].update(array="nope"),
                           r'^states\.x: the archive has no array "nope"'),
                          (lambda h: h["states"].pop("v"), r"^states\.v: missing field \(a State has x, v, t\)")):
        h = json.loads(json.dumps(header))
        edit(h)
        with open(tmp_path / "bad.npz", "wb") as f:
            np.savez(f, **{**entries, "header": np.asarray(json.dumps(h))})
        with pytest.raises(dc.FileFormatError, match=message):
            dc.load_trajectory(tmp_path / "bad.npz")
    model = json.loads(str(entries["model.json"][()]))
    model["model"]["g"] = "down"
    with open(tmp_path / "bad.npz", "wb") as f:
        np.savez(f, **{**entries, "model.json": np.asarray(json.dumps(model))})
    with pytest.raises(dc.FileFormatError, match=r'^model\.json: model\.g: expected a finite number, got "down"'):
        dc.load_trajectory(tmp_path / "bad.npz")
    assert zipfile.is_zipfile(good)
