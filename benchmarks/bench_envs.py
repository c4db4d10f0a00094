"""Environment throughput: env-steps/s of every diffchain environment (the gymnax ``step``, auto-reset included) for
a batch of 4096 on this CPU, and the cart-pole balance task against the same model stepped by MJX (same dt, same
number of substeps, Euler in MJX vs RK4 here).

    python benchmarks/bench_envs.py [--batch 4096] [--steps 50]
"""
from __future__ import annotations

import argparse
import time

import diffchain as dc

dc.set_xla_cpu_flags()  # this script's process: the recommended XLA CPU flags
import jax

from diffchain import envs


def diffchain_rate(env, batch, steps):
    params = env.default_params
    keys = jax.random.split(jax.random.PRNGKey(0), batch)
    _, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    actions = jax.vmap(env.action_space(params).sample)(keys)

    @jax.jit
    def run(state):
        def body(s, _):
            obs, s, r, terminated, truncated, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, s, actions,
                                                                                                 params)
            return s, r

        return jax.lax.scan(body, state, length=steps)

    return _rate(run, state, batch * steps)


def _rate(run, arg, n_steps):
    """(steps per second of the second call, seconds of the first call: compile + run)."""
    t0 = time.perf_counter()
    jax.block_until_ready(run(arg))
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    jax.block_until_ready(run(arg))
    return n_steps / (time.perf_counter() - t0), compile_s


CARTPOLE_MJCF = """
<mujoco model="cartpole">
  <option timestep="{h}" integrator="Euler" gravity="0 0 -9.81"><flag contact="disable"/></option>
  <worldbody>
    <body name="cart">
      <joint name="slider" type="slide" axis="1 0 0"/>
      <inertial pos="0 0 0" mass="1.0" diaginertia="1e-6 1e-6 1e-6"/>
      <body name="pole">
        <joint name="hinge" type="hinge" axis="0 1 0"/>
        <inertial pos="0 0 0.5" mass="0.1" diaginertia="{I} {I} 1e-8"/>
      </body>
    </body>
  </worldbody>
  <actuator><motor joint="slider" gear="1"/></actuator>
</mujoco>
"""


def mjx_cartpole_rate(batch, steps, dt, substeps):
    import mujoco
    from mujoco import mjx

    m = mujoco.MjModel.from_xml_string(CARTPOLE_MJCF.format(h=dt / substeps, I=0.1 / 12))
    mx = mjx.put_model(m)
    qpos = jax.random.uniform(jax.random.PRNGKey(0), (batch, 2), minval=-0.05, maxval=0.05)
    data = jax.vmap(lambda q: mjx.make_data(mx).replace(qpos=q))(qpos)
    ctrl = jax.random.uniform(jax.random.PRNGKey(1), (batch, 1), minval=-10.0, maxval=10.0)

    @jax.jit
    def run(d):
        def env_step(d, _):
            d = d.replace(ctrl=ctrl)
            d, _ = jax.lax.scan(lambda d, _: (jax.vmap(mjx.step, (None, 0))(mx, d), None), d, length=substeps)
            return d, d.qpos[:, 1]

        return jax.lax.scan(env_step, d, length=steps)

    return _rate(run, data, batch * steps)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--no-mjx", action="store_true")
    args = p.parse_args()
    print(f"batch {args.batch}, {args.steps} env steps, float32, {jax.devices()[0].device_kind}")
    print(f"{'task':24s} {'env-steps/s':>12s} {'compile [s]':>12s}")
    rates = {}
    for name in envs.REGISTERED:
        env, _ = envs.make(name)
        rates[name], c = diffchain_rate(env, args.batch, args.steps)
        how = f"{env.substeps} RK4 substeps" if hasattr(env, "substeps") else "Gymnasium's update rule"
        print(f"{name:24s} {rates[name]:12.3e} {c:12.1f}   (dt {env.dt}, {how})")
    if not args.no_mjx:
        env = envs.CartPoleBalance()
        rate, c = mjx_cartpole_rate(args.batch, args.steps, env.dt, env.substeps)
        print(f"{'MJX cart-pole':24s} {rate:12.3e} {c:12.1f}   (same dt, {env.substeps} Euler substeps)")
        same = env.with_integrator(dc.SemiImplicitEuler())
        rate_euler, c = diffchain_rate(same, args.batch, args.steps)
        print(f"{'diffchain cart-pole':24s} {rate_euler:12.3e} {c:12.1f}   (semi-implicit Euler, like MuJoCo's Euler)")
        print(f"same integrator: diffchain / MJX = {rate_euler / rate:.1f}x;  "
              f"diffchain RK4 / MJX Euler = {rates['CartPoleBalance'] / rate:.1f}x")


if __name__ == "__main__":
    main()
