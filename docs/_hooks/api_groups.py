"""MkDocs hook: the API reference's groups, generated from ``diffchain.__all__`` at build time.

``docs/api.md`` holds the marker ``<!-- diffchain.__all__ -->``. It is replaced by one section per group of
``__all__`` (the groups its comments make in ``diffchain/__init__.py``), each a ``::: diffchain`` block whose
``members`` are the group's names. So the reference always shows exactly ``__all__``, in its order.
"""
import pathlib
import re

MARKER = "<!-- diffchain.__all__ -->"
INIT = pathlib.Path(__file__).resolve().parents[2] / "diffchain" / "__init__.py"


def groups(source=None):
    """[(title, [names])] from the ``__all__ = [...]`` of diffchain/__init__.py: a comment line starts a group."""
    source = INIT.read_text() if source is None else source
    body = source[source.index("__all__ = ["):]
    body = body[len("__all__ = ["):body.index("]")]
    out = []
    for line in body.splitlines():
        line = line.strip()
        if line.startswith("#"):
            title = re.sub(r"\s*\([^)]*\.py[^)]*\)", "", line.lstrip("# ").strip())  # drop "(model.py, ...)"
            out.append((title[:1].upper() + title[1:], []))
        elif line:
            if not out:
                out.append(("Public API", []))
            out[-1][1].extend(re.findall(r"[\"'](\w+)[\"']", line))
    return out


def markdown():
    parts = []
    for title, names in groups():
        parts += [f"## {title}", "", "::: diffchain", "    options:", "      members:"]
        parts += [f"        - {n}" for n in names]
        parts.append("")
    return "\n".join(parts)


def on_page_markdown(text, page, config, files):
    if MARKER in text:
        return text.replace(MARKER, markdown())
    return text
