import gc
import os

import jax
import pytest

import diffchain as dc

jax.config.update("jax_enable_x64", True)
# The suite runs with the XLA CPU flags the library recommends (dc.set_xla_cpu_flags; before JAX's first computation):
# the same programs compile in about 55 % of the time. DIFFCHAIN_TEST_DEFAULT_XLA_FLAGS=1 runs it with JAX's default
# flags, as a process that does not opt in has them (tests/simulate/test_gradients.py and tests/package/test_import.py
# always run a subprocess with them).
if not os.environ.get("DIFFCHAIN_TEST_DEFAULT_XLA_FLAGS"):
    dc.set_xla_cpu_flags()

# Tracing a program creates millions of short-lived Python objects: with the default thresholds the cyclic garbage
# collector runs thousands of times per trace (a quarter of the tracing time of an event rollout's gradient, 6.6 ->
# 4.9 s). The test processes collect less often; what is collected is the same.
gc.set_threshold(50_000, 20, 100)

from hypothesis import HealthCheck, settings  # noqa: E402

# jit compilation makes the first examples slow; bound the example count so the suite stays fast on 2 cores.
settings.register_profile("default", deadline=None, max_examples=40, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("thorough", deadline=None, max_examples=400,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("default")

# The files with the most compile time first, in the order of their measured times (test_lean ~3 min on 2 cores,
# test_readme and test_event_gradients ~2.4, the next ones 2-0.5 min: the longest-first schedule). With --dist
# loadfile and --no-loadscope-reorder (pyproject.toml) xdist hands whole files to its workers in collection order, so
# both workers finish at about the same time; by default it would order files by their number of tests.
HEAVY_FIRST = ("test_gradient_matrix.py", "test_lean.py", "test_readme.py", "test_event_gradients.py",
               "test_events.py", "test_mechanism_events.py", "test_examples.py", "test_literature.py",
               "test_linearize.py", "test_active.py", "test_gradients.py", "test_mechanism.py", "test_validation.py",
               "test_solvers_agree.py", "test_event_defects.py", "test_integrators.py", "test_event_integrators.py",
               "test_progress.py", "test_packaging.py", "test_trust.py", "test_torsion.py", "test_notebooks.py",
               "test_synthesis.py", "test_types.py", "test_failure_reports.py", "test_model.py", "test_sharding.py",
               "test_envs.py", "test_bench.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file keeps its order


# Most of the suite's time is XLA compiling many small programs, and most of that is LLVM optimising the generated
# code. With jax_disable_most_optimizations the same HLO (XLA's fusion decisions unchanged) compiles in ~60 % of the
# time (the lean damping/drag test: 60 -> 37 s). Its code may round differently (e.g. no fused multiply-adds), so a
# test that compares two programs bit for bit (they must give the same bits where users' optimised code does) is
# marked ``full_opt``. DIFFCHAIN_TEST_FULL_OPT=1 runs every test with the optimised code that users run.
# Every compiled program holds three memory mappings of its machine code until JAX's caches let it go; a test process
# compiles thousands, and past the kernel's vm.max_map_count (65530 by default) the next mmap fails and XLA's compiler
# crashes with a segmentation fault, in whichever test comes next. The mappings are released by clearing the caches
# (what a long-lived process of a user's that compiles without end would do too).
_MAPS = "/proc/self/maps"
MAX_MAPS = 30_000


@pytest.fixture(autouse=True)
def _release_compiled_programs():
    yield
    if os.path.exists(_MAPS):
        with open(_MAPS) as f:
            n = sum(1 for _ in f)
        if n > MAX_MAPS:
            jax.clear_caches()
            gc.collect()


@pytest.fixture(autouse=True)
def _compile_effort(request):
    full = bool(os.environ.get("DIFFCHAIN_TEST_FULL_OPT")) or request.node.get_closest_marker("full_opt") is not None
    jax.config.update("jax_disable_most_optimizations", not full)
