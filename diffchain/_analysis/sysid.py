"""Measured trajectories for system identification: joint angles over time in a plain CSV file.

The format is the plainest a data logger or a spreadsheet writes: one row per sample, the time in seconds in the
first column, one column per measured angle in radians after it, separated by commas. An optional first row names the
columns (``t,theta_1,theta_2``); lines that start with ``#`` are comments, and blank lines are skipped. Numpy only:
a file is read on the host, before any program is compiled (the system-identification guide's examples/sysid.py).
"""
from __future__ import annotations

import os

from typing import Sequence

import numpy as np
import numpy.typing as npt

from .._model.checks import describe


def save_angles_csv(path: str | os.PathLike[str], t: npt.ArrayLike, angles: npt.ArrayLike,
                    names: Sequence[str] | None = None, *, comment: str | None = None) -> None:
    """Write sampled angles to the CSV file ``path`` that :func:`~diffchain.load_angles_csv` reads: a header row
    (``t`` and ``names``, default ``theta_1 .. theta_k``), then one row per sample, the time ``t`` (T,) and the angles
    ``angles`` (T, k) (or (T,) for one angle), at full float64 precision (17 significant digits, so the round trip is
    exact). ``comment``: optional text written first, each of its lines after a ``#``."""
    t = np.asarray(t, float)
    angles = np.asarray(angles, float)
    if angles.ndim == 1:
        angles = angles[:, None]
    if t.ndim != 1 or angles.ndim != 2 or angles.shape[0] != t.shape[0] or angles.shape[1] < 1:
        raise ValueError(f"save_angles_csv: t must have shape (T,) and angles (T, k) or (T,) with the same T and "
                         f"k >= 1, got t {t.shape} and angles {np.shape(angles)}")
    names = [f"theta_{i + 1}" for i in range(angles.shape[1])] if names is None else [str(n) for n in names]
    if len(names) != angles.shape[1] or any(("," in n or "\n" in n or not n.strip()) for n in names):
        raise ValueError(f"save_angles_csv: names must be {angles.shape[1]} non-empty column names without commas "
                         f"or line breaks, one per angle column, got {names!r}")
    with open(path, "w") as f:
        for line in ([] if comment is None else str(comment).splitlines()):
            f.write(f"# {line}\n")
        f.write(",".join(["t", *names]) + "\n")
        for row in np.column_stack([t, angles]):
            f.write(",".join(f"{v:.17g}" for v in row) + "\n")


def load_angles_csv(path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray]:
    """Read the measured angles of the CSV file ``path``: ``(t, angles)``, numpy float64 arrays of shapes (T,) and
    (T, k).

    Each data row holds 1 + k comma-separated numbers: the time in seconds, then k >= 1 angles in radians. An optional
    header row (the first row that is not a comment, if its first field is not a number) names the columns; ``#``
    lines and blank lines are skipped. A malformed file raises ValueError naming the file, the line (counting from 1)
    and the column: a field that is not a finite number, a row with a different number of columns than the first, a
    time that does not increase, no data rows or no angle column. :func:`~diffchain.save_angles_csv` writes such
    files."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"load_angles_csv: path must be a file path (str or os.PathLike), got {describe(path)}")
    where = f"load_angles_csv: {os.fspath(path)}"
    rows, lines, header, width = [], [], None, None
    with open(path) as f:
        for number, text in enumerate(f, start=1):
            text = text.strip()
            if not text or text.startswith("#"):
                continue
            fields = [v.strip() for v in text.split(",")]
            if not rows and header is None and not _is_number(fields[0]):
                header = fields
                width = len(fields)
                if width < 2:
                    raise ValueError(f"{where}, line {number}: the header names {width} column; expected the time "
                                     "and at least one angle column")
                continue
            if width is None:
                width = len(fields)
                if width < 2:
                    raise ValueError(f"{where}, line {number}: {width} column; expected the time and at least one "
                                     "angle column")
            if len(fields) != width:
                raise ValueError(f"{where}, line {number}: {len(fields)} columns, expected {width} as in the "
                                 f"{'header' if header is not None else 'first row'}")
            values = []
            for column, v in enumerate(fields, start=1):
                try:
                    x = float(v)
                except ValueError:
                    x = None
                if x is None or not np.isfinite(x):
                    name = f" ({header[column - 1]!r})" if header is not None else ""
                    raise ValueError(f"{where}, line {number}, column {column}{name}: expected a finite number, got "
                                     f"{v!r}")
                values.append(x)
            if rows and not values[0] > rows[-1][0]:
                raise ValueError(f"{where}, line {number}, column 1: the time {values[0]!r} does not increase (the "
                                 f"row before, line {lines[-1]}, has {rows[-1][0]!r})")
            rows.append(values)
            lines.append(number)
    if not rows:
        raise ValueError(f"{where}: no data rows (expected rows of the time and at least one angle)")
    data = np.asarray(rows, float)
    return data[:, 0], data[:, 1:]


def _is_number(text):
    try:
        float(text)
        return True
    except ValueError:
        return False
