"""Recommended XLA CPU flags, applied only when the user asks (:func:`set_xla_cpu_flags`).

Importing diffchain never changes ``XLA_FLAGS``: the flags apply to every JAX program of the process, so they are the
application's choice. XLA reads them once, when JAX creates its CPU backend (at the first computation), so they must be
set before that.
"""
from __future__ import annotations

import importlib.metadata
import os
import re


def _jaxlib_release() -> tuple[int, ...] | None:
    """The installed jaxlib's release, e.g. (0, 10, 2); None if it cannot be read."""
    try:
        m = re.match(r"\d+(\.\d+)*", importlib.metadata.version("jaxlib"))
    except importlib.metadata.PackageNotFoundError:
        return None
    return tuple(int(p) for p in m.group(0).split(".")) if m else None


def xla_cpu_flags() -> list[str]:
    """The XLA CPU flags recommended for diffchain's programs with the installed jaxlib.

    * ``--xla_cpu_use_xnnpack=false`` and (from jaxlib 0.8.1 on, the first release that knows it: XLA aborts on an
      unknown flag) ``--xla_cpu_experimental_ynn_fusion_type=``: XNNPACK/YNN reductions over the length-2 axes of
      planar vectors are several times slower than XLA's own loops;
    * ``--xla_cpu_use_fusion_emitters=false``: keeps the code generator on which the library was measured (some jaxlib
      releases' fusion emitter crashed on small float64 reverse-mode rollouts).

    They concern the CPU backend only; GPU programs are unaffected.
    """
    flags = ["--xla_cpu_use_fusion_emitters=false", "--xla_cpu_use_xnnpack=false"]
    release = _jaxlib_release()
    if release is None or release >= (0, 8, 1):
        flags.append("--xla_cpu_experimental_ynn_fusion_type=")
    return flags


def set_xla_cpu_flags() -> str:
    """Add :func:`xla_cpu_flags` to this process's ``XLA_FLAGS`` (flags already named there are left as they are) and
    return the new value. Call it before JAX's first computation; later it has no effect."""
    flags = os.environ.get("XLA_FLAGS", "")
    extra = [f for f in xla_cpu_flags() if f.split("=")[0] not in flags]
    if extra:
        os.environ["XLA_FLAGS"] = " ".join([flags, *extra]).strip()
    return os.environ.get("XLA_FLAGS", "")
