"""Importing diffchain changes nothing in the user's process: environment, JAX configuration, JAX's primitive rules.

Checked in fresh interpreters (an import can only be observed once per process)."""
import json
import os
import subprocess
import sys
import textwrap

SNAPSHOT = textwrap.dedent("""
    import json, os, sys
    import jax
    import equinox, matplotlib  # our dependencies register their own rules and settings on import: not ours to judge
    from jax.interpreters import ad

    def snapshot():
        rules = {name: sorted(f"{p}:{id(r)}" for p, r in table.items() if "diffchain" not in str(p))  # ours aside
                 for name, table in (("transposes", ad.primitive_transposes), ("jvps", ad.primitive_jvps))}
        config = {k: repr(getattr(jax.config, k)) for k in dir(jax.config) if k.startswith("jax_")}
        return {"environ": dict(os.environ), "config": config, "rules": rules}

    def stop_gradient_transpose_raises():
        try:
            jax.linear_transpose(lambda x: jax.lax.stop_gradient(x) + x, 1.0)(1.0)
        except Exception:
            return True
        return False

    before, raised_before = snapshot(), stop_gradient_transpose_raises()
    import diffchain
    import diffchain._events.demo, diffchain.envs, diffchain.systems, diffchain.viz  # every module of the package
    after, raised_after = snapshot(), stop_gradient_transpose_raises()
    print(json.dumps({"same": {k: before[k] == after[k] for k in before},
                      "diff_environ": sorted(set(after["environ"].items()) ^ set(before["environ"].items())),
                      "diff_config": sorted(set(after["config"].items()) ^ set(before["config"].items())),
                      "diff_rules": {k: sorted(set(after["rules"][k]) ^ set(before["rules"][k]))
                                     for k in before["rules"]},
                      "raised": [raised_before, raised_after], "xla_flags": os.environ.get("XLA_FLAGS")}))
""")


def _run(env):
    out = subprocess.run([sys.executable, "-c", SNAPSHOT], capture_output=True, text=True, timeout=300, env=env,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "DIFFCHAIN_KEEP_XLA_FLAGS",
                                                            "DIFFCHAIN_KEEP_JAX_RULES")}
    return {**env, **extra}


def test_import_changes_nothing():
    r = _run(_env())
    assert r["same"] == {"environ": True, "config": True, "rules": True}, (r["diff_environ"], r["diff_config"],
                                                                           r["diff_rules"])
    assert r["xla_flags"] is None
    # jax-ml/jax#22011: JAX has no transpose for stop_gradient, and after importing diffchain it still has none
    assert r["raised"] == [True, True]


def test_import_keeps_the_users_xla_flags():
    r = _run(_env(XLA_FLAGS="--xla_cpu_enable_fast_math=false"))
    assert r["same"]["environ"], r["diff_environ"]
    assert r["xla_flags"] == "--xla_cpu_enable_fast_math=false"


def test_xla_cpu_flags_are_an_explicit_opt_in():
    code = textwrap.dedent("""
        import os
        os.environ["XLA_FLAGS"] = "--xla_cpu_enable_fast_math=false"
        import diffchain as dc
        flags = dc.set_xla_cpu_flags()
        assert dc.set_xla_cpu_flags() == flags  # a second call adds nothing
        import jax.numpy as jnp
        print(flags); print(float(jnp.sum(jnp.arange(3.0))))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=_env())
    assert out.returncode == 0, out.stderr[-3000:]
    flags, total = out.stdout.strip().splitlines()[-2:]
    assert flags.startswith("--xla_cpu_enable_fast_math=false ")
    assert "--xla_cpu_use_xnnpack=false" in flags.split() and float(total) == 3.0
