"""Small helpers shared by the benchmark scripts: time formatting, markdown tables, a printed-and-saved report."""
from __future__ import annotations

import os
import time


def cpu_description(detail=False):
    """'model name (vector ISA, MHz[, family/model, cache])' from /proc/cpuinfo ('unknown' where it is missing)."""
    cpu, extra = "unknown", []
    try:
        with open("/proc/cpuinfo") as fh:
            info = fh.read().split("\n\n")[0]
    except OSError:
        return cpu
    kv = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in info.splitlines() if ":" in line)}
    cpu = kv.get("model name", cpu)
    if detail:
        extra.append(f"family {kv.get('cpu family', '?')} model {kv.get('model', '?')}")
    flags = kv.get("flags", "").split()
    extra.append("AVX-512" if "avx512f" in flags else ("AVX2" if "avx2" in flags else "no AVX2"))
    if "cpu MHz" in kv:
        extra.append(f"{float(kv['cpu MHz']):.0f} MHz")
    if detail and "cache size" in kv:
        extra.append(f"cache {kv['cache size']}")
    return f"{cpu} ({', '.join(extra)})"


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
