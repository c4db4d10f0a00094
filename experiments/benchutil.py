"""Small helpers shared by the benchmark scripts: time formatting, markdown tables, a printed-and-saved report."""
from __future__ import annotations


def fmt_t(s):
    if s is None or s != s:
        return "–"
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def md_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


class Report:
    """Text parts printed as they come (unless ``quiet``) and joined into markdown at the end."""

    def __init__(self, quiet=False):
        self.parts, self.quiet = [], quiet

    def add(self, text=""):
        if not self.quiet:
            print(text, flush=True)
        self.parts.append(text)

    def markdown(self):
        return "\n".join(self.parts) + "\n"
