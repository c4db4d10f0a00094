"""The experiments (experiments/): each study runs as one command, here with ``--quick`` in a fresh process, and its
table is read back and checked against what the study shows."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "experiments"
STUDIES = ("a01_pendulum.py",)
pytestmark = pytest.mark.skipif(not EXPERIMENTS.exists(), reason="experiments/ is not in this tree")


def _table(path):
    """{(method, setting): (error, seconds)} of a study's markdown table (the rows whose last two cells are numbers)."""
    rows = re.findall(r"^\| (.+?) \| (.+?) \| (\S+) \| (\S+) \|$", path.read_text(), re.M)
    return {(m, s): (float(e), float(t)) for m, s, e, t in rows}


def test_every_study_is_run_here_and_documented():
    assert sorted(p.name for p in EXPERIMENTS.glob("*.py")) == sorted(STUDIES)
    readme = (EXPERIMENTS / "README.md").read_text()
    for study in STUDIES:
        assert study in readme and (EXPERIMENTS / "results" / study.replace(".py", ".md")).exists(), study


@pytest.mark.slow
def test_a01_pendulum_quick(tmp_path):
    """IFToMM A01 over 20 s: scipy's Radau at tolerance 1e-9 meets the exact solution to 1e-8 (the reference is
    right); diffchain's default integrator meets the benchmark's high precision (1e-3 m) at every step size, by
    1e-5 at dt = 2.5e-3, and converges faster than second order (the error falls by more than 6x per halving of dt);
    RATTLE is second order (3.5x to 4.5x)."""
    pytest.importorskip("matplotlib")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = tmp_path / "a01.png"
    run = subprocess.run([sys.executable, str(EXPERIMENTS / "a01_pendulum.py"), "--quick", "--out", str(out)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert out.exists() and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = _table(tmp_path / "a01.md")
    assert table[("scipy Radau", "tol = 1e-09")][0] < 1e-8
    default = [table[("diffchain default: RK4, projected", f"dt = {dt}")][0] for dt in ("0.01", "0.005", "0.0025")]
    assert max(default) < 1e-3 and default[-1] < 1e-5, default
    assert all(a > 6 * b for a, b in zip(default, default[1:])), default
    rattle = [table[("diffchain RATTLE", f"dt = {dt}")][0] for dt in ("0.01", "0.005", "0.0025")]
    assert all(3.5 * b < a < 4.5 * b for a, b in zip(rattle, rattle[1:])), rattle
