"""Model building, bad input, joint-space views and sensitivities."""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc
from diffchain import systems
from diffchain._model import forces as _forces


@pytest.mark.parametrize("kwargs, match", [
    (dict(m=[1.0, -1.0], l=[1.0]), "m must be positive"),
    (dict(m=[1.0, 0.0], l=[1.0]), "m must be positive"),
    (dict(m=[1.0, np.nan], l=[1.0]), "m must be finite"),
    (dict(m=[1.0, 1.0], l=[0.0]), "l must be positive"),
    (dict(m=[1.0, 1.0], l=[np.inf]), "l must be finite"),
    (dict(m=[1.0, 1.0], l=[1.0, 1.0]), r"lengths l must have shape \(n-1,\)"),
    (dict(m=[[1.0, 1.0]], l=[1.0]), "1-D array"),
    (dict(m=[1.0, 1.0], l=[1.0], guided=[True]), "guided must have one flag per point"),
    (dict(m=[1.0, 1.0], l=[1.0], k_omega=-1.0), "k_omega must be finite and non-negative"),
    (dict(m=[1.0, 1.0], l=[1.0], slider=[True, False], s=[[0.0, 2.0], [0, 1]]), "unit vectors"),
])
def test_bad_chains_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dc.Chain(**kwargs)


def test_bad_states_and_controls_are_rejected():
    chain = dc.pendulum(2)
    with pytest.raises(ValueError, match="v must have the shape of x"):
        dc.State(jnp.zeros((3, 2)), jnp.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"F must have shape \(\.\.\., P, 2\)"):
        dc.Control(tau=jnp.zeros(3), F=jnp.zeros((3, 3)))
    with pytest.raises(ValueError, match="theta must have shape"):
        dc.from_joint_angles(chain, jnp.zeros(3))
    with pytest.raises(ValueError, match="x must have shape"):
        dc.check_state(chain, dc.State(jnp.zeros((5, 2))))
    with pytest.raises(ValueError, match="needs n_steps"):
        dc.rollout(chain, dc.from_joint_angles(chain, jnp.zeros(2)), lambda s: dc.Control(n=3), 1e-3)
    state = dc.from_joint_angles(chain, jnp.zeros(2))
    for call, who in ((lambda u: dc.forward_dynamics(chain, state, u), "forward_dynamics"),
                      (lambda u: dc.step(chain, state, u, 1e-3), "step"),
                      (lambda u: dc.rollout(chain, state, jax.tree.map(lambda a: jnp.zeros((5,) + a.shape), u), 1e-3),
                       "rollout"),
                      (lambda u: dc.event_step(chain, dc.Events(3), dc.EventState(state), u, 1e-3), "event_step")):
        with pytest.raises(ValueError, match=who + r": the control has tau of shape .*n = 3 points"):
            call(dc.Control(n=4))
        with pytest.raises(ValueError, match=who + r": the control has F of shape \(.*2, 2\), the chain has n = 3"):
            call(dc.Control(tau=jnp.zeros(3), F=jnp.zeros((2, 2))))
    for call, who in ((lambda s: dc.forward_dynamics(chain, s), "forward_dynamics"),
                      (lambda s: dc.step(chain, s, dc.Control(n=3), 1e-3), "step"),
                      (lambda s: dc.rollout(chain, s, None, 1e-3, n_steps=2), "rollout")):
        with pytest.raises(ValueError, match=who + r": the state has x of shape \(4, 2\)"):
            call(dc.State(jnp.zeros((4, 2))))


def test_checked_forward_dynamics_raises_on_non_finite_accelerations():
    """check=True: accelerations that are not finite raise (now, and when the program runs under jit), a failed
    solve, not bad input: a finite state whose tip moves at 1e200 m/s (its centripetal acceleration v^2 / l
    overflows). A state holding NaN is bad input, refused by default; with check=False the accelerations are returned
    as they are."""
    chain = dc.pendulum(2)
    fast = dc.State(jnp.array([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]]), jnp.array([[0.0, 0.0], [0.0, 0.0], [0.0, 1e200]]))
    assert not np.all(np.isfinite(dc.forward_dynamics(chain, fast)))
    for call in (dc.forward_dynamics, jax.jit(dc.forward_dynamics, static_argnames="check")):
        with pytest.raises(Exception, match="forward_dynamics: non-finite numbers in the solution") as info:
            jax.block_until_ready(call(chain, fast, check=True))
        assert not isinstance(info.value, dc.InputError)
    bad = dc.State(jnp.array([[0.0, 0.0], [1.0, 0.0], [jnp.nan, 0.0]]))
    assert not np.all(np.isfinite(dc.forward_dynamics(chain, bad, check=False)))
    for check in (None, True):
        with pytest.raises(dc.InputError, match="forward_dynamics: the state must be finite"):
            dc.forward_dynamics(chain, bad, check=check)


def test_control_sequences_take_their_leading_axes():
    u = dc.Control(tau=jnp.ones((7, 4)))
    assert u.F is None and u.a_w.shape == (7, 4, 2)  # (no point forces unless given)
    mixed = dc.Control(tau=jnp.zeros(4, jnp.float32), F=np.zeros((4, 2)))  # the first given part sets the dtype
    assert mixed.tau.dtype == mixed.F.dtype == mixed.a_w.dtype == jnp.float32
    assert dc.Control(tau=jnp.ones((7, 1)), F=jnp.ones((7, 6, 2))).a_w.shape == (7, 1, 2)  # (a mechanism's P points)
    with pytest.raises(ValueError, match=r"F must have shape \(\.\.\., P, 2\) with tau's leading axes \(7,\)"):
        dc.Control(tau=jnp.ones((7, 4)), F=jnp.ones((6, 4, 2)))
    assert dc.Control(F=jnp.ones((3, 5, 4, 2))).tau.shape == (3, 5, 4)


def test_off_manifold_state_raises_also_under_jit():
    chain = dc.pendulum(2)
    good = dc.from_joint_angles(chain, jnp.array([0.3, -0.2]), jnp.array([1.0, 2.0]))
    check = jax.jit(dc.check_state)
    check(chain, good)
    stretched = dc.State(good.x.at[2].add(0.01), good.v)
    with pytest.raises(Exception, match="off the constraint manifold"):
        check(chain, stretched)
    bad_velocity = dc.State(good.x, good.v.at[2].add(good.x[2] - good.x[1]))  # stretches rod 2
    with pytest.raises(Exception, match="velocities violate the constraints"):
        check(chain, bad_velocity)
    with pytest.raises(Exception, match="NaN"):
        check(chain, dc.State(good.x.at[1, 0].set(jnp.nan), good.v))


def test_rollout_validates_its_start():
    """``rollout`` refuses a start off the constraints (from which the drift correction may drive the chain through a
    singular pose), unless told not to; a rod between two guided points is switched off and may have any length."""
    chain = dc.pendulum(2)
    good = dc.from_joint_angles(chain, jnp.array([0.3, -0.2]), jnp.array([1.0, 2.0]))
    stretched = dc.State(good.x.at[2].add(0.01), good.v)
    run = jax.jit(lambda s, check: dc.rollout(chain, s, None, 1e-3, n_steps=5, check=check)[0], static_argnums=1)
    with pytest.raises(Exception, match="off the constraint manifold"):
        run(stretched, True)
    assert bool(jnp.all(jnp.isfinite(run(stretched, False).x)))
    both_ends = dc.Chain(jnp.ones(3), jnp.ones(2), guided=[True, True, False])
    apart = dc.State(jnp.array([[0.0, 0.0], [3.0, 0.0], [3.0, -1.0]]), jnp.array([[0.0, 0.0], [0.0, 1.0], [0.0, 1.0]]))
    dc.check_state(both_ends, apart)  # rod 1 is off: its length 3 != 1 and its stretch rate are not violations
    with pytest.raises(Exception, match="off the constraint manifold"):
        dc.check_state(both_ends, dc.State(apart.x.at[2, 1].set(-2.0), apart.v))


@pytest.mark.slow
def test_entry_points_called_eagerly_compile_once():
    """Called eagerly, an entry point runs as one compiled program: a second call with new values of the same shapes
    compiles nothing (run op by op, each call would trace and compile its loops again) and gives what the same call
    gives inside a user's jit; a failed run-time check still raises the plain ValueError."""
    chain = dc.pendulum(3, mass=[1.0, 0.8, 0.5], length=[1.0, 0.8, 0.6])

    def calls(theta):
        state = dc.from_joint_angles(chain, theta)
        tau = jnp.append(theta, 0.0)  # (a torque per point)
        return (state, dc.forward_dynamics(chain, state, dc.Control(tau=tau)),
                dc.rollout(chain, state, dc.Control(tau=jnp.ones((5, 4)) * tau), 1e-3)[0])

    calls(jnp.array([0.1, 0.2, 0.3]))
    compiles = []

    def listen(event, duration, **_):
        if event.endswith("backend_compile_duration"):
            compiles.append(duration)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        out = calls(jnp.array([0.3, -0.4, 0.5]))
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert compiles == []
    inside = jax.jit(calls)(jnp.array([0.3, -0.4, 0.5]))
    for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(inside)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
    stretched = dc.State(out[0].x.at[2].add(0.01), out[0].v)
    with pytest.raises(ValueError, match="^check_state: the state is off the constraint manifold"):
        dc.rollout(chain, stretched, None, 1e-3, n_steps=3)
    # a numpy integer is the Python int it holds (a static argument), as a numpy bool is the bool
    final = dc.rollout(chain, out[0], dc.Control(tau=jnp.zeros((5, 4))), 1e-3)[0]
    np.testing.assert_allclose(dc.rollout(chain, out[0], None, 1e-3, n_steps=np.int64(5))[0].x, final.x, rtol=1e-12)
    with pytest.raises(TypeError, match="n_steps must be an int >= 0, got True"):
        dc.rollout(chain, out[0], None, 1e-3, n_steps=np.bool_(True))

    @dataclasses.dataclass
    class Damper:  # a policy that cannot be hashed (a dataclass with __eq__): run op by op
        gain: float

        def __call__(self, s):
            return dc.Control(tau=-self.gain * dc.joint_velocities(s))

    damped = jax.jit(lambda s: dc.rollout(chain, s, lambda q: Damper(0.5)(q), 1e-3, n_steps=5)[0].x)(out[0])
    np.testing.assert_allclose(dc.rollout(chain, out[0], Damper(0.5), 1e-3, n_steps=5)[0].x, damped, rtol=1e-12)


@pytest.mark.slow
def test_unchecked_programs_have_no_host_callbacks():
    """JAX's persistent compilation cache refuses programs with host callbacks. The start checks are such callbacks
    (``eqx.error_if``); with ``check=False`` the rollouts, their gradients and event rollouts must contain none, so
    that the cache can keep them (README, "Compiling once across runs")."""
    chain = dc.pendulum(2)
    s0 = dc.from_joint_angles(chain, jnp.array([0.3, -0.2]), jnp.array([1.0, 2.0]))
    events = dc.Events(chain.n, ground=-5.0, theta_min=-2.0, theta_max=2.0)

    def roll(s, check):
        return dc.rollout(chain, s, None, 1e-3, n_steps=3, check=check)[0].x.sum()

    def drop(s, check):
        return dc.event_rollout(chain, events, dc.EventState(s), None, 1e-3, n_steps=2, check=check)[0].x.sum()

    def callbacks(f):
        return [p for p in ("pure_callback", "io_callback", "debug_callback") if p in str(jax.make_jaxpr(f)(s0))]

    for f in (roll, drop):
        assert callbacks(lambda s: f(s, True))  # the detection sees the checks ...
        assert not callbacks(lambda s: f(s, False))  # ... and nothing else is a callback
        assert not callbacks(jax.grad(lambda s: f(s, False)))


def test_joint_space_round_trip_and_rates():
    """from_joint_angles -> joint_angles / joint_velocities is the identity; d theta/dt equals omega^z (finite
    differences along the exact kinematic motion)."""
    rng = np.random.default_rng(0)
    chain = dc.free_chain(5, length=rng.uniform(0.5, 2, 5))
    theta, theta_dot = rng.uniform(-3, 3, 5), rng.normal(size=5)
    state = dc.from_joint_angles(chain, theta, theta_dot, base=[1.0, 2.0])
    np.testing.assert_allclose(dc.joint_angles(state), theta, atol=1e-12)
    np.testing.assert_allclose(dc.joint_velocities(state)[:-1], theta_dot, atol=1e-12)
    np.testing.assert_allclose(dc.check_state(chain, state).x, state.x)
    h = 1e-6
    s_plus = dc.from_joint_angles(chain, theta + h * theta_dot, base=[1.0, 2.0])
    s_minus = dc.from_joint_angles(chain, theta - h * theta_dot, base=[1.0, 2.0])
    np.testing.assert_allclose((s_plus.x - s_minus.x) / (2 * h), state.v, atol=1e-8)


def test_torque_forces_do_the_work_of_the_torques():
    """Virtual power: sum_i F_i . v_i of the seed's torque forces (§4.2) equals sum_i tau_i omega_i^z, and the forces
    have zero resultant (the torques are internal or act against the world through point 1)."""
    rng = np.random.default_rng(1)
    chain = dc.free_chain(6)
    state = dc.from_joint_angles(chain, rng.uniform(-3, 3, 6), rng.normal(size=6), base_velocity=rng.normal(size=2))
    tau = jnp.asarray(rng.normal(size=7))
    F = _forces.torque_forces(state.x, tau)
    np.testing.assert_allclose(jnp.sum(F * state.v), jnp.sum(tau * dc.joint_velocities(state)), rtol=1e-12)
    np.testing.assert_allclose(jnp.sum(F, 0), 0.0, atol=1e-12)


def test_joint_damping_and_drag_dissipate():
    chain = dc.pendulum(3, k_omega=0.3, k_v=0.2)
    state = dc.from_joint_angles(chain, jnp.array([0.1, 1.0, -0.5]), jnp.array([2.0, -1.0, 3.0]))
    tau_d = _forces.damping_torques(chain, state)
    F_d = _forces.drag_forces(chain, state)
    assert float(jnp.sum(tau_d * dc.joint_velocities(state))) < 0
    assert float(jnp.sum(F_d * state.v)) < 0


def _equations(jaxpr):
    """The number of equations of a jaxpr, those of its inner jaxprs (jit, scan, cond, custom rules) included."""
    count = 0
    for eqn in jaxpr.eqns:
        count += 1
        for p in eqn.params.values():
            for q in p if isinstance(p, (tuple, list)) else (p,):
                inner = getattr(q, "jaxpr", q)
                if hasattr(inner, "eqns"):
                    count += _equations(inner)
    return count


def test_absent_dampers_and_drag_are_not_computed():
    """A chain built without k_omega and k_v has no dampers and no drag: it moves as one with zero coefficients, to
    round-off with every solver, and its accelerations' program holds fewer operations (nothing of the two is
    computed). A coefficient given, even 0.0, is a parameter (its derivative exists)."""
    same = functools.partial(np.testing.assert_allclose, rtol=1e-14, atol=1e-14)
    bare, zero = dc.pendulum(3), dc.pendulum(3, k_omega=0.0, k_v=0.0)
    assert bare.damper_idx.shape[0] == 0 and bare.k_v is None and zero.damper_c.shape == (4,)
    state = dc.from_joint_angles(bare, jnp.array([0.3, 0.9, -0.7]), jnp.array([1.0, -2.0, 0.5]))
    u = dc.Control(tau=jnp.array([0.0, 0.4, -0.3, 0.2]))
    for solver in (dc.Recursive(), dc.Banded(), dc.KKT()):
        same(dc.forward_dynamics(bare, state, u, solver=solver), dc.forward_dynamics(zero, state, u, solver=solver))
    same(dc.rollout(bare, state, None, 1e-3, n_steps=50)[0].x, dc.rollout(zero, state, None, 1e-3, n_steps=50)[0].x)
    size = lambda chain: _equations(jax.make_jaxpr(  # noqa: E731
        lambda s: dc.forward_dynamics(chain, s, u, check=False))(state).jaxpr)
    assert size(bare) < size(zero)
    np.testing.assert_array_equal(bare.k_omega, jnp.zeros(4))
    grad = jax.grad(lambda c: jnp.sum(dc.forward_dynamics(c, state, u) ** 2), allow_int=True)(zero)
    assert float(jnp.max(jnp.abs(grad.k_v))) > 0  # drag is zero here, its derivative is not (v != 0)


@pytest.mark.slow
def test_dalpha_dtau_forward_reverse_and_affinity():
    """Seed §8.1: d alpha/d tau by jacfwd equals jacrev, and alpha is affine in tau: alpha(tau) = alpha(0) + J tau,
    so the torques producing a prescribed alpha at chosen joints solve one linear system (seed §8.2)."""
    rng = np.random.default_rng(2)
    chain = dc.pendulum(4)
    state = dc.from_joint_angles(chain, rng.uniform(-2, 2, 4), rng.normal(size=4))
    J = dc.dalpha_dtau(chain, state, mode="fwd")
    np.testing.assert_allclose(J, dc.dalpha_dtau(chain, state, mode="rev"), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(J, dc.dalpha_dtau(chain, state, solver=dc.KKT()), rtol=1e-9, atol=1e-10)
    alpha = lambda tau: dc.joint_accelerations(state, dc.forward_dynamics(chain, state, dc.Control(tau=tau)))
    tau = jnp.asarray(rng.normal(size=5))
    np.testing.assert_allclose(alpha(tau), alpha(jnp.zeros(5)) + J @ tau, rtol=1e-10, atol=1e-10)
    # seed §8.2: actuate joints 1..4 so that alpha_1..4 = target (joint 5 is the free tip: tau_5 = 0)
    target = jnp.array([1.0, -2.0, 0.5, 0.0])
    tau_w = jnp.linalg.solve(J[:4, :4], target - alpha(jnp.zeros(5))[:4])
    np.testing.assert_allclose(alpha(jnp.append(tau_w, 0.0))[:4], target, atol=1e-9)


@pytest.mark.slow
def test_vmap_over_models_and_states():
    """One compiled step serves a batch of different models and states; each equals its own unbatched result."""
    rng = np.random.default_rng(3)
    masses, lengths = rng.uniform(0.5, 2, (8, 3)), rng.uniform(0.5, 2, (8, 3))
    thetas = rng.uniform(-2, 2, (8, 3))

    def one(m, l, th):
        chain = dc.pendulum(3, mass=m, length=l)
        return dc.step(chain, dc.from_joint_angles(chain, th), dc.Control(n=4), 1e-3).x

    batched = jax.jit(jax.vmap(one))(masses, lengths, thetas)
    for k in range(8):
        np.testing.assert_allclose(batched[k], one(masses[k], lengths[k], thetas[k]), rtol=1e-12, atol=1e-12)


def test_float32_runs():
    chain = dc.pendulum(3, mass=jnp.ones(3, jnp.float32), length=jnp.ones(3, jnp.float32))
    state = dc.from_joint_angles(chain, jnp.array([0.3, 0.2, 0.1], jnp.float32))
    a = dc.forward_dynamics(chain, state, dc.Control(n=4, dtype=jnp.float32))
    assert a.dtype == jnp.float32
    a64 = dc.forward_dynamics(dc.pendulum(3), dc.from_joint_angles(dc.pendulum(3), jnp.array([0.3, 0.2, 0.1])))
    np.testing.assert_allclose(a, a64, rtol=1e-4, atol=1e-4)


def test_scalar_joint_damping_dissipates_exactly_at_the_joints():
    """A scalar k_omega damps joints 1..n-1: dE/dt = -k sum_{i<n} (omega_i^z)^2 (joint n has no outgoing link)."""
    chain = dc.pendulum(2, k_omega=0.1)
    state = dc.from_joint_angles(chain, jnp.array([0.3, 1.0]), jnp.array([1.5, -2.0]))
    a = dc.forward_dynamics(chain, state)
    dE = float(jnp.sum(chain.m[:, None] * state.v * a) + chain.g * jnp.sum(chain.m * state.v[:, 1]))
    omega = dc.joint_velocities(state)
    np.testing.assert_allclose(dE, -0.1 * float(jnp.sum(omega[:-1] ** 2)), rtol=1e-12)


@pytest.mark.slow
def test_chains_and_mechanisms_are_one_model():
    """A chain and a mechanism are the same pytree type, dc.Model; a chain's arrays are its catalogue kinds (rods as
    distance rows, links as bodies, joint torques and damping as a motor and a damper at every joint): its energy is
    the points' and links' energy written out by hand, and the general formulas of gravity, motors, dampers and drag
    (by automatic differentiation) give the chain's closed-form point forces."""
    chain = dc.pendulum(3, mass=[1.0, 2.0, 0.5], length=[1.0, 0.6, 0.8], k_omega=0.2, k_v=0.3, link_mass=[0.3, 0.5, 0.2],
                        link_com=[[0.4, 0.1], [0.3, -0.05], [0.5, 0.0]], link_inertia=[0.02, 0.01, 0.03])
    mech, mstart = systems.four_bar()
    assert type(chain) is type(mech) is dc.Model
    assert chain.l is chain.dist.L and chain.k_omega is chain.damper_c and chain.link_mass is chain.bodies.mass
    np.testing.assert_array_equal(chain.motor_idx, [[-2, -1, 0, 1], [0, 1, 1, 2], [1, 2, 2, 3], [2, 3, -2, -1]])
    state = dc.from_joint_angles(chain, [0.4, -0.3, 1.1], [0.5, -1.0, 2.0])
    traj = jax.tree.map(lambda a, b: jnp.stack([a, b]), state, dc.from_joint_angles(chain, [1.0, 0.2, -0.7], [2, 0, 1]))
    assert chain.serial and not mech.serial

    def energy(s):  # the points' and the links' (centre of mass and rotation) kinetic and potential energy, by hand
        x, v, g = s.x, s.v, chain.g
        E = 0.5 * jnp.sum(chain.m * jnp.sum(v**2, -1)) + g * jnp.sum(chain.m * x[:, 1])
        for k in range(3):
            d, dd = x[k + 1] - x[k], v[k + 1] - v[k]
            e, l = d / jnp.linalg.norm(d), jnp.linalg.norm(d)
            a, b = chain.bodies.com[k]
            com = x[k] + a * e + b * jnp.array([-e[1], e[0]])
            omega = (d[0] * dd[1] - d[1] * dd[0]) / l**2
            e_dot = omega * jnp.array([-e[1], e[0]])
            v_com = v[k] + a * e_dot + b * jnp.array([-e_dot[1], e_dot[0]])
            mu, J = chain.bodies.mass[k], chain.bodies.inertia[k]
            E += 0.5 * mu * v_com @ v_com + 0.5 * J * omega**2 + mu * g * com[1]
        return E

    np.testing.assert_allclose(dc.energy(chain, state), energy(state), rtol=1e-13)
    np.testing.assert_allclose(dc.energy(chain, traj), [energy(jax.tree.map(lambda a: a[i], traj)) for i in range(2)],
                               rtol=1e-13)
    # M a = F^e + J^T lambda: the chain's external forces, links' weight included, are the general gravity forces
    F = _forces.external_forces(chain, dc.State(state.x, 0 * state.v), dc.Control(tau=jnp.zeros(4)))
    np.testing.assert_allclose(chain.f_g, F.reshape(-1), rtol=1e-13, atol=1e-13)
    # and the motors', dampers' and drag's generalized forces are the chain's torques, damping and drag
    tau = jnp.array([0.3, -0.2, 0.5, 0.1])
    F = _forces.external_forces(chain, state, dc.Control(tau=tau))
    Q = chain.applied_forces(state.x.reshape(-1), state.v.reshape(-1), 0.0, tau)
    np.testing.assert_allclose(Q, F.reshape(-1), rtol=1e-12, atol=1e-12)
    # a mechanism's energy takes a trajectory too
    moving = dc.State(mstart.x, jnp.array([[0.3, -0.2], [0.1, 0.5]]))
    mtraj = jax.tree.map(lambda a, b: jnp.stack([a, b]), mstart, moving)
    np.testing.assert_allclose(dc.energy(mech, mtraj), [mech.energy(mstart), mech.energy(moving)], rtol=1e-13)
