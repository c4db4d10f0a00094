"""Small helpers shared by the benchmark scripts: time formatting, markdown tables, a printed-and-saved report."""
from __future__ import annotations

import os
import time


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

    def save(self, out, t_start):
        """Close with the load average and the total wall time since ``t_start``; write the markdown to ``out``."""
        self.add(f"\nLoad average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}. "
                 f"Total benchmark wall time: {time.perf_counter() - t_start:.0f} s.")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as fh:
            fh.write(self.markdown())
        print(f"\nwritten {out}", flush=True)
