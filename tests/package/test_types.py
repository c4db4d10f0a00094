"""The public API's annotations, as a type checker sees them: typical user code (typed_usage.py: chains and a mechanism
built with MechanismBuilder, rollouts, event rollouts, forward dynamics by every solver, linearisations, files)
type-checks with mypy without an error, and code that misuses the API does not: the annotations are precise enough to
catch a string passed as a time step, a wrong type of argument, and the Solution of ``return_forces=True`` used as
the accelerations.

mypy reads the package as a user's installed copy is read (``--follow-imports=silent``: its own modules' errors are
not the user's). One run of mypy checks both files (cold, ~15 s; with its cache in .mypy_cache, ~2 s)."""
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("mypy")

ROOT = pathlib.Path(__file__).resolve().parents[2]
USAGE = pathlib.Path(__file__).with_name("typed_usage.py")

# each line that misuses the API, marked with what mypy must report there
MISUSE = textwrap.dedent("""
    import jax
    import diffchain as dc

    chain = dc.pendulum(2)
    state = dc.from_joint_angles(chain, [0.1, 0.2])
    dc.rollout(chain, state, None, "0.01", n_steps=10)  # expect: arg-type
    dc.step(chain, state, dc.Control(n=3), 0.01, solver=dc.RK4())  # expect: arg-type
    dc.event_rollout(chain, dc.Events(3), state, None, 0.01, n_steps=10)  # expect: arg-type
    a: jax.Array = dc.forward_dynamics(chain, state, return_forces=True)  # expect: assignment
    final, trajectory = dc.rollout(chain, state, None, 0.01, n_steps=10)
    final.a  # expect: attr-defined
""")


@pytest.mark.slow
def test_typical_code_type_checks_and_misuse_is_reported(tmp_path):
    misuse = tmp_path / "misuse.py"
    misuse.write_text(MISUSE)
    expected = {(misuse.name, i): m.group(1) for i, line in enumerate(MISUSE.splitlines(), 1)
                if (m := re.search(r"# expect: ([\w-]+)", line))}
    assert len(expected) == 5
    run = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                          "--follow-imports=silent", "--no-error-summary", "--show-error-codes",
                          str(USAGE), str(misuse)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode in (0, 1), run.stdout + run.stderr  # (1: errors found; 2: mypy itself failed)
    errors = re.findall(r"^(\S+?):(\d+): error: .*\[([\w-]+)\]$", run.stdout, re.M)
    usage_errors = [e for e in errors if pathlib.Path(e[0]).name == USAGE.name]
    assert usage_errors == [], run.stdout
    found = {(pathlib.Path(f).name, int(line)): code for f, line, code in errors if pathlib.Path(f).name == misuse.name}
    assert found == expected, run.stdout
