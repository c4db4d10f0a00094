"""``diffchain.__version__``: the installed distribution's version (pyproject.toml's, as pip recorded it)."""
from __future__ import annotations

import pathlib
import re
from importlib import metadata


def _version() -> str:
    try:
        return metadata.version("diffchain")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed: its pyproject.toml
        pyproject = pathlib.Path(__file__).resolve().parents[1] / "pyproject.toml"
        try:
            found = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(), re.M)
        except OSError:
            found = None
        return found.group(1) if found else "0+unknown"


__version__ = _version()
