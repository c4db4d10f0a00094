"""The examples (examples/, listed in docs/examples.md) run as a user runs them, shortened: each script with
``--quick`` in a fresh process with this test's environment, its picture written to a temporary directory and
checked, its printed result read back and checked for what the short run can show. The fresh processes compile with
``jax_disable_most_optimizations`` as the rest of the suite does (tests/conftest.py), unless DIFFCHAIN_TEST_FULL_OPT
is set.
"""
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SCRIPTS = ("throw_to_target.py", "swingup_optax.py", "train_policy.py", "batched_rollout.py", "fourbar_stop.py",
           "ilqr.py", "sysid.py", "flexible_beam.py", "synthesis.py", "contact_gradients.py")  # each tested below


def _check_png(path):
    """A picture: a PNG file with something drawn on it."""
    import matplotlib.image

    assert path.exists(), f"{path} was not written"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and min(image.shape[:2]) > 200 and image.std() > 0.01, image.shape


def _run_quick(script, tmp_path, needs=(), args=()):
    """``python examples/<script> --quick --out <tmp>/<name>.png [args]`` from an empty directory, this tree's
    diffchain first on the path; returns its standard output after checking the exit status and the picture."""
    for module in ("matplotlib", *needs):
        pytest.importorskip(module, reason=f'the example needs {module}: pip install -e ".[examples]"')
    out = tmp_path / (pathlib.Path(script).stem + ".png")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    if not os.environ.get("DIFFCHAIN_TEST_FULL_OPT"):
        env["JAX_DISABLE_MOST_OPTIMIZATIONS"] = "1"
    run = subprocess.run([sys.executable, str(EXAMPLES / script), "--quick", "--out", str(out), *args], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    _check_png(out)
    return run.stdout


def _number(pattern, text):
    match = re.search(pattern, text)
    assert match, f"{pattern!r} not in the output:\n{text[-2000:]}"
    return float(match.group(1))


@pytest.mark.slow
def test_throw_to_target_quick(tmp_path):
    """10 gradient steps through impacts: the gradient agrees with central differences, the loss falls, the last
    throw rests nearer the target than the first."""
    out = _run_quick("throw_to_target.py", tmp_path, needs=("optax",))
    assert _number(r"largest relative difference (\S+)", out) < 1e-5
    losses = [float(v) for v in re.findall(r"^iter +\d+ +loss (\S+)", out, re.M)]
    assert len(losses) >= 2 and losses[-1] < losses[0], losses
    target = _number(r"target (\S+)\)", out)
    first = _number(r"first throw: rests at x = (\S+) m", out)
    last = _number(r"last throw: rests at x = (\S+) m", out)
    assert abs(last - target) < abs(first - target), (first, last, target)
    assert _number(r"last throw: .*\|v\| <= (\S+) m/s", out) < 1e-6  # it lies still


@pytest.mark.slow
def test_contact_gradients_quick(tmp_path):
    """The two contact cases: diffchain's gradients equal the closed forms (and forward mode equals reverse mode),
    the step-resolution impact gets the wall's dy/dv_x 0, and the landing distance jumps at theta_c."""
    out = _run_quick("contact_gradients.py", tmp_path)
    assert _number(r"largest relative difference diffchain - analytic: (\S+)", out) < 1e-9
    assert _number(r"largest difference forward - reverse mode: (\S+)", out) < 1e-12
    analytic, ours, naive = (float(v) for v in re.search(r"^wall: dy/dv_x +(\S+) +(\S+) +(\S+)$", out, re.M).groups())
    assert abs(analytic - 0.5644444) < 1e-7 and abs(ours - analytic) < 1e-7 and naive == 0.0
    assert _number(r"jumps from (\S+) m", out) - _number(r"m to (\S+) m", out) > 2.5


@pytest.mark.slow
def test_swingup_optax_quick(tmp_path):
    """30 Adam steps through an RK4 rollout: the loss falls (no swing-up yet), the rods keep their lengths."""
    out = _run_quick("swingup_optax.py", tmp_path, needs=("optax",))
    start = _number(r"loss (\S+) at the start", out)
    end = _number(r"at the start, (\S+) after", out)
    assert end < start, (start, end)
    assert _number(r"max rod-length error along the motion (\S+) m", out) < 1e-3


@pytest.mark.slow
def test_train_policy_quick(tmp_path):
    """Evolution strategies, 2 seeds x 30 iterations: on average over the seeds the trained policy beats the random
    one (a single seed may still be stuck this early; the full run requires a margin of 400 for every seed)."""
    out = _run_quick("train_policy.py", tmp_path, needs=("optax",))
    rows = [(float(a), float(b)) for a, b in re.findall(r"^seed \d+: final policy +(\S+) +random policy +(\S+)",
                                                        out, re.M)]
    assert len(rows) == 2, out
    assert all(0 < final <= 500 and 5 < rand < 100 for final, rand in rows), rows
    assert sum(final - rand for final, rand in rows) / len(rows) > 0, rows


@pytest.mark.slow
def test_fourbar_stop_quick(tmp_path):
    """A four-bar built with the MechanismBuilder through the event rollout: it hits its stop, leaves it once driven,
    then C lands; the loop stays closed, nothing passes the floor or the stop, and C rests."""
    out = _run_quick("fourbar_stop.py", tmp_path)
    times = [(float(t), what) for t, what in re.findall(r"^t = (\S+) s: (.+)$", out, re.M)]
    assert [w for _, w in times] == ["hits the stop", "leaves the stop", "C lands"], out
    assert _number(r"largest loop-closure error (\S+);", out) < 1e-8
    assert _number(r"lowest C (\S+) m from the floor", out) > -1e-9
    assert _number(r"lowest rocker angle (\S+) rad from the stop", out) > -1e-9
    assert _number(r"C at rest: \|v\| = (\S+) m/s", out) < 1e-9 and "stuck: True" in out


@pytest.mark.slow
def test_flexible_beam_quick(tmp_path):
    """The cantilever of rigid finite elements, n = 2, 4, 8: errors against Euler-Bernoulli of second order with the
    half-length end elements, first order without (orders between 0.7 and 1.2 while n is small); released from its
    first mode shape, the tip oscillates at the model's first natural frequency and the energy holds."""
    out = _run_quick("flexible_beam.py", tmp_path)
    for what in ("frequency", "deflection"):
        rfe = [float(v) for v in re.search(rf"^rfe {what}: .*; orders (.+)$", out, re.M).group(1).split()]
        equal = [float(v) for v in re.search(rf"^equal {what}: .*; orders (.+)$", out, re.M).group(1).split()]
        assert min(rfe) >= 1.8 and all(0.7 <= o <= 1.2 for o in equal), (what, rfe, equal)
    assert abs(_number(r"relative difference (\S+);", out)) < 1e-5
    assert _number(r"relative energy drift (\S+)", out) < 1e-9


@pytest.mark.slow
def test_ilqr_quick(tmp_path):
    """iLQR, at most 40 iterations per system: the linearisations agree with central differences of the step, the
    cost falls, and both the acrobot and the cart-pole end within 1e-2 of upright and at rest; DDP on the acrobot,
    from iLQR's iterate that first came within 1e-2, reaches the lowest cost of both; the arm's tip lands within
    2 mm of its target with the impact's saltation term, and iLQR without it stops at a higher cost, farther."""
    out = _run_quick("ilqr.py", tmp_path)
    for name in ("acrobot", "cartpole"):
        assert _number(rf"{name}: linearisation .* largest relative difference (\S+)", out) < 1e-6
        costs = [float(v) for v in re.findall(rf"^{name} iter +\d+ +cost +(\S+)", out, re.M)]
        assert len(costs) >= 2 and costs[-1] < 1e-2 * costs[0], (name, costs)
        assert _number(rf"{name}: final max \|theta - theta\*\| = (\S+) rad", out) <= 1e-2
        assert _number(rf"{name}: final .* max \|z_T - z\*\| = (\S+),", out) <= 1e-2
    # DDP (the steps' second-order terms, dc.step_hessians) from where iLQR came within 1e-2: the same optimum
    line = re.search(r"acrobot: from iLQR's iteration \d+, iterations to the lowest cost (\S+) .*DDP (\d+) \(its cost "
                     r"(\S+)\)", out)
    assert line, out[-2000:]
    best, ddp_cost = float(line.group(1)), float(line.group(3))
    assert abs(ddp_cost - best) <= 1e-9 * best
    assert _number(r"acrobot \(DDP\): final max \|theta - theta\*\| = (\S+) rad", out) <= 1e-2
    # the arm whose tip lands on the floor: the impact step's linearisation with the saltation term is the step's
    # derivative (central differences), without it is not; with it iLQR reaches a lower cost and lands nearer
    assert _number(r"arm: linearisation of the step with the impact .* max \|\[A B\]\| (\S+) with the", out) < 1e-8
    assert _number(r"arm: linearisation of the step with the impact .* the saltation term, (\S+) without", out) > 0.1
    miss = _number(r"(?m)^arm: final cost \S+, tip at .*, (\S+) m from the target", out)
    blind = _number(r"(?m)^arm \(no saltation\): final cost \S+, tip at .*, (\S+) m from the target", out)
    assert miss < 2e-3 and blind > 2 * miss, (miss, blind)
    assert re.findall(r"(?m)^arm.*: final cost .*steps whose solver budget ran out: (\d+)$", out) == ["0", "0"]
    best, without = (_number(r"arm: lowest cost (\S+) with the saltation", out),
                     _number(r"arm: lowest cost .*\), (\S+) without", out))
    assert without > 1.05 * best, (best, without)


@pytest.mark.slow
def test_sysid_quick(tmp_path):
    """System identification from angles with 1 % noise, 8 seeds: the Jacobian agrees with central differences; for
    each system every fit converges to the noise level (sigma_hat / sigma within 0.8..1.2) and every recovered
    parameter lies within 4 of its Gauss-Newton standard errors of the truth the example simulated, the squared
    normalised errors averaging about 1 (0.3..3: the standard errors are the errors' real size, neither too
    optimistic nor too loose); the CSV files it wrote load with the library's loader."""
    import numpy as np

    import diffchain as dc

    out = _run_quick("sysid.py", tmp_path, args=("--data", str(tmp_path)))
    for name, rows, columns in (("pendulum", 5, 2), ("fourbar", 3, 1)):
        assert _number(rf"{name}: Jacobian .* largest relative difference (\S+)", out) < 1e-6
        low, high = (float(v) for v in re.search(rf"{name}: .*sigma_hat / sigma = (\S+) \.\. (\S+)", out).groups())
        assert 0.8 < low <= high < 1.2, (name, low, high)
        number = r" +(\d+\.\d+)"
        table = [[float(v) for v in row] for row in re.findall(rf"^{name}: .*\]{number * 5}$", out, re.M)]
        assert len(table) == rows, out
        for truth, mean, _, se, _ in table:   # the mean over the seeds: within 4 standard errors of the truth
            assert abs(mean - truth) <= 4 * se, (name, table)
        assert _number(rf"{name}: largest \|error\| / standard error .* = (\S+);", out) <= 4.0
        assert 0.3 <= _number(rf"{name}: .*mean \(error / standard error\)\^2 = (\S+)", out) <= 3.0
        t, angles = dc.load_angles_csv(tmp_path / f"sysid_{name}_seed0.csv")
        assert angles.shape == (len(t), columns) and np.allclose(np.diff(t), 0.01)


@pytest.mark.slow
def test_synthesis_quick(tmp_path):
    """Four-bar synthesis, shortened: the 18-point fit ends fully rotatable with a sum of squared distances below
    0.01; every nine-point solution has a residual <= 1e-10 and its closed-form coupler point passes through all nine
    points (to 1e-9); the four-bar that made the points and its two Roberts cognates are among the solutions; the
    gradient through diffchain's inverse dynamics agrees with central differences; the torques are finite."""
    out = _run_quick("synthesis.py", tmp_path, needs=("optax",))
    assert _number(r"best sum of squared distances (\S+)", out) < 1e-2
    assert _number(r"(\d+) end fully rotatable", out) >= 1
    assert _number(r"largest residual (\S+)\)", out) <= 1e-10
    assert _number(r"(\d+) distinct modulo relabelling", out) >= 3
    assert _number(r"passes through all nine points: largest distance (\S+);", out) <= 1e-9
    assert "the known four-bar found: True; its two Roberts cognates found: True" in out
    assert _number(r"sizing: .*relative difference (\S+)", out) < 1e-6
    for what in ("before", "after"):
        assert 0 < _number(rf"sizing {what}: .*peak torque (\S+) N m", out) < 1e3


def test_batched_rollout_quick(tmp_path):
    """64 random starts and 64 random models under ``jit(vmap(rollout))``: no NaN, the rods keep their lengths, the
    energy drifts little. The cheapest example: the everyday tier runs it."""
    out = _run_quick("batched_rollout.py", tmp_path)
    rows = re.findall(r"^64 (states|models), seed +\S+ +\S+ +(\S+) +(\S+) +(\d+)$", out, re.M)
    assert [r[0] for r in rows] == ["states", "models"], out
    for _, rod_err, drift, nan in rows:
        assert float(rod_err) < 1e-3 and float(drift) < 1e-2 and int(nan) == 0, rows
    assert len(re.findall(r"^64 (?:states|models), seed +\S+ +\S+ +\S+e\+\d+", out, re.M)) == 2  # copy-steps/s


def test_every_example_is_documented_and_tested():
    """examples/ holds exactly the examples this file runs; each script has ``--quick`` and ``--out``, and
    docs/examples.md gives the command that runs each example."""
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(SCRIPTS)
    assert not list(EXAMPLES.glob("*.ipynb"))  # the notebooks are in notebooks/ (test_notebooks.py)
    for script in SCRIPTS:
        text = (EXAMPLES / script).read_text()
        assert '"--quick"' in text and '"--out"' in text, script
    page = ROOT / "docs" / "examples.md"
    if not page.exists():
        pytest.skip("docs/ is not in this tree")
    text = page.read_text()
    for name in SCRIPTS:
        assert f"examples/{name}" in text, name
    for script in SCRIPTS:
        assert f"python examples/{script}" in text, script
