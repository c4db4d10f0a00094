"""The timing of the benchmark suite (:mod:`diffchain._bench.suite`) and its peers (:mod:`diffchain._bench.jax2d_peer`):
compile once, then the median of timed calls."""
from __future__ import annotations

import statistics
import time

import jax


def _timed(f, args, repeats):
    """(median seconds per call, compile seconds) of ``jax.jit(f)(*args)``. After compiling, a first call of over 1 s
    is the measurement (the program's one-time costs are then below 1 %); a shorter one warms up, and ``repeats``
    calls are timed."""
    t0 = time.perf_counter()
    compiled = jax.jit(f).lower(*args).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    first = time.perf_counter() - t0
    if first > 1.0:
        return first, compile_s
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times), compile_s
