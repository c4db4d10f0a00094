"""MuJoCo / MJX reference implementations of the diffchain planar pendulum.

The chain has points 1..n; point 1 is pinned at the origin, link k (length
l_k) joins points k and k+1, and point i >= 2 carries a point mass m_i.
Gravity is g = 9.81 along world -y. Joint coordinates are relative angles
theta (length n-1) measured counter-clockwise, theta_1 from the +x axis.

MuJoCo mapping: our x-y plane is MuJoCo's x-z plane (our y = MuJoCo z).
Each link is a body with a hinge about axis (0, -1, 0) at its base, so that
positive joint angles are counter-clockwise in our convention, and it holds
the mass of its tip point. One gear-1 motor per hinge, so ctrl = tau.

Usage: ``from diffchain._bench import peers`` (needs the ``bench`` extra).
Run ``python -m diffchain._bench.peers`` for a self-check against closed
forms and a throughput report.
"""

import time

import numpy as np
import mujoco

G = 9.81
# diaginertia of the "point" masses: MuJoCo rejects values <= mjMINVAL (1e-15);
# the qacc error vs. the closed forms scales linearly with it (1e-10 -> ~2e-8).
_POINT_INERTIA = 1e-12


def pendulum_mjcf(masses, lengths, dt=1e-3, integrator="Euler", link_mass=None, link_com=None, link_inertia=None):
    """Return an MJCF string for the planar point-mass pendulum chain.

    Args:
      masses: length n; masses[i] is the mass of point i+1 (masses[0] ignored).
      lengths: length n-1 link lengths.
      dt: timestep.
      integrator: MuJoCo integrator name ("Euler", "RK4", "implicit", ...).
      link_mass, link_com, link_inertia: optional rigid links with distributed mass (diffchain's convention: com
        (a, b) along the link and across it, counter-clockwise; inertia about the centre of mass). Each MuJoCo body
        then carries its tip point mass and its link, combined into one inertial (parallel-axis theorem).

    With all qpos = 0 the chain is stretched along +x. Contacts are disabled
    and there are no geoms; actuator k is a gear-1 motor on hinge k.
    """
    masses = [float(m) for m in masses]
    lengths = [float(l) for l in lengths]
    if len(masses) != len(lengths) + 1 or not lengths:
        raise ValueError("need len(masses) == len(lengths) + 1 >= 2")
    nl = len(lengths)
    mu = np.zeros(nl) if link_mass is None else np.asarray(link_mass, float)
    com = np.zeros((nl, 2)) if link_com is None else np.asarray(link_com, float)
    J = np.zeros(nl) if link_inertia is None else np.asarray(link_inertia, float)
    body, close, motors = "", "", ""
    pos = "0 0 0"
    for k, (l, m) in enumerate(zip(lengths, masses[1:]), start=1):
        ind = "  " * (k + 1)
        # our (along, across) = MuJoCo (x, z) in the link body
        p_pt, p_link = np.array([l, 0.0]), com[k - 1]
        M = m + mu[k - 1]
        c = (m * p_pt + mu[k - 1] * p_link) / M
        Iyy = J[k - 1] + mu[k - 1] * np.sum((p_link - c) ** 2) + m * np.sum((p_pt - c) ** 2)
        I, M, c = float(max(Iyy, _POINT_INERTIA)), float(M), [float(v) for v in c]
        body += (
            f'{ind}<body name="link{k}" pos="{pos}">\n'
            f'{ind}  <joint name="q{k}" type="hinge" axis="0 -1 0"/>\n'
            f'{ind}  <inertial pos="{c[0]!r} 0 {c[1]!r}" mass="{M!r}" diaginertia="{I!r} {I!r} {I!r}"/>\n'
        )
        close = f"{ind}</body>\n" + close
        motors += f'    <motor name="tau{k}" joint="q{k}" gear="1"/>\n'
        pos = f"{l!r} 0 0"
    return (
        '<mujoco model="planar_pendulum">\n'
        f'  <option timestep="{dt!r}" integrator="{integrator}" '
        f'gravity="0 0 {-G!r}">\n'
        '    <flag contact="disable"/>\n'
        "  </option>\n"
        "  <worldbody>\n" + body + close + "  </worldbody>\n"
        "  <actuator>\n" + motors + "  </actuator>\n"
        "</mujoco>\n"
    )


def _model(masses, lengths, **kw):
    return mujoco.MjModel.from_xml_string(pendulum_mjcf(masses, lengths, **kw))


def mujoco_qacc(masses, lengths, theta, theta_dot, tau, **links):
    """Forward dynamics with mujoco.mj_forward: theta_ddot (float64, n-1). ``links``: see pendulum_mjcf."""
    m = _model(masses, lengths, **links)
    d = mujoco.MjData(m)
    d.qpos[:] = theta
    d.qvel[:] = theta_dot
    d.ctrl[:] = tau
    mujoco.mj_forward(m, d)
    return np.array(d.qacc, dtype=np.float64)


def mujoco_rollout_throughput(masses, lengths, n_steps, n_copies, dt=1e-3,
                              seed=0, threads=1, repeats=1):
    """MuJoCo C throughput for n_copies x n_steps (zero ctrl), on ``threads``
    MjData (1: the calling thread, no pool); the median of ``repeats`` timed
    runs after a warm-up (a warm-up of over 1 s is itself the measurement).

    Uses mujoco.rollout.rollout when available, else (one thread) a Python
    loop of mj_step. Initial angles are uniform in [-pi, pi], velocities zero.
    """
    m = _model(masses, lengths, dt=dt)
    datas = [mujoco.MjData(m) for _ in range(threads)]
    d = datas[0]
    rng = np.random.default_rng(seed)
    qpos0 = rng.uniform(-np.pi, np.pi, (n_copies, m.nq))
    try:
        from mujoco import rollout
    except ImportError:
        rollout = None
    if rollout is None and threads > 1:
        raise ImportError("mujoco.rollout is needed for threads > 1")

    if rollout is not None:
        spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
        x0 = np.empty((n_copies, mujoco.mj_stateSize(m, spec)))
        for i, q in enumerate(qpos0):
            mujoco.mj_resetData(m, d)
            d.qpos[:] = q
            mujoco.mj_getState(m, d, x0[i], spec)
        ctrl = np.zeros((n_copies, n_steps, m.nu))
        out = np.empty((n_copies, n_steps, x0.shape[1]))
        data = d if threads == 1 else datas

        def run():
            rollout.rollout(m, data, x0, ctrl, state=out)
        method = f"mujoco.rollout.rollout ({threads} MjData)"
    else:
        def run():
            for q in qpos0:
                mujoco.mj_resetData(m, d)
                d.qpos[:] = q
                for _ in range(n_steps):
                    mujoco.mj_step(m, d)
        method = "python loop of mujoco.mj_step"
    t0 = time.perf_counter()
    run()  # warm-up; a first run of over 1 s is the measurement
    times = [time.perf_counter() - t0]
    for _ in range(repeats if times[0] <= 1.0 else 0):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    times = times[1:] or times
    seconds = float(np.median(times))
    return {"steps_per_s": n_steps * n_copies / seconds, "seconds": seconds,
            "n_steps": n_steps, "n_copies": n_copies, "method": method}


def mjx_programs(masses, lengths, dt=1e-3):
    """MJX's batched rollout of the pendulum chain as a user writes it, in JAX's default float dtype (MJX computes
    in float64 once ``jax_enable_x64`` is on, whatever its inputs): ``run(q, qd, T)``, ``jax.vmap`` of a ``lax.scan``
    of ``mjx.step`` from the joint angles and rates ``q``, ``qd`` (B, n-1), returns the final (qpos, qvel);
    ``loss(q, qd, T)``, the sum of their squares."""
    import jax
    import jax.numpy as jnp
    from mujoco import mjx

    mx = mjx.put_model(_model(masses, lengths, dt=dt), impl="jax")

    def one(q, qd, T):
        d = mjx.make_data(mx, impl="jax").replace(qpos=q, qvel=qd)
        d = jax.lax.scan(lambda d, _: (mjx.step(mx, d), None), d, None, length=T)[0]
        return d.qpos, d.qvel

    def run(q, qd, T):
        return jax.vmap(lambda q, qd: one(q, qd, T))(q, qd)

    def loss(q, qd, T):
        qT, qdT = run(q, qd, T)
        return jnp.sum(qT ** 2) + jnp.sum(qdT ** 2)

    return run, loss


def mjx_qacc(masses, lengths, theta, theta_dot, tau):
    """Forward dynamics with mjx.forward: theta_ddot (n-1), in JAX's default float dtype."""
    import jax.numpy as jnp
    from mujoco import mjx

    mx = mjx.put_model(_model(masses, lengths), impl="jax")
    d = mjx.make_data(mx, impl="jax").replace(qpos=jnp.asarray(theta), qvel=jnp.asarray(theta_dot),
                                              ctrl=jnp.asarray(tau))
    return np.asarray(mjx.forward(mx, d).qacc)


def mjx_rollout_throughput(masses, lengths, n_steps, batch, dt=1e-3, seed=0):
    """MJX throughput of :func:`mjx_programs`'s rollout over a batch of random starts.

    compile_s is the lower+compile time; seconds is the wall time of the
    second run of the compiled function (block_until_ready). Uses JAX's
    default dtype (float32 unless jax_enable_x64 is set).
    """
    import jax

    run, _ = mjx_programs(masses, lengths, dt)
    q0 = jax.random.uniform(jax.random.PRNGKey(seed), (batch, len(lengths)), minval=-np.pi, maxval=np.pi)
    qd0 = 0.0 * q0
    t0 = time.perf_counter()
    fn = jax.jit(lambda q, qd: run(q, qd, n_steps)).lower(q0, qd0).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(fn(q0, qd0))
    t0 = time.perf_counter()
    jax.block_until_ready(fn(q0, qd0))
    seconds = time.perf_counter() - t0
    return {"steps_per_s": n_steps * batch / seconds, "compile_s": compile_s,
            "seconds": seconds, "batch": batch, "n_steps": n_steps}


# ---------------------------------------------------------------- closed forms

def _single_closed_form(m2, l1, theta, tau):
    return -(G / l1) * np.cos(theta[0]) + tau[0] / (m2 * l1 ** 2)


def _double_closed_form(masses, lengths, theta, theta_dot, tau):
    """Double pendulum (point masses m2, m3) in absolute angles -> theta_ddot.

    Lagrangian derivation with phi1 = theta1, phi2 = theta1 + theta2:
      (m2+m3) l1^2 a1 + m3 l1 l2 c a2 + m3 l1 l2 s w2^2 + (m2+m3) g l1 cos(phi1) = tau1 - tau2
      m3 l1 l2 c a1 + m3 l2^2 a2 - m3 l1 l2 s w1^2 + m3 g l2 cos(phi2)           = tau2
    with c = cos(phi1-phi2), s = sin(phi1-phi2), w = phi_dot, a = phi_ddot.
    """
    _, m2, m3 = masses
    l1, l2 = lengths
    p1, p2 = theta[0], theta[0] + theta[1]
    w1, w2 = theta_dot[0], theta_dot[0] + theta_dot[1]
    c, s = np.cos(p1 - p2), np.sin(p1 - p2)
    M = np.array([[(m2 + m3) * l1 ** 2, m3 * l1 * l2 * c],
                  [m3 * l1 * l2 * c, m3 * l2 ** 2]])
    bias = np.array([m3 * l1 * l2 * s * w2 ** 2 + (m2 + m3) * G * l1 * np.cos(p1),
                     -m3 * l1 * l2 * s * w1 ** 2 + m3 * G * l2 * np.cos(p2)])
    Q = np.array([tau[0] - tau[1], tau[1]])
    a1, a2 = np.linalg.solve(M, Q - bias)
    return np.array([a1, a2 - a1])


def _self_check():
    rng = np.random.default_rng(1)

    # (0) zero configuration is stretched along +x (MuJoCo x-z plane).
    m = _model([1, 1, 1], [0.7, 1.3])
    d = mujoco.MjData(m)
    mujoco.mj_kinematics(m, d)
    assert np.allclose(d.xipos[1:], [[0.7, 0, 0], [2.0, 0, 0]]), d.xipos
    # positive angle is counter-clockwise: link tip moves to +z (our +y).
    d.qpos[:] = [0.3, 0.0]
    mujoco.mj_kinematics(m, d)
    assert np.allclose(d.xipos[1], [0.7 * np.cos(0.3), 0, 0.7 * np.sin(0.3)])

    # (a) single pendulum.
    err_a = 0.0
    for _ in range(20):
        m2, l1 = rng.uniform(0.5, 2.0, 2)
        th, thd, tau = rng.uniform(-3, 3, (3, 1))
        got = mujoco_qacc([1.0, m2], [l1], th, thd, tau)
        err_a = max(err_a, abs(got[0] - _single_closed_form(m2, l1, th, tau)))
    # (a') the brief's exact case: masses [1, 1], lengths [1].
    for th in np.linspace(-np.pi, np.pi, 9):
        got = mujoco_qacc([1, 1], [1], [th], [0.5], [0.2])
        err_a = max(err_a, abs(got[0] - _single_closed_form(1, 1, [th], [0.2])))
    print(f"(a) n=2 single pendulum: max |qacc err| = {err_a:.3e}")

    # (b) double pendulum.
    err_b = 0.0
    for _ in range(50):
        masses = np.r_[1.0, rng.uniform(0.5, 2.0, 2)]
        lengths = rng.uniform(0.5, 2.0, 2)
        th, thd, tau = rng.uniform(-3, 3, (3, 2))
        got = mujoco_qacc(masses, lengths, th, thd, tau)
        ref = _double_closed_form(masses, lengths, th, thd, tau)
        err_b = max(err_b, np.abs(got - ref).max())
    print(f"(b) n=3 double pendulum: max |qacc err| = {err_b:.3e}")
    assert err_a < 1e-8 and err_b < 1e-8, (err_a, err_b)

    # (c) throughput, 5-link pendulum (n = 6 points).
    masses, lengths = [1.0] * 6, [1.0] * 5
    t0 = time.perf_counter()
    r = mujoco_rollout_throughput(masses, lengths, n_steps=1000, n_copies=1000)
    print(f"(c) MuJoCo C [{r['method']}]: {r['n_copies']} copies x "
          f"{r['n_steps']} steps in {r['seconds']:.3f} s -> "
          f"{r['steps_per_s']:.3e} steps/s (wall incl. setup "
          f"{time.perf_counter() - t0:.2f} s)")
    t0 = time.perf_counter()
    r = mjx_rollout_throughput(masses, lengths, n_steps=200, batch=256)
    print(f"(c) MJX: batch {r['batch']} x {r['n_steps']} steps in "
          f"{r['seconds']:.3f} s -> {r['steps_per_s']:.3e} steps/s, "
          f"compile {r['compile_s']:.2f} s (wall incl. setup "
          f"{time.perf_counter() - t0:.2f} s)")
    print("self-check passed")


if __name__ == "__main__":
    _self_check()
