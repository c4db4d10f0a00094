"""Failure is never silent: runs that are not finite, leave their constraints, pass singular configurations or use up
their event budgets are reported by :func:`diffchain.diagnose` and, for the first two, raised by the rollouts'
default ``check=True``. Every failure comes from a real scenario and is checked against something computed
independently: the run's own values (NaN, rod lengths and loop closure recomputed with numpy from the positions),
the N-four-bar's closed-form geometry (a parallelogram: every crank at the same angle, singular where the cranks lie
along the frame) and its one-degree-of-freedom equation of motion; good runs raise nothing and report ok.
"""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc

ERRORS = (ValueError, jax.errors.JaxRuntimeError)


def first(bad):
    bad = np.asarray(bad)
    return int(np.argmax(bad)) if bad.any() else -1


def first_lines(error, k=4):
    return "\n".join(str(error).splitlines()[:k])


# ---------------------------------------------------------------------------------------------------------------------
# chains
ARM = dc.pendulum(5, mass=1.0, length=1.0)                       # the demo's 5-link pendulum (python -m diffchain demo)
ARM_S0 = dc.from_joint_angles(ARM, jnp.array([0.3, 0.9, -0.7, 0.5, 0.4]))
SEED_STEPS = 10_000                                              # 10 s at dt = 1e-3


@pytest.fixture(scope="module")
def seed_run():
    """SeedQuantum (the seed's constant-acceleration quantum) gains energy on the chaotic pendulum until the state is
    not finite (issue 31: NaN at t = 8-19 s)."""
    run = jax.jit(lambda s: dc.rollout(ARM, s, None, 1e-3, n_steps=SEED_STEPS, integrator=dc.SeedQuantum(),
                                       check=False))
    final, traj = run(ARM_S0)
    return traj, dc.diagnose(ARM, traj)


def test_seed_quantum_divergence_is_reported_against_the_rod_lengths(seed_run):
    traj, report = seed_run
    x, v = np.asarray(traj.x), np.asarray(traj.v)
    finite = np.isfinite(x).all(axis=(1, 2)) & np.isfinite(v).all(axis=(1, 2))
    assert not finite.all() and int(report.first_nonfinite) == first(~finite) and not bool(report.finite)
    # rod lengths and stretch rates recomputed from the positions, against the report's tolerance (1e-2 of a rod)
    d, dv = np.diff(x, axis=1), np.diff(v, axis=1)
    rho = np.linalg.norm(d, axis=-1)
    err = np.abs(rho - 1.0).max(-1)
    rate = np.abs(np.sum(d / rho[..., None] * dv, -1)).max(-1)
    size, speed = np.abs(x).max((1, 2)), np.abs(v).max((1, 2))
    eps = np.finfo(np.float64).eps
    pos_tol = 1e-2 + 8 * eps * 6 * size
    rate_tol = 1.0 * (1 + speed) + 8 * eps * 6 * speed * (1 + size)
    with np.errstate(invalid="ignore"):
        over = (err > pos_tol) | (rate > rate_tol)
    k = first(over)   # (the report measures the rods to first order in their error: the same step, or the next)
    assert 0 < k < first(~finite) and abs(int(report.first_violation) - k) <= 1
    k = int(report.first_violation)
    assert int(report.first_bad) == k and err[k] > 0.99 * pos_tol[k] and err[k - 1] < 1.01 * pos_tol[k - 1]
    assert not bool(report.ok) and "FAILED" in report.summary()
    energy = np.asarray(dc.energy(ARM, traj))
    assert energy[k] > 2 * energy[0] > 0                           # by then it has more than doubled its energy
    sound = first(np.abs(energy - energy[0]) > 0.01 * energy[0])    # no alarm while within 1 % of its energy
    assert 500 < sound < k


def test_rollout_raises_inside_jit_and_step_outside(seed_run):
    """The rollout checks its final state: a run that ends with its rods 3x the tolerance off raises, one that ends
    at 0.3x does not (rod lengths from the positions of an unchecked run; at dt = 1e-2, where the seed quantum leaves
    its rods within 1.1 s, before round-off differences between programs have grown), and a run that ends not finite
    says so. The message names the time, the error and the tolerance, and how to get the report or go on: first in
    the JaxRuntimeError under jax.jit; a plain ValueError from dc.step (which checks its new state) outside."""
    traj, report = seed_run
    k = int(report.first_violation)
    run = jax.jit(lambda s, dt, n, check=True: dc.rollout(ARM, s, None, dt, n_steps=n, integrator=dc.SeedQuantum(),
                                                          check=check), static_argnums=(2, 3))
    _, fast = run(ARM_S0, 1e-2, 200, False)
    err = np.abs(np.linalg.norm(np.diff(np.asarray(fast.x), axis=1), axis=-1) - 1.0).max(-1)
    quiet, loud = first(err > 0.3e-2), first(err > 3e-2) + 1  # runs of these many steps end at 0.3x and 3x
    assert 0 < quiet < loud < 200 and np.isfinite(err[loud - 1])
    jax.block_until_ready(run(ARM_S0, 1e-2, quiet))
    with pytest.raises(ERRORS) as info:
        jax.block_until_ready(run(ARM_S0, 1e-2, loud))
    phrase = (rf"rollout: the run ends off its constraints \(t = {float(fast.t[loud - 1]):.6g}\): the rod-length / "
              r"slider-line error is ([0-9.e+-]+) \(tolerance ([0-9.e+-]+)\)")
    found = re.search(phrase, first_lines(info.value))
    assert found and float(found.group(1)) > float(found.group(2)) >= 1e-2, first_lines(info.value)
    assert "check=False" in str(info.value) and "dc.diagnose(model, trajectory)" in str(info.value)
    with pytest.raises(ERRORS) as info:
        jax.block_until_ready(run(ARM_S0, 1e-3, SEED_STEPS))
    assert "rollout: the run ends in a state that is not finite (t = 10)" in first_lines(info.value)
    before = jax.tree_util.tree_map(lambda a: a[k - 1], traj)
    with pytest.raises(ValueError, match=r"^step: the new state is off the constraints \(t = [0-9.]+\): the rod-length "
                                         r"/ slider-line error is [0-9.e+-]+ \(tolerance 0.01\)"):
        dc.step(ARM, before, dc.Control(n=6), 1e-3, integrator=dc.SeedQuantum())


@pytest.mark.slow
def test_nonfinite_control_of_a_policy_is_named_before_anything_else():
    """A feedback law with a bug (the log of the tip's height over a level it falls below) returns NaN torques: the
    run is NaN from the step after the first state below that level on, and the check says "not finite"."""
    chain = dc.pendulum(3)
    s0 = dc.from_joint_angles(chain, jnp.array([0.3, 0.2, 0.1]))
    level = -2.0

    def policy(s):
        return dc.Control(tau=jnp.zeros(4).at[1].set(0.01 * jnp.log(s.x[-1, 1] - level)))

    def run(check):
        return jax.jit(lambda s: dc.rollout(chain, s, policy, 1e-3, n_steps=1500, integrator=dc.RK4(), check=check))
    final, traj = run(False)(s0)
    report = dc.diagnose(chain, traj)
    below = np.asarray(traj.x[:, -1, 1]) < level
    k = first(~np.isfinite(np.asarray(traj.x)).all(axis=(1, 2)))
    assert k > 0 and k == first(below) + 1 and int(report.first_nonfinite) == k and int(report.first_violation) == -1
    with pytest.raises(ERRORS) as info:
        jax.block_until_ready(run(True)(s0))
    assert f"rollout: the run ends in a state that is not finite (t = {1500e-3:.6g})" in first_lines(info.value)


@pytest.mark.slow
@pytest.mark.full_opt  # (bit for bit: compiled as users' code, tests/conftest.py)
def test_good_runs_report_ok_and_check_false_changes_nothing():
    """The default integrator keeps the rods to round-off: no alarm; check=True and check=False give the same bits,
    also with the batched PointMajor backend (tests/package/test_validation.py compares gradients with and without the
    checks)."""
    small = dc.pendulum(3)
    s0 = dc.from_joint_angles(small, jnp.array([0.3, 0.9, -0.7]))
    roll = lambda check: jax.jit(lambda s: dc.rollout(small, s, None, 1e-3, n_steps=400, check=check))  # noqa: E731
    (f1, t1), (f0, t0) = roll(True)(s0), roll(False)(s0)
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves((f1, t1)),
                                                    jax.tree_util.tree_leaves((f0, t0))))
    report = dc.diagnose(small, t1)
    assert bool(report.ok) and report.summary() == "ok" and float(report.violation) < 1e-12

    thetas = jnp.array([[0.3, 0.9, -0.7], [0.0, 0.0, 0.0], [-1.0, 0.5, 0.2]])
    batch = lambda check: jax.jit(jax.vmap(lambda th: dc.rollout(  # noqa: E731
        small, dc.from_joint_angles(small, th), None, 1e-3, n_steps=20, integrator=dc.RK4(), backend=dc.PointMajor(),
        check=check)))
    (b1, bt1), (b0, bt0) = batch(True)(thetas), batch(False)(thetas)
    assert np.array_equal(b1.x, b0.x) and np.array_equal(bt1.x, bt0.x)
    reports = jax.vmap(lambda tr: dc.diagnose(small, tr))(bt1)
    assert np.asarray(reports.ok).all() and reports.summary().startswith("a batch of 3 runs: 0 failed")


def test_batch_names_the_failing_element():
    """Under vmap the check names the bad element; vmap of diagnose gives one report per element."""
    thetas = jnp.stack([jnp.zeros(5), jnp.array([0.3, 0.9, -0.7, 0.5, 0.4])])   # hanging at rest: stays there

    def run(th, check):
        return dc.rollout(ARM, dc.from_joint_angles(ARM, th), None, 1e-3, n_steps=SEED_STEPS,
                          integrator=dc.SeedQuantum(), check=check)

    _, traj = jax.jit(jax.vmap(lambda th: run(th, False)))(thetas)
    reports = jax.jit(jax.vmap(lambda tr: dc.diagnose(ARM, tr)))(traj)
    assert np.asarray(reports.ok).tolist() == [True, False] and reports[0].summary() == "ok"
    with pytest.raises(ERRORS, match=r"batch element 1"):
        jax.block_until_ready(jax.jit(jax.vmap(lambda th: run(th, True)))(thetas))


# ---------------------------------------------------------------------------------------------------------------------
# the IFToMM N-four-bar (cranks of 1 m on a frame of unit spacing, joined by couplers of 1 m; uniform bars of 1 kg):
# a parallelogram with one degree of freedom, singular where the cranks lie along the frame (theta = 0, pi)
N_CRANKS = 5


def n_four_bar(n=N_CRANKS):
    mb = dc.MechanismBuilder(g=9.81)
    for i in range(n):
        mb.ground(f"G{i}", (float(i), 0.0)), mb.point(f"B{i}", (float(i), 1.0))
        mb.body(f"crank{i}", f"G{i}", f"B{i}", mass=1.0, inertia=1 / 12, length=1.0)
    for i in range(n - 1):
        mb.body(f"coupler{i}", f"B{i}", f"B{i + 1}", mass=1.0, inertia=1 / 12, length=1.0)
    mech, s = mb.build()
    return mech, dc.State(s.x, jnp.tile(jnp.array([1.0, 0.0]), (n, 1)), 0.0)   # cranks up, tips at 1 m/s


def crank_angle_reference(times, n=N_CRANKS, h=1e-4):
    """theta(t) of the one-degree-of-freedom equation I theta'' = -k cos(theta) (cranks I = 1/3 about the pivot,
    couplers translating: I = n/3 + n - 1, k = g (n/2 + n - 1)), by RK4 at h = 1e-4, sampled at ``times``."""
    inertia, k = n / 3 + n - 1, 9.81 * (n / 2 + n - 1)

    def f(y):
        return jnp.array([y[1], -k * jnp.cos(y[0]) / inertia])

    def rk4(y, _):
        k1 = f(y)
        k2 = f(y + 0.5 * h * k1)
        k3 = f(y + 0.5 * h * k2)
        k4 = f(y + h * k3)
        y = y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        return y, y[0]

    steps = int(round(float(times[-1]) / h))
    _, th = jax.lax.scan(rk4, jnp.array([np.pi / 2, -1.0]), None, length=steps)
    return np.interp(np.asarray(times), h * np.arange(1, steps + 1), np.asarray(th))


def crank_angles(x):
    return np.unwrap(np.arctan2(x[..., 1], x[..., 0] - np.arange(x.shape[-2])), axis=0)


def loop_closure(x):
    """|Phi| recomputed from the points: crank lengths |B_i - G_i| - 1 and coupler lengths |B_i+1 - B_i| - 1."""
    cranks = np.abs(np.linalg.norm(x - np.stack([np.arange(x.shape[-2]), np.zeros(x.shape[-2])], -1), axis=-1) - 1)
    couplers = np.abs(np.linalg.norm(np.diff(x, axis=-2), axis=-1) - 1)
    return np.maximum(cranks.max(-1), couplers.max(-1))


@pytest.fixture(scope="module")
def four_bar_runs():
    """Both runs by one compiled program (dt traced, 5000 steps: 10 s at dt = 2e-3, 25 s at dt = 5e-3)."""
    mech, s0 = n_four_bar()
    run = jax.jit(lambda s, dt: dc.rollout(mech, s, None, dt, n_steps=5000, integrator=dc.RK4(), check=False)[1])
    diagnose = jax.jit(lambda traj, tol=None: dc.diagnose(mech, traj, singular_tol=tol))
    runs = {dt: (traj, diagnose(traj)) for dt in (2e-3, 5e-3) for traj in [run(s0, dt)]}
    return mech, s0, runs, diagnose


@pytest.mark.slow
def test_n_four_bar_leaving_its_branch_is_reported(four_bar_runs):
    """At dt = 5e-3 the default RK4 (Baumgarte, T = 50 dt) passes a singular configuration badly and leaves the
    parallelogram branch (the cranks stop being parallel), then the run turns to NaN: the report and the check name
    the step where the loop closure fails, before the NaN. The branch is lost within two steps (the cranks' spread
    grows from 1e-2 rad to O(1) rad, the closure error from 4e-5 to O(10)), so the closure passes its 1e-2 one or two
    steps after the spread passes its 1e-3: which of the two depends on the program's round-off (the closure after
    one step is 0.8e-2 or 1.6e-2 with and without XLA's optimisations)."""
    mech, s0, runs, _ = four_bar_runs
    traj, report = runs[5e-3]
    x = np.asarray(traj.x)
    th = crank_angles(x)
    with np.errstate(invalid="ignore"):
        off_branch = first(~(np.abs(th - th[:, :1]).max(-1) < 1e-3))   # NaN counts as off
        k = first(loop_closure(x) > 1e-2)
    assert 0 < k <= off_branch + 2 and k + 3 < first(~np.isfinite(x).all(axis=(1, 2))) and 5.0 < float(traj.t[k]) < 10.0
    assert int(report.first_violation) == k and not bool(report.ok)
    # the state one step before, already off the branch's loop closure (4e-5 of the length), is refused as a start:
    # rolling on from it would hide the passage
    start = dc.State(traj.x[k - 1], traj.v[k - 1], traj.t[k - 1])
    with pytest.raises(ValueError, match=r"rollout: the start must satisfy the mechanism's loop closure Phi\(q, t\) = 0 "
                                         r".* got \|Phi\| = [0-9.e-]+ .* dc\.assemble"):
        dc.rollout(mech, start, None, 5e-3, n_steps=1, integrator=dc.RK4())


@pytest.mark.slow
def test_n_four_bar_at_2e3_is_right_and_silent(four_bar_runs):
    """At dt = 2e-3 the run keeps its branch: the first crank's tip follows the one-degree-of-freedom solution to
    2e-7 m over 10 s, every crank at the same angle, and nothing is reported (its passages come as close as 1e-4 to
    singular: the conditioning says so without an alarm)."""
    mech, s0, runs, diagnose = four_bar_runs
    traj, report = runs[2e-3]
    x = np.asarray(traj.x)
    assert abs(float(traj.t[-1]) - 10.0) < 1e-9                   # the acceptance scenario: 10 s
    ref = crank_angle_reference(np.asarray(traj.t))
    tip = np.stack([np.cos(ref), np.sin(ref)], -1)
    assert np.abs(x[:, 0] - tip).max() < 2e-7
    assert np.abs(crank_angles(x) - crank_angles(x)[:, :1]).max() < 1e-6
    assert bool(report.ok) and int(report.first_bad) == -1 and report.summary().startswith("ok (conditioning >= ")
    assert 1e-5 < float(report.conditioning) < 1e-3
    # the steps that come close to singular are those where the crank lies along the frame (closed form: sin = 0)
    close = diagnose(traj, 1e-2)
    k = int(close.first_singular)
    assert k >= 0 and abs(np.sin(ref[k])) < 0.02
    crossing = first(np.sin(ref[1:]) * np.sin(ref[:-1]) <= 0)   # the first passage of the reference
    assert abs(k - crossing) <= 2


@pytest.mark.slow
def test_mechanism_at_rest_in_a_singular_configuration_is_reported():
    """Without gravity, an N-four-bar at rest with its cranks along the frame stays there: every step is singular
    (the Jacobian's rank drops by one per crank), which the report says, while the run is finite and on its
    constraints, and the check (finite, constraints) lets it pass."""
    mb = dc.MechanismBuilder(g=0.0)
    for i in range(3):   # drawn with the cranks up (the nominal rank is that of a regular configuration: 5)
        mb.ground(f"G{i}", (float(i), 0.0)), mb.point(f"B{i}", (float(i), 1.0))
        mb.body(f"crank{i}", f"G{i}", f"B{i}", mass=1.0, inertia=1 / 12, length=1.0)
    for i in range(2):
        mb.body(f"coupler{i}", f"B{i}", f"B{i + 1}", mass=1.0, inertia=1 / 12, length=1.0)
    mech, _ = mb.build()
    assert mech.nominal_rank == 5
    s0 = dc.State(jnp.array([[1.0, 0.0], [2.0, 0.0], [3.0, 0.0]]), jnp.zeros((3, 2)), 0.0)   # cranks along the frame
    _, traj = dc.rollout(mech, s0, None, 1e-3, n_steps=5, integrator=dc.RK4())
    report = dc.diagnose(mech, traj)
    J = np.asarray(jax.vmap(jax.jacfwd(mech.phi))(traj.x.reshape(5, -1), traj.t))
    sv = np.linalg.svd(J, compute_uv=False)
    assert (sv[:, 4] < 1e-12 * sv[:, 0]).all()                    # 5 rows, rank < 5 at every step (numpy SVD)
    assert int(report.first_singular) == 0 and float(report.conditioning) < 1e-12
    assert bool(report.finite) and int(report.first_violation) == -1 and not bool(report.ok)
    assert "singular at step 0" in report.summary()


@pytest.mark.slow
# ---------------------------------------------------------------------------------------------------------------------
# events
def test_exhausted_event_budgets_are_counted():
    """A 3-link chain dropped on the floor with the smallest budget (3 solver calls per quantum) uses it up at its
    impacts: the report counts the quanta whose every slot was used (StepReport.slots == Events.slots), and the run
    stays finite and on its rods."""
    chain = dc.free_chain(3, mass=1.0, length=0.4)
    start = dc.from_joint_angles(chain, jnp.array([0.4, 0.8, -0.6]), base=(0.0, 0.5), base_velocity=(0.5, -1.0))
    floor = dc.Events(chain.n, ground=0.0, slots=3)
    _, (path, reps) = jax.jit(lambda s: dc.event_rollout(chain, floor, dc.EventState(s), None, 1e-3,
                                                         n_steps=400))(start)
    report = dc.diagnose(chain, (path, reps))
    used_up = np.asarray(reps.slots) == floor.slots
    assert used_up.sum() > 0 and int(report.exhausted) == used_up.sum()
    assert int(report.first_exhausted) == first(used_up)
    assert bool(report.ok) and "exhausted their budget" in report.summary()
    assert int(np.asarray(reps.impacts).sum()) > 0
