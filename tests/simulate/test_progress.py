"""Progress meters: a long rollout shows its steps advancing from inside the compiled loop, a bounded number of times;
without a meter the program holds no callback; the motion is the same with and without one."""
import io
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc

PENDULUM = dc.pendulum(1)
START = dc.from_joint_angles(PENDULUM, jnp.array([0.5]))


def _shown(text):
    """The step counts a TextProgressMeter printed, and their total."""
    rows = re.findall(r"rollout: \d+% \((\d+)/(\d+) steps\)", text)
    assert rows, text
    return [int(d) for d, _ in rows], {int(t) for _, t in rows}


def _run(n_steps, progress=None, **kw):
    return dc.rollout(PENDULUM, START, None, 1e-3, n_steps=n_steps, integrator=dc.SemiImplicitEuler(), check=False,
                      progress=progress, **kw)


@pytest.mark.slow
def test_a_million_step_rollout_shows_its_progress():
    buf = io.StringIO()
    final, _ = _run(10**6, dc.TextProgressMeter(file=buf))
    done, total = _shown(buf.getvalue())
    assert done == [k * 10**5 for k in range(11)] and total == {10**6}  # 0 %, 10 %, ..., 100 %: updates=10
    assert np.all(np.isfinite(final.x))  # (the motion with and without a meter: the next test)


def test_without_a_meter_the_program_has_no_callback_and_the_motion_is_the_same():
    def program(progress):
        return str(jax.make_jaxpr(lambda s: _run(300, progress)[0].x)(START))

    assert "callback" not in program(None)
    assert "callback" in program(dc.TextProgressMeter(file=io.StringIO()))
    buf = io.StringIO()
    np.testing.assert_array_equal(_run(300, dc.TextProgressMeter(updates=4, file=buf))[0].x, _run(300)[0].x)
    assert _shown(buf.getvalue()) == ([0, 75, 150, 225, 300], {300})


def test_a_batch_advances_one_meter():
    buf = io.StringIO()
    meter = dc.TextProgressMeter(updates=2, file=buf)
    x = jax.vmap(lambda a: dc.rollout(PENDULUM, dc.from_joint_angles(PENDULUM, a), None, 1e-3, n_steps=100,
                                      progress=meter)[0].x)(jnp.linspace(0.1, 1.0, 8)[:, None])
    assert x.shape == (8, 2, 2)
    assert _shown(buf.getvalue()) == ([0, 50, 100], {100})


def test_a_gradient_shows_the_forward_pass_once_also_through_checkpointed_segments():
    def loss(length, progress=None):
        model = dc.pendulum(1, length=length)
        start = dc.from_joint_angles(model, jnp.array([0.5]))
        return dc.rollout(model, start, None, 1e-3, n_steps=400, checkpoint=50, integrator=dc.SemiImplicitEuler(),
                          progress=progress)[0].x[-1, 0]

    buf = io.StringIO()
    g = jax.grad(loss)(1.0, dc.TextProgressMeter(updates=4, file=buf))
    assert _shown(buf.getvalue()) == ([0, 100, 200, 300, 400], {400})  # (segments of 50: every 2nd of 8)
    assert g == jax.grad(loss)(1.0) and abs(g) > 1e-3


def test_an_event_rollout_shows_its_quanta():
    chain = dc.free_chain(2, mass=1.0, length=0.4)
    events = dc.Events(chain.n, ground=0.0)
    es = dc.EventState(dc.from_joint_angles(chain, jnp.array([0.6, 0.8]), base=(0.0, 0.1)))
    buf = io.StringIO()
    meter = dc.TextProgressMeter(updates=5, file=buf)
    final, (_, rep) = dc.event_rollout(chain, events, es, None, 1e-3, n_steps=200, progress=meter)
    assert int(rep.impacts.sum()) >= 1
    rows = re.findall(r"event_rollout: \d+% \((\d+)/200 steps\)", buf.getvalue())
    assert [int(d) for d in rows] == [0, 40, 80, 120, 160, 200]
    # (another program: to round-off, e.g. 2e-24 in the height of the point resting on the ground, 6e-22)
    np.testing.assert_allclose(final.state.x, dc.event_rollout(chain, events, es, None, 1e-3, n_steps=200)[0].state.x,
                               rtol=1e-13, atol=1e-15)


def test_a_tqdm_bar_reaches_the_total():
    pytest.importorskip("tqdm")
    buf = io.StringIO()
    _run(500, dc.TqdmProgressMeter(updates=5, file=buf))
    assert "500/500" in buf.getvalue()


def test_bad_meters_are_refused_by_name():
    with pytest.raises(TypeError, match="progress must be None or a progress meter"):
        _run(10, "yes")
    with pytest.raises(ValueError, match="progress.updates must be an int >= 1, got 0"):
        _run(10, dc.TextProgressMeter(updates=0))
    with pytest.raises(TypeError, match="progress is shown by the default program"):
        _run(10, dc.TextProgressMeter(), backend=dc.PointMajor())
