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
STUDIES = ("a01_pendulum.py", "a02_four_bars.py", "seed_objects.py")
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


def _run_quick(study, tmp_path):
    """Run ``study`` with ``--quick`` in a fresh process, its picture in tmp_path; returns the table's path."""
    pytest.importorskip("matplotlib")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = tmp_path / study.replace(".py", ".png")
    run = subprocess.run([sys.executable, str(EXPERIMENTS / study), "--quick", "--out", str(out)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert out.exists() and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    return out.with_suffix(".md")


@pytest.mark.slow
def test_a01_pendulum_quick(tmp_path):
    """IFToMM A01 over 20 s: scipy's Radau at tolerance 1e-9 meets the exact solution to 1e-8 (the reference is
    right); diffchain's default integrator meets the benchmark's high precision (1e-3 m) at every step size, by
    1e-5 at dt = 2.5e-3, and converges faster than second order (the error falls by more than 6x per halving of dt);
    RATTLE is second order (3.5x to 4.5x)."""
    table = _table(_run_quick("a01_pendulum.py", tmp_path))
    assert table[("scipy Radau", "tol = 1e-09")][0] < 1e-8
    default = [table[("diffchain default: RK4, projected", f"dt = {dt}")][0] for dt in ("0.01", "0.005", "0.0025")]
    assert max(default) < 1e-3 and default[-1] < 1e-5, default
    assert all(a > 6 * b for a, b in zip(default, default[1:])), default
    rattle = [table[("diffchain RATTLE", f"dt = {dt}")][0] for dt in ("0.01", "0.005", "0.0025")]
    assert all(3.5 * b < a < 4.5 * b for a, b in zip(rattle, rattle[1:])), rattle


@pytest.mark.slow
def test_a02_four_bars_quick(tmp_path):
    """IFToMM A02 with N = 4 four-bars over 5 s: the reference (one coordinate, DOP853) conserves its energy to 1e-10
    and passes 5 singular configurations; every solver meets the benchmark's high precision (1e-3) at every step,
    the other three give KKT's positions to 1e-10 at dt = 2.5e-3, the loop stays closed to 1e-12 and the energy to 1e-6, and
    the default converges at fourth order (the error falls by more than 12x per halving of dt)."""
    path = _run_quick("a02_four_bars.py", tmp_path)
    text = path.read_text()
    passages, drift = re.search(r"passes (\d+) singular configurations; its energy drifts by (\S+) of k", text).groups()
    assert int(passages) == 5 and float(drift) < 1e-10
    rows = {(m, s): tuple(map(float, rest)) for m, s, *rest in
            re.findall(r"^\| (diffchain .+?) \| (dt = \S+) \| (\S+) \| (\S+) \| (\S+) \| (\S+) \| (\S+) \|$", text, re.M)}
    assert len(rows) == 6, rows
    assert all(e < 1e-3 and closure < 1e-12 and energy < 1e-6 for e, _, energy, closure, _ in rows.values()), rows
    default = [rows[("diffchain KKT (default)", f"dt = {dt}")][0] for dt in ("0.005", "0.0025", "0.00125")]
    assert all(a > 12 * b for a, b in zip(default, default[1:])), default
    spread = re.search(r"differ from KKT's by at most (\S+) m", text).group(1)
    assert float(spread) < 1e-10, spread


@pytest.mark.slow
def test_seed_objects_quick(tmp_path):
    """The seed's six benchmark objects over 2 s: diffchain's default integrator follows each closed form (DOP853 at
    1e-12) to 1e-4 at dt = 1.25e-3 and converges faster than third order (the difference falls by more than 8x from
    dt = 2.5e-3), except where it is at the reference's round-off (below 1e-10)."""
    table = _table(_run_quick("seed_objects.py", tmp_path))
    objects = {m for m, _ in table}
    assert len(objects) == 6, objects
    for name in objects:
        coarse, fine = table[(name, "dt = 0.0025")][0], table[(name, "dt = 0.00125")][0]
        assert fine < 1e-4 and (coarse > 8 * fine or coarse < 1e-10), (name, coarse, fine)
