"""``dc.shard``: a batch of rollouts and its gradient over 2 host devices equal the one-device run, and the outputs
are spread over both devices. Run in a subprocess: the device count is fixed when JAX creates its CPU backend."""
import json
import os
import subprocess
import sys
import textwrap

import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc

SCRIPT = textwrap.dedent("""
    import json, re
    import jax, jax.extend, jax.numpy as jnp, numpy as np
    import diffchain as dc

    chain = dc.pendulum(5, k_omega=0.05)                        # 5 links, 6 points
    B, T, dt = 4, 20, 2e-3
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    thetas = jax.random.uniform(keys[0], (B, 5), minval=-1.0, maxval=1.0)
    starts = jax.vmap(lambda th: dc.from_joint_angles(chain, th))(thetas)
    taus = 0.5 * jax.random.normal(keys[1], (B, T, chain.n))    # open-loop torques, one sequence per start
    devices = jax.devices()
    assert len(devices) == 2, devices
    out = {}

    def program(**kw):
        def loss(taus, starts):
            final, traj = jax.vmap(lambda s, u: dc.rollout(chain, s, dc.Control(tau=u), dt, **kw))(starts, taus)
            return jnp.sum(final.x[:, -1, 1]) + jnp.sum(final.v ** 2), (final, traj)

        def run(starts, taus):
            (_, (final, traj)), g = jax.value_and_grad(loss, has_aux=True)(taus, starts)
            return {"x": final.x, "v": final.v, "traj_x": traj.x, "traj_v": traj.v, "grad": g}
        # traced once (which takes as long as compiling): both runs compile this program, each for its devices
        traced = jax.jit(run).trace(starts, taus)
        flat = jax.jit(jax.extend.core.jaxpr_as_fun(traced.jaxpr))
        return lambda *args: jax.tree.unflatten(jax.tree.structure(traced.out_info), flat(*jax.tree.leaves(args)))

    for name, kw in [("default", {}), ("pointmajor_rk4", dict(backend=dc.PointMajor(), integrator=dc.RK4()))]:
        run = program(**kw)
        one = run(*jax.device_put((starts, taus), devices[0]))
        many = run(*dc.shard((starts, taus)))
        res = {}
        for k in one:
            a, b = np.asarray(one[k]), np.asarray(many[k])
            scale = max(float(np.max(np.abs(a))), 1e-300)
            res[k] = {"rel_err": float(np.max(np.abs(a - b))) / scale, "bitwise": bool(np.array_equal(a, b)),
                      "one_devices": len(one[k].sharding.device_set),
                      "devices": sorted(d.id for d in many[k].sharding.device_set),
                      "shards": sorted((s.device.id, s.data.shape[0]) for s in many[k].addressable_shards),
                      "spec": list(many[k].sharding.spec)}
        out[name] = res

    # plain JAX: a NamedSharding of its own, jit of vmap of the checked rollout. The checks' lax.cond runs where the
    # host callback runs (device 0), on a few reduced numbers: the states stay sharded (no "Involuntary full
    # rematerialization" of them there: the fixture reads the compiler's stderr), and nothing but those numbers moves
    mesh = jax.sharding.Mesh(np.array(devices), ("b",))
    placed = jax.device_put((starts, taus), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("b")))
    plain = jax.jit(jax.vmap(lambda s, u: dc.rollout(chain, s, dc.Control(tau=u), dt)))
    final, traj = plain(*placed)
    ref = jax.jit(jax.vmap(lambda s, u: dc.rollout(chain, s, dc.Control(tau=u), dt, check=False)))(starts, taus)
    out["plain"] = {"specs": [list(a.sharding.spec) for a in (final.x, final.v, traj.x)],
                    "shards": sorted((s.device.id, s.data.shape[0]) for s in final.x.addressable_shards),
                    "rel_err": max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) / max(float(np.max(np.abs(
                        np.asarray(b)))), 1e-300) for a, b in zip(jax.tree.leaves((final, traj)), jax.tree.leaves(ref)))}
    hlo = plain.lower(*placed).compile().as_text()
    out["checked_collectives"] = sorted(set(re.findall(r"(all-gather|all-reduce|all-to-all|collective-permute|"
                                                       r"reduce-scatter)", hlo)))
    out["checked_gathers"] = [ln.strip()[:200] for ln in hlo.splitlines() if re.search(r"= \\S+ all-gather", ln)]

    # without the run-time checks the partitioned program has no communication at all
    nocheck = jax.jit(jax.vmap(lambda s, u: dc.rollout(chain, s, dc.Control(tau=u), dt, check=False,
                                                       backend=dc.PointMajor(), integrator=dc.RK4())[0]))
    hlo = nocheck.lower(*dc.shard((starts, taus))).compile().as_text()
    out["nocheck_collectives"] = sorted(set(re.findall(r"(all-gather|all-reduce|all-to-all|collective-permute|"
                                                       r"reduce-scatter)", hlo)))

    try:
        dc.shard((starts, taus[:3]))
        out["bad_batch"] = None
    except ValueError as e:
        out["bad_batch"] = str(e)
    print("RESULT " + json.dumps(out))
""")


@pytest.fixture(scope="module")
def two_devices():
    env = dict(os.environ, JAX_ENABLE_X64="1", JAX_PLATFORMS="cpu", JAX_DISABLE_MOST_OPTIMIZATIONS="1",
               XLA_FLAGS=(os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip())
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return {**json.loads(line[len("RESULT "):]), "stderr": out.stderr}


@pytest.mark.slow
@pytest.mark.parametrize("program", ["default", "pointmajor_rk4"])
def test_sharded_rollout_and_gradient_equal_one_device(two_devices, program):
    res = two_devices[program]
    assert set(res) == {"x", "v", "traj_x", "traj_v", "grad"}
    for name, r in res.items():
        assert r["rel_err"] <= 1e-12, (name, r)
        assert r["one_devices"] == 1, (name, r)


@pytest.mark.slow
@pytest.mark.parametrize("program", ["default", "pointmajor_rk4"])
def test_sharded_outputs_are_spread_over_both_devices(two_devices, program):
    for name, r in two_devices[program].items():
        assert r["devices"] == [0, 1], (name, r)
        assert r["shards"] == [[0, 2], [1, 2]], (name, r)  # half the batch of 4 on each device
        assert r["spec"] == ["batch"], (name, r)


@pytest.mark.slow
def test_checks_of_a_sharded_batch_leave_it_sharded(two_devices):
    """jax.jit(jax.vmap(dc.rollout)) of a batch placed by jax.device_put with a NamedSharding, check=True: the
    compiler moves no state to the device of the checks' callback (XLA reports such a move on stderr as an
    "Involuntary full rematerialization"), the outputs stay split over both devices, equal to the unchecked run on one
    device to round-off, and no all-gather is left in the program (the checks all-reduce a few numbers)."""
    assert "Involuntary full rematerialization" not in two_devices["stderr"], two_devices["stderr"][-3000:]
    plain = two_devices["plain"]
    assert plain["specs"] == [["b"], ["b"], ["b"]] and plain["shards"] == [[0, 2], [1, 2]], plain
    assert plain["rel_err"] <= 1e-12, plain
    assert two_devices["checked_gathers"] == [], two_devices["checked_gathers"]
    assert "all-reduce" in two_devices["checked_collectives"], two_devices["checked_collectives"]


def test_unchecked_sharded_rollout_has_no_communication(two_devices):
    assert two_devices["nocheck_collectives"] == []


def test_shard_bad_batch_size(two_devices):
    msg = two_devices["bad_batch"]
    assert msg is not None and "tree[1]" in msg and "multiple of the number of devices (2)" in msg \
        and "(3, 20, 6)" in msg, msg


def test_shard_bad_arguments():
    with pytest.raises(ValueError, match=r"tree\['t'\] of shape \(\)"):
        dc.shard({"t": jnp.float64(1.0)})
    with pytest.raises(TypeError, match="devices must be None or a list or tuple of jax devices"):
        dc.shard(jnp.zeros(2), devices=["cpu"])
    with pytest.raises(TypeError, match="devices must be None or a list or tuple of jax devices"):
        dc.shard(jnp.zeros(2), devices=2)
    with pytest.raises(TypeError, match="axis_name must be a non-empty str"):
        dc.shard(jnp.zeros(2), axis_name=0)


def test_shard_one_device_leaves_values_and_non_arrays():
    tree = {"a": np.arange(6.0).reshape(3, 2), "f": 1.5, "n": None}
    out = dc.shard(tree)
    assert out["f"] == 1.5 and out["n"] is None
    np.testing.assert_array_equal(np.asarray(out["a"]), tree["a"])
    assert tuple(out["a"].sharding.spec) == ("batch",)
