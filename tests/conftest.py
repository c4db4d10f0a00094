import jax

jax.config.update("jax_enable_x64", True)

from hypothesis import HealthCheck, settings  # noqa: E402

# jit compilation makes the first examples slow; bound the example count so the suite stays fast on 2 cores.
settings.register_profile("default", deadline=None, max_examples=40, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("thorough", deadline=None, max_examples=400,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile("default")
