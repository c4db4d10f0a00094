"""Build the guide notebooks from the guide's pages: ``notebooks/<topic>.ipynb`` from ``docs/guide/<topic>.md``.

Each page becomes a notebook: its prose a markdown cell, each of its ```python blocks a code cell, in order (the
guide's examples continue each other, so do the cells), its relative links pointing to the pages and pictures
from here. The notebooks are saved executed: the cells run in order in one namespace, each keeping what it printed.
The test suite runs the same code as the guide's (tests/package/test_readme.py) and checks that every notebook is
its page's (tests/package/test_notebooks.py).

    python notebooks/build.py            # rebuild and execute every guide notebook (a few minutes)
    python notebooks/build.py events     # one of them
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import posixpath
import re
import subprocess
import sys
import traceback

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
GUIDE = ROOT / "docs" / "guide"
TOPICS = ("chains", "mechanisms", "events", "gradients", "batching")  # the guide's pages a user would open to learn
BLOCK = re.compile(r"```python\n(.*?)```\n?", re.S)
LINK = re.compile(r"(\]\()([^)#\s:]+)([^)\s]*\))")  # a relative link target (no scheme), its anchor kept


def _relink(text):
    """The page's relative links (to docs/guide/<page>) as links from notebooks/."""
    def move(m):
        target = posixpath.normpath(posixpath.join("../docs/guide", m.group(2)))
        return m.group(1) + target + m.group(3)
    return LINK.sub(move, text)


def cells(topic):
    """The cells of the notebook of ``docs/guide/<topic>.md``: [("markdown" | "code", source)]."""
    text = (GUIDE / f"{topic}.md").read_text()
    out, at = [], 0
    for m in BLOCK.finditer(text):
        prose = text[at:m.start()].strip()
        if prose:
            out.append(("markdown", _relink(prose)))
        out.append(("code", m.group(1).rstrip("\n")))
        at = m.end()
    if text[at:].strip():
        out.append(("markdown", _relink(text[at:].strip())))
    return out


def _lines(source):
    return source.splitlines(keepends=True)


def execute(topic):
    """The notebook of ``topic`` with its cells run in order in one namespace (from the repository's root, the
    pictures drawn off screen), each code cell keeping its standard output."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    namespace, nb_cells, count = {"__name__": "__main__"}, [], 0
    for kind, source in cells(topic):
        if kind == "markdown":
            nb_cells.append({"cell_type": "markdown", "metadata": {}, "source": _lines(source)})
            continue
        count += 1
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            try:
                exec(compile(source, f"{topic}.ipynb cell {count}", "exec"), namespace)
            except Exception:
                traceback.print_exc()  # (to standard error, which is not redirected)
                raise SystemExit(f"notebooks/build.py: a cell of {topic} failed (above)")
        outputs = ([{"output_type": "stream", "name": "stdout", "text": _lines(printed.getvalue())}]
                   if printed.getvalue() else [])
        nb_cells.append({"cell_type": "code", "execution_count": count, "metadata": {}, "outputs": outputs,
                         "source": _lines(source)})
    return {"cells": nb_cells, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                                          "name": "python3"},
                                            "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def main(topics):
    for topic in topics:
        if topic not in TOPICS:
            raise SystemExit(f"notebooks/build.py: no guide notebook {topic!r}; the topics are {', '.join(TOPICS)}")
    if len(topics) > 1:  # each in a fresh process, as a notebook's kernel starts (jax's options are per process)
        for topic in topics:
            subprocess.run([sys.executable, __file__, topic], check=True)
        return
    os.chdir(ROOT)
    path = HERE / f"{topics[0]}.ipynb"
    path.write_text(json.dumps(execute(topics[0]), indent=1, ensure_ascii=False) + "\n")
    print(path.relative_to(ROOT))


if __name__ == "__main__":
    main(sys.argv[1:] or TOPICS)
