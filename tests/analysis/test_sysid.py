"""The measured-trajectory files of system identification: ``save_angles_csv`` / ``load_angles_csv`` round trip
exactly, and a malformed file raises an error that names its line and column. (The example that writes and reads
such files, examples/sysid.py, runs in tests/package/test_examples.py.)"""
import numpy as np
import pytest

import diffchain as dc


def test_round_trip_is_exact(tmp_path):
    """17 significant digits: the angles read back equal the ones written, bit for bit; one angle column or several;
    the comment and the header are skipped."""
    rng = np.random.default_rng(0)
    t = 0.01 * np.arange(50)
    angles = rng.standard_normal((50, 3)) * np.array([1.0, 1e-7, 1e5])
    path = tmp_path / "a.csv"
    dc.save_angles_csv(path, t, angles, ["a", "b", "c"], comment="two lines\nof comment")
    text = path.read_text().splitlines()
    assert text[:3] == ["# two lines", "# of comment", "t,a,b,c"] and len(text) == 53
    t2, a2 = dc.load_angles_csv(path)
    assert t2.dtype == a2.dtype == np.float64 and a2.shape == (50, 3)
    assert np.array_equal(t2, t) and np.array_equal(a2, angles)
    dc.save_angles_csv(str(path), t, angles[:, 0])                     # one angle, default names
    assert path.read_text().splitlines()[0] == "t,theta_1"
    t3, a3 = dc.load_angles_csv(str(path))
    assert a3.shape == (50, 1) and np.array_equal(a3[:, 0], angles[:, 0])


def test_without_header_blank_lines_and_spaces(tmp_path):
    path = tmp_path / "b.csv"
    path.write_text("0, 1.5, -2\n\n0.1,1.25 ,-2.5\n# a note\n0.2,1e-3,3\n")
    t, a = dc.load_angles_csv(path)
    assert np.array_equal(t, [0.0, 0.1, 0.2]) and np.array_equal(a, [[1.5, -2.0], [1.25, -2.5], [1e-3, 3.0]])


@pytest.mark.parametrize("text, message", [
    ("t,theta\n0,1\n0.1,x\n", r"line 3, column 2 \('theta'\): expected a finite number, got 'x'"),
    ("t,theta\n0,1\n0.1,nan\n", r"line 3, column 2 \('theta'\): expected a finite number, got 'nan'"),
    ("0,1,2\n0.1,1\n", r"line 2: 2 columns, expected 3 as in the first row"),
    ("# c\nt,a,b\n0,1,2\n0.1,1,2,3\n", r"line 4: 4 columns, expected 3 as in the header"),
    ("t,a\n0,1\n0.2,1\n0.1,1\n", r"line 4, column 1: the time 0.1 does not increase \(the row before, line 3"),
    ("t,a\n0,1\n0,2\n", r"line 3, column 1: the time 0.0 does not increase"),
    ("t\n0\n", r"line 1: the header names 1 column; expected the time and at least one angle"),
    ("0\n0.1\n", r"line 1: 1 column; expected the time and at least one angle"),
    ("# only\nt,a\n", r"no data rows"),
    ("t,a\n0,1\n,2\n", r"line 3, column 1 \('t'\): expected a finite number, got ''"),
])
def test_malformed_files_name_line_and_column(tmp_path, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=rf"load_angles_csv: .*bad\.csv.*{message}"):
        dc.load_angles_csv(path)


def test_bad_arguments():
    with pytest.raises(TypeError, match="load_angles_csv: path must be a file path"):
        dc.load_angles_csv(3)
    with pytest.raises(ValueError, match=r"save_angles_csv: t must have shape \(T,\) and angles"):
        dc.save_angles_csv("unused.csv", np.zeros(3), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="save_angles_csv: names must be 2 non-empty column names"):
        dc.save_angles_csv("unused.csv", np.zeros(3), np.zeros((3, 2)), ["a,b", "c"])
