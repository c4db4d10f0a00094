"""Contacts, angle limits, anomalies and adaptive halving (seed 000 §7, §12): checked against things computed another way.

* the event time against numpy's polynomial roots;
* the impact impulse against the M-orthogonal projection of v onto the constrained velocities (numpy, from the
  constraint rows), for both Part II solvers;
* the ground reaction and the holding torque against statics;
* contacts and limits against invariants (no penetration, energy lost at impacts, stuck points do not move);
* the recursive and KKT event solvers against each other along a rollout with events.

The gradients through event rollouts are in test_event_gradients.py.
"""
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc
from diffchain._xla.batching import sparse_size
from diffchain._events import detection, dynamics, quantum as ev
from diffchain._constraints.held import joint_rows
from diffchain._xla.small_chain import SMALL_MAX

DT = 1e-3
UP = jnp.array([0.0, 1.0])
INTERIOR = 1.2  # angle limits on the interior joints of a free chain (joint 1 against the world is not limited)


def interior_limits(n, lim=INTERIOR):
    lo = np.full(n - 1, -np.inf)
    lo[1:] = -lim
    return lo, -lo


@pytest.fixture(scope="module")
def drop():
    """A 4-link free chain dropped tilted onto the ground with interior angle limits, 1500 quanta, both solvers."""
    chain = dc.free_chain(4, mass=1.0, length=0.4)
    lo, hi = interior_limits(chain.n)
    events = dc.Events(chain.n, ground=0.0, theta_min=lo, theta_max=hi)
    state = dc.from_joint_angles(chain, jnp.array([0.6, 0.8, 0.7, -0.5]), base=(0.0, 1.2), base_velocity=(1.0, -1.0))
    run = jax.jit(lambda s, solver: dc.event_rollout(chain, events, dc.EventState(s), None, DT, n_steps=1500,
                                                     solver=solver), static_argnums=1)
    reduced = jax.config.read("jax_disable_most_optimizations")  # the full_opt tests compare bit for bit with this run
    jax.config.update("jax_disable_most_optimizations", False)
    out = run(state, dc.Recursive())
    jax.config.update("jax_disable_most_optimizations", reduced)
    return chain, events, state, out, run


def test_first_crossing_matches_polynomial_roots():
    rng = np.random.default_rng(0)
    h = 1e-2
    checked = 0
    for _ in range(300):
        g0, g1, g2 = rng.uniform(0, 1e-3), rng.normal(scale=0.5), rng.normal(scale=20.0)
        g_end = g0 + g1 * h + 0.5 * g2 * h**2
        if g_end >= 0:
            continue
        roots = np.roots([0.5 * g2, g1, g0])
        roots = roots[np.isreal(roots)].real
        expected = np.min(roots[(roots >= 0) & (roots <= h * (1 + 1e-12))])
        s = detection.first_crossing(jnp.asarray(g0), jnp.asarray(g1), jnp.asarray(g2), jnp.asarray(g_end), h, True)
        np.testing.assert_allclose(float(s), expected, rtol=1e-9, atol=1e-15)
        checked += 1
    assert checked > 50
    # already violated at the start: the event is now
    assert float(detection.first_crossing(-1e-3, -1.0, 0.0, -2e-3, h, True)) == 0.0



def test_first_crossing_derivatives_at_round_off_slacks_in_float32():
    """Slacks of a point resting on an obstacle are ~1e-21 m. The derivative of the quotients in the crossing time
    squared them below the smallest float32, and the gradient of every event rollout with a stuck point became nan
    (0 * inf), although the stuck point's time is not wanted. Wanted entries must match the implicit-function
    derivatives of g(s) = 0 (ds/dg0 = -1/g'(s), ds/dg1 = -s/g'(s), ds/dg2 = -s^2/(2 g'(s))), unwanted ones be h with
    zero derivatives."""
    f32 = jnp.float32
    h = 1e-3
    # at rest on the ground (twice), falling from 1e-21 m, drifting into the ground from 1e-21 m, falling from 1 mm
    g0 = np.array([4.8e-21, 4.8e-21, 1e-21, 1e-21, 1e-3])
    g1 = np.array([-7.6e-19, -7.6e-19, -1e-3, -2e-18, -2.0])
    g2 = np.array([0.0, -1e-30, -9.81, 0.0, -9.81])
    g_end = g0 + g1 * h + 0.5 * g2 * h**2
    want = np.array([False, False, True, True, True])
    for exact in (True, False):
        def total(a, b, c, e):
            return jnp.sum(detection.first_crossing(a, b, c, e, h, exact, jnp.asarray(want)))

        s = detection.first_crossing(*(jnp.asarray(q, f32) for q in (g0, g1, g2, g_end)), h, exact, jnp.asarray(want))
        grads = jax.grad(total, argnums=(0, 1, 2, 3))(*(jnp.asarray(q, f32) for q in (g0, g1, g2, g_end)))
        assert all(np.all(np.isfinite(np.asarray(g))) for g in grads)
        assert np.all(np.asarray(s)[~want] == np.float32(h))
        assert all(np.all(np.asarray(g)[~want] == 0.0) for g in grads)
        if exact:
            root = np.array([np.min(r[(r.imag == 0) & (r.real >= 0)].real) for r in
                             (np.roots([0.5 * c, b, a]) for a, b, c in zip(g0[want], g1[want], g2[want]))])
            slope = g1[want] + g2[want] * root
            np.testing.assert_allclose(np.asarray(s)[want], root, rtol=1e-5)
            for g, ref in zip(grads[:3], (-1 / slope, -root / slope, -root**2 / (2 * slope))):
                np.testing.assert_allclose(np.asarray(g)[want], ref, rtol=1e-4, atol=1e-30)

def _projection(chain, state, stuck, held):
    """v' = v - M^-1 J^T (J M^-1 J^T)^-1 J v for rods, stuck points (both coordinates) and held joint rows (numpy)."""
    n = chain.n
    x, v = np.asarray(state.x), np.asarray(state.v).reshape(-1)
    rows = []
    for k in range(n - 1):
        r = (x[k + 1] - x[k]) / np.linalg.norm(x[k + 1] - x[k])
        row = np.zeros(2 * n)
        row[2 * k: 2 * k + 2], row[2 * k + 2: 2 * k + 4] = -r, r
        rows.append(row)
    for i in np.flatnonzero(stuck):
        for j in range(2):
            row = np.zeros(2 * n)
            row[2 * i + j] = 1.0
            rows.append(row)
    G = np.asarray(joint_rows(state.x)).reshape(n, 2 * n)
    rows += [G[i] for i in np.flatnonzero(held)]
    J = np.array(rows)
    Minv = np.repeat(1.0 / np.asarray(chain.m), 2)
    W = J @ (Minv[:, None] * J.T)
    return (v - Minv * (J.T @ np.linalg.solve(W, J @ v))).reshape(n, 2)


def _random_contacts(chain, rng, n_stuck, n_held):
    """A random moving pose 1 m up, with n_stuck random points stuck and n_held random interior joints held."""
    k = chain.n - 1
    state = dc.from_joint_angles(chain, rng.uniform(-1.5, 1.5, k), rng.normal(size=k), base=(0.0, 1.0),
                                 base_velocity=rng.normal(size=2))
    stuck, held = np.zeros(chain.n, bool), np.zeros(chain.n, bool)
    stuck[rng.choice(chain.n, size=n_stuck, replace=False)] = True
    held[1 + rng.choice(chain.n - 2, size=n_held, replace=False)] = True
    return state, stuck, held


@pytest.mark.parametrize("solver", [dc.Recursive(), dc.ShortChain(), dc.KKT()], ids=["recursive", "short", "kkt"])
def test_impulse_is_the_mass_metric_projection(solver):
    """Seed §7 Z1–Z3 with the same solver = the inelastic impulse: v' is the M-orthogonal projection of v onto the
    velocities the constraints allow, so stuck points stop, held joints stop rotating, rods keep their length and the
    kinetic energy cannot increase."""
    rng = np.random.default_rng(1)
    chain = dc.free_chain(5, mass=rng.uniform(0.5, 2.0, 6), length=rng.uniform(0.3, 1.0, 5))
    events = dc.Events(chain.n, ground=0.0)
    call = jax.jit(lambda es: dynamics.constrained_dynamics(chain, events, es, es.x, es.v, es.t, dc.Control(n=chain.n),
                                                      5 * DT, jnp.ones((), bool), solver))
    for trial in range(4):
        state, stuck, held = _random_contacts(chain, rng, 1 + trial % 2, trial % 3)
        es = dc.EventState(state, stuck=stuck, held=held)
        dv, _, _ = call(es)
        v_new = state.v + dv
        np.testing.assert_allclose(v_new, _projection(chain, state, stuck, held), atol=1e-10 * (1 + np.abs(state.v).max()))
        assert np.abs(np.asarray(v_new)[stuck]).max() < 1e-10
        assert np.abs(np.asarray(dc.joint_velocities(dc.State(state.x, v_new)))[held]).max(initial=0) < 1e-10
        ke = lambda v: 0.5 * np.sum(np.asarray(chain.m)[:, None] * np.asarray(v) ** 2)  # noqa: E731
        assert ke(v_new) <= ke(state.v) + 1e-12


def test_long_chain_solver_call_equals_kkt():
    """One chain beyond ``SMALL_MAX`` points, with one joint held and with two: the solver call (the Part II
    recursion) gives the KKT form's accelerations, holding torques and reactions, in the impulse call and in the
    ordinary one."""
    rng = np.random.default_rng(2)
    chain = dc.free_chain(10, mass=rng.uniform(0.5, 2.0, 11), length=rng.uniform(0.3, 1.0, 10))
    assert chain.n > SMALL_MAX
    events = dc.Events(chain.n, ground=0.0, theta_min=-2.0, theta_max=2.0)
    calls = [jax.jit(lambda es, impulse, solver=solver: dynamics.constrained_dynamics(
        chain, events, es, es.x, es.v, es.t, dc.Control(n=chain.n), 5 * DT, impulse, solver))
        for solver in (dc.Recursive(), dc.KKT())]
    for trial in range(4):
        state, stuck, held = _random_contacts(chain, rng, 1 + trial % 2, 1 + trial // 2)
        es = dc.EventState(state, stuck=stuck, held=held, side=np.where(held, 1.0, 0.0))
        for impulse in (False, True):
            (a, tau_w, R), (a_ref, tau_ref, R_ref) = (call(es, jnp.asarray(impulse)) for call in calls)
            scale = np.abs(np.asarray(a_ref)).max()
            np.testing.assert_allclose(a, a_ref, atol=1e-10 * scale, err_msg=f"trial {trial} impulse {impulse}")
            np.testing.assert_allclose(tau_w, tau_ref, atol=1e-10 * np.abs(np.asarray(tau_ref)).max())
            np.testing.assert_allclose(R, R_ref, atol=1e-10 * np.abs(np.asarray(R_ref)).max())


def test_ground_reaction_and_holding_torque_are_statics():
    """A chain hanging at rest from a stuck point: the reaction is its weight. A pendulum held at a lower limit:
    tau_w = m g l cos(theta) holds it (and is positive: it pushes away from the limit)."""
    chain = dc.free_chain(3, mass=jnp.array([1.0, 2.0, 0.5, 1.5]), length=0.5)
    x = jnp.stack([jnp.zeros(4), -0.5 * jnp.arange(4.0)], -1)
    es = dc.EventState(dc.State(x), stuck=[True, False, False, False], normal=jnp.array([[0.0, -1.0]] * 4))
    events = dc.Events(chain.n, lines=(jnp.array([0.0, 0.0]), jnp.array([0.0, -1.0])))
    _, _, R = jax.jit(dynamics.constrained_dynamics)(chain, events, es, es.x, es.v, es.t, dc.Control(n=4), 5 * DT, False)
    np.testing.assert_allclose(R[0], [0.0, 9.81 * 5.0], atol=1e-10)

    pend = dc.pendulum(1, mass=2.0, length=1.5)
    theta = -0.3
    state = dc.from_joint_angles(pend, jnp.array([theta]))
    es = dc.EventState(state, held=[True, False], side=[-1.0, 0.0])
    events = dc.Events(pend.n, theta_min=theta)
    a, tau_w, _ = jax.jit(dynamics.constrained_dynamics)(pend, events, es, es.x, es.v, es.t, dc.Control(n=2), 5 * DT, False)
    np.testing.assert_allclose(tau_w[0], 2.0 * 9.81 * 1.5 * np.cos(theta), rtol=1e-10)
    assert np.abs(np.asarray(a)).max() < 1e-10


@pytest.mark.slow
def test_chain_dropped_on_the_ground(drop):
    """No penetration, energy lost at every impact, stuck points do not move, the rods keep their lengths."""
    chain, _, state, (final, (traj, rep)), _ = drop
    rep = jax.tree_util.tree_map(np.asarray, rep)
    assert rep.impacts.sum() >= 3 and rep.limit_hits.sum() >= 3, "the scenario should have contacts and limit hits"
    assert rep.exhausted.sum() <= 2  # a quantum with three events or more uses up the 8 slots (finished safely)
    y = np.asarray(traj.state.x[..., 1])
    assert y.min() > -1e-9, f"penetration {y.min()}"
    E = np.concatenate([[float(dc.energy(chain, state))], np.asarray(dc.energy(chain, traj.state))])
    dE = np.diff(E)
    # an impact step never gains more than the seed quantum's own error gains in a quiet step
    assert dE[rep.events > 0].max() <= max(dE[rep.events == 0].max(), 0.0) + 1e-12
    assert E[-1] < 0.5 * E[0]
    stuck = np.asarray(traj.stuck)
    both = stuck[1:] & stuck[:-1] & ~(rep.releases[1:] | rep.impacts[1:])
    moved = np.linalg.norm(np.diff(np.asarray(traj.state.x), axis=0), axis=-1)
    assert moved[both].max() < 1e-9
    length, rate = dc.constraint_violation(chain, final.state)
    # a rod between two stuck points is not enforced (the pins win, seed §6.1): it keeps the length it had, to the
    # PD residual, when its second end landed
    assert length < 1e-5 and rate < 1e-9
    assert np.all(final.stuck[np.asarray(final.x[:, 1]) > 1e-6] == 0)


@pytest.mark.parametrize("solver", [dc.KKT(), dc.ShortChain()], ids=["kkt", "short"])
def test_event_rollouts_agree_with_every_chain_solver(drop, solver):
    """Same events, same times, same trajectory (to round-off) with the recursion, the dense KKT solve and the
    written-out form, through every impact, limit hit, release and scuff of the drop: the decisions are taken with
    margins above round-off."""
    chain, _, state, (_, (traj, rep)), run = drop
    _, (traj_k, rep_k) = run(state, solver)
    np.testing.assert_array_equal(rep.impacts, rep_k.impacts)
    np.testing.assert_array_equal(rep.limit_hits, rep_k.limit_hits)
    np.testing.assert_allclose(traj.state.x, traj_k.state.x, atol=1e-10)


@pytest.mark.slow
@pytest.mark.full_opt  # bit for bit as users' optimised code (conftest.py)
def test_quiet_trial_gives_what_the_first_slot_gives(drop, monkeypatch):
    """event_step first tries the quantum in which nothing happens (events._quiet_trial) and runs the slots only
    where that does not apply. Along the drop (impacts, limit hits, releases, scuffs) the same program with the quiet
    trial switched off must give the same trajectory (to round-off) and reports; the quiet trial must apply to most
    quanta and to none with an event, a release or a halving."""
    chain, events, state, (_, (traj, rep)), _ = drop
    seen = []
    quiet_trial = ev._quiet_trial

    def never(*args):
        *out, quiet = quiet_trial(*args)
        seen.append(1)
        return (*out, jnp.zeros_like(quiet))

    monkeypatch.setattr(ev, "_quiet_trial", never)
    jax.clear_caches()  # the quantum is an inner jit, traced once per model: trace it again with the patch
    _, (traj_s, rep_s) = jax.jit(lambda s: dc.event_rollout(chain, events, dc.EventState(s), None, DT, n_steps=1500))(
        state)
    assert seen, "the patched quiet trial should have been traced"
    for got, want in ((traj_s, traj), (rep_s, rep)):
        for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            if jnp.issubdtype(a.dtype, jnp.floating):  # the same operations, fused differently by XLA: round-off
                np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
            else:
                np.testing.assert_array_equal(a, b)
    # where the quiet trial applies: a quantum whose first slot is a cache hit and finishes it (one slot, no release)
    starts = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a[None], b[:-1]]), dc.EventState(state), traj)
    quiet = jax.jit(jax.vmap(lambda e: quiet_trial(chain, events, e, e.a, dc.Control(n=chain.n), jnp.asarray(DT),
                                                   5 * DT, dc.Recursive(), dc.VelocityVerlet())[-1] & e.fresh))(starts)
    quiet = np.asarray(quiet)
    busy = (np.asarray(rep.slots) > 1) | np.any(np.asarray(rep.releases) | np.asarray(rep.limit_releases), -1)
    assert quiet.mean() > 0.9 and not np.any(quiet & busy)
    assert np.all(quiet[~busy]), "a quantum with one slot and no release is a quiet one"


@pytest.mark.slow
@pytest.mark.full_opt  # bit for bit as users' optimised code (conftest.py)
def test_first_same_as_last_cache_changes_nothing(drop):
    """A quantum that starts where the last one ended, under the same control, reuses that quantum's final solver call
    instead of a refresh (EventState.fresh). Forcing the refresh every quantum must give the same events and the same
    trajectory, with a control that stays constant for stretches (cache hits) and jumps (misses). With the seed's
    quantum: with velocity Verlet the cache is part of the scheme (its last call is at the predicted velocity, the
    refresh's at the corrected one), checked against its reference in tests/events/test_event_integrators.py."""
    chain, events, state, _, _ = drop
    tau = jnp.zeros((1500, chain.n)).at[:, 2].set(jnp.repeat(jnp.array([0.0, 2.0, -1.5, 0.5, 0.0]), 300))

    @jax.jit
    def run(refresh):  # one compiled program for both runs
        def body(e, u):
            e = eqx.tree_at(lambda e: e.fresh, e, e.fresh & ~refresh)
            e, rep = dc.event_step(chain, events, e, u, DT, integrator=dc.SeedQuantum())
            return e, (e, rep)
        return jax.lax.scan(body, dc.EventState(state), dc.Control(tau=tau))[1]

    (traj, rep), (traj_r, rep_r) = run(False), run(True)
    assert np.mean(np.asarray(traj.fresh)) > 0.9, "the cache should be valid after most quanta"
    assert rep.impacts.sum() >= 3 and rep.limit_hits.sum() >= 1 and rep.limit_releases.sum() >= 1
    for name in ("impacts", "limit_hits", "releases", "limit_releases", "events", "halvings"):
        np.testing.assert_array_equal(getattr(rep, name), getattr(rep_r, name), err_msg=name)
    same = np.concatenate([[False], np.all(np.diff(np.asarray(tau), axis=0) == 0, axis=1)])
    hit = np.concatenate([[False], np.asarray(traj.fresh)[:-1]]) & same
    saved, full = np.asarray(rep_r.slots) - np.asarray(rep.slots), np.asarray(rep_r.exhausted)
    np.testing.assert_array_equal(saved[~full], hit[~full].astype(int))  # one solver call saved on every hit
    np.testing.assert_allclose(traj.state.x, traj_r.state.x, atol=1e-12)
    np.testing.assert_allclose(traj.state.v, traj_r.state.v, atol=1e-10)


@pytest.mark.slow
@pytest.mark.full_opt  # bit for bit as users' optimised code (conftest.py)
def test_rollout_does_not_reuse_a_cache_from_another_chain():
    """event_rollout starts with a refresh: continuing from an EventState that another chain (here: other masses and
    dt) left with a fresh cache gives what the same start without a cache gives."""
    chain = dc.free_chain(3, mass=1.0, length=0.5)
    events = dc.Events(chain.n, ground=0.0)
    state = dc.from_joint_angles(chain, jnp.array([0.3, -0.4, 0.5]), base=(0.0, 1.0))
    run = jax.jit(lambda c, e, dt: dc.event_rollout(c, events, e, None, dt, n_steps=50)[0])  # one compiled program
    es = run(chain, dc.EventState(state), DT)
    assert bool(es.fresh)
    heavy = dc.free_chain(3, mass=jnp.array([1.0, 3.0, 0.5, 2.0]), length=0.5)
    clean = eqx.tree_at(lambda e: e.fresh, es, jnp.zeros((), bool))
    np.testing.assert_array_equal(run(heavy, es, 2 * DT).state.x, run(heavy, clean, 2 * DT).state.x)  # same control


@pytest.mark.slow
def test_pendulum_stops_at_a_limit_holds_and_releases():
    """Swinging down into theta^m = -0.3: it stops there, is held under gravity, and leaves when driven away."""
    chain = dc.pendulum(1)
    events = dc.Events(chain.n, theta_min=-0.3)
    T = 2600
    tau = jnp.zeros((T, 2)).at[2000:, 0].set(12.0)  # > m g l = 9.81: lifts the pendulum off the limit
    state = dc.from_joint_angles(chain, jnp.array([0.5]))
    _, (traj, rep) = jax.jit(lambda s: dc.event_rollout(chain, events, dc.EventState(s), dc.Control(tau=tau), DT))(state)
    theta = np.asarray(jax.vmap(lambda x: dc.joint_angles(dc.State(x)))(traj.state.x))[:, 0]
    hits = np.flatnonzero(np.asarray(rep.limit_hits)[:, 0])
    assert len(hits) == 1 and 300 < hits[0] < 600
    assert theta.min() > -0.3 - 1e-8
    held = slice(hits[0] + 1, 2000)
    np.testing.assert_allclose(theta[held], -0.3, atol=1e-9)
    assert np.asarray(traj.held)[held, 0].all()
    assert np.asarray(rep.limit_releases)[2000, 0] and theta[-1] > 0.0


@pytest.mark.slow
def test_stuck_chain_released_when_pulled_up():
    """A chain lying on the ground with every point stuck leaves it when pulled up harder than gravity (z^T R < 0)."""
    chain = dc.free_chain(3, mass=1.0, length=0.5)
    x = jnp.stack([0.5 * jnp.arange(4.0), jnp.zeros(4)], -1)
    es = dc.EventState(dc.State(x), stuck=[True] * 4, normal=jnp.broadcast_to(UP, (4, 2)))
    events = dc.Events(chain.n, ground=0.0)
    lift = jax.jit(lambda F: dc.event_rollout(chain, events, es, dc.Control(F=jnp.broadcast_to(F, (50, 4, 2))), DT))
    final, _ = lift(jnp.array([0.0, 9.0]))  # less than the weight: stays
    assert final.stuck.all() and np.abs(np.asarray(final.x - x)).max() < 1e-12
    final, (_, rep) = lift(jnp.array([0.0, 11.0]))
    assert not final.stuck.any() and np.asarray(rep.releases)[0].all()
    np.testing.assert_allclose(final.x[:, 1], 0.5 * (11.0 - 9.81) * (50 * DT) ** 2, rtol=1e-6)


@pytest.mark.slow
def test_fig6_halving_keeps_a_nearly_straight_run_sane():
    """Seed Fig. 6: joints 1 and 3 stand on the ground, the rods are 0.1% short and the run is nearly straight. The
    PD length correction then asks for huge accelerations of joint 2: a plain quantum shoots the chain into the air,
    the error estimate |a' - a| dt triggers halving, which keeps joint 2 near its geometric position."""
    chain = dc.free_chain(2, mass=1.0, length=1.0)
    d, beta = 1e-3, 1e-3
    x = jnp.array([[0.0, 0.0], [(1 - d) * np.cos(beta), (1 - d) * np.sin(beta)], [2 * (1 - d) * np.cos(beta), 0.0]])
    es = dc.EventState(dc.State(x), stuck=[True, False, True], normal=jnp.broadcast_to(UP, (3, 2)))
    out = {}
    for depth in (0, 3):
        events = dc.Events(chain.n, ground=0.0, max_depth=depth)
        _, (traj, rep) = jax.jit(lambda e: dc.event_rollout(chain, events, e, None, DT, n_steps=200, check=False,
                                                            integrator=dc.SeedQuantum()))(es)  # the seed's figure
        out[depth] = np.asarray(traj.state.x)[:, 1, 1].max(), np.abs(np.asarray(traj.state.v)).max(), rep
    sag = np.sqrt(1.0 - (1 - d) ** 2 * np.cos(beta) ** 2)  # where joint 2 sits once the rods have their length
    assert out[0][0] > 10 * sag and out[0][2].halvings.sum() == 0  # the plain step explodes
    assert out[3][2].halvings.sum() > 0 and out[3][0] < 1.05 * sag and out[3][1] < 10.0


def _fig4():
    """Seed Fig. 4 (scuffing): at rest, joint 1 on the ground, the angle of joint 2 at its maximum, joint 3 pulled."""
    chain = dc.free_chain(2, mass=1.0, length=0.5)
    state = dc.from_joint_angles(chain, jnp.array([1.0, 0.6]))
    es = dc.EventState(state, stuck=[True, False, False], normal=jnp.broadcast_to(UP, (3, 2)),
                       held=[False, True, False], side=[0.0, 1.0, 0.0])
    events = dc.Events(chain.n, ground=0.0, theta_min=[-np.inf, -0.6], theta_max=[np.inf, 0.6])
    return chain, events, es, dc.Control(F=jnp.zeros((400, 3, 2)).at[:, 2].set(jnp.array([15.0, 0.0])))


def _fig5():
    """Seed Fig. 5 (chattering): joint 1 just above the ground, joint 3 just above its minimum angle with a torque
    pushing it in, the whole object moving down."""
    chain = dc.free_chain(3, mass=1.0, length=0.4)
    state = dc.from_joint_angles(chain, jnp.array([0.6, -0.3, -0.75]), base=(0.0, 0.01), base_velocity=(0.0, -1.0))
    events = dc.Events(chain.n, ground=0.0, theta_min=[-np.inf, -1.5, -0.8], theta_max=[np.inf, 1.5, 0.8])
    return chain, events, dc.EventState(state), dc.Control(tau=jnp.zeros((400, 4)).at[:, 2].set(-3.0))


@pytest.mark.slow
@pytest.mark.parametrize("scenario", [_fig4, _fig5], ids=["fig4-scuffing", "fig5-chattering"])
def test_seed_anomalies_finish_within_the_budget(scenario):
    chain, events, es, controls = scenario()
    final, (traj, rep) = jax.jit(lambda e: dc.event_rollout(chain, events, e, controls, DT))(es)
    rep = jax.tree_util.tree_map(np.asarray, rep)
    assert rep.events.sum() + rep.releases.sum() + rep.limit_releases.sum() > 0, "the scenario should have events"
    assert not rep.exhausted.any() and rep.slots.max() <= events.slots
    assert np.all(np.isfinite(np.asarray(traj.state.x)))
    assert np.asarray(traj.state.x[..., 1]).min() > -1e-9
    length, rate = jax.vmap(lambda s: dc.constraint_violation(chain, s))(traj.state)
    speed = np.abs(np.asarray(traj.state.v)).max((1, 2))
    # the seed quantum's own O(dt^2) drift per quantum (a rod turning at omega: omega^3 l dt^2), corrected by the PD
    assert np.all(length < 1e-5) and np.all(rate < 1e-3 * (1 + speed))
    if scenario is _fig4:  # the release <-> re-stick loop of Fig. 4 is detected and the contact locked
        assert np.asarray(traj.chatter).max() >= float(events.chatter_count)


@pytest.mark.slow
def test_contact_switched_on_again_gets_its_impulse():
    """Scuffing (seed §12.2): a contact released in a quantum whose point then heads back into the ground is switched
    on again. Here the impulse of another point's impact pushes it down (8-link drop, quantum 143): moving down, it
    needs an impulse too. Switched on with its velocity (before the fix), only the PD term stopped it, 0.3 mm below
    the ground. With its impulse, a stuck point moves only by the PD correction towards its pin: for a critically
    damped correction from rest that is |v| <= gap / (e T) < gap / T (time constant T = 5 dt)."""
    chain = dc.free_chain(8, mass=1.0, length=0.5)
    th = np.array([0.25, -0.25] + [(-1) ** i * 0.5 for i in range(2, 8)])
    thd = np.array([0.0] + [(-1) ** i * 10.0 for i in range(1, 8)])
    state = dc.from_joint_angles(chain, jnp.asarray(th), jnp.asarray(thd), base=(0.0, 1.0))
    events = dc.Events(chain.n, ground=0.0, theta_min=-2.0, theta_max=2.0)
    _, (traj, rep) = jax.jit(lambda s: dc.event_rollout(chain, events, dc.EventState(s), None, DT, n_steps=160))(state)
    assert np.asarray(rep.impacts & rep.releases)[140:150].any(), "the scenario should release and re-stick a contact"
    y = np.asarray(traj.state.x[..., 1])
    assert y.min() > -1e-9
    stuck = np.asarray(traj.stuck)
    gap = np.abs(y - np.asarray(traj.pin[..., 1]))[stuck].max()
    assert np.abs(np.asarray(traj.state.v[..., 1])[stuck]).max() < 1e-12 + gap / (5 * DT)


@pytest.mark.slow
def test_exhausted_budget_finishes_with_a_plain_quantum():
    """With threshold 0 every trial is rejected until the budget's last slot, which is forced to finish: 3 slots =
    refresh, rejected trial, forced trial of the whole quantum. Nothing else happening, that is one plain seed
    quantum (same accelerations, same PD correction), and its end accelerations are cached for the next quantum."""
    chain = dc.free_chain(3, mass=jnp.array([1.0, 2.0, 0.5, 1.5]), length=0.4)
    events = dc.Events(chain.n, ground=-100.0, slots=3, threshold=0.0, max_depth=4)
    state = dc.from_joint_angles(chain, jnp.array([0.3, -0.6, 0.9]), jnp.array([1.0, -2.0, 3.0]), base=(0.0, 1.0))
    u = dc.Control(tau=jnp.array([0.5, -1.0, 0.3, 0.0]))
    out, rep = jax.jit(lambda e: dc.event_step(chain, events, e, u, DT, integrator=dc.SeedQuantum()))(dc.EventState(state))
    assert bool(rep.exhausted) and int(rep.slots) == 3 and int(rep.halvings) == 1 and int(rep.events) == 0
    ref = dc.step(chain, state, u, DT, integrator=dc.SeedQuantum())
    np.testing.assert_allclose(out.state.x, ref.x, rtol=0, atol=1e-15)
    np.testing.assert_allclose(out.state.v, ref.v, rtol=0, atol=1e-13)
    assert float(out.state.t) == float(state.t) + DT and bool(out.fresh)
    np.testing.assert_allclose(out.a, dc.Recursive()(chain, ref, u, 5 * DT).a, rtol=0, atol=1e-12)


@pytest.mark.slow
def test_chattering_counter_keeps_a_constraint_on():
    """A constraint released chatter_count times recently is not released (seed §12.2 remedy)."""
    chain = dc.free_chain(3, mass=1.0, length=0.5)
    x = jnp.stack([0.5 * jnp.arange(4.0), jnp.zeros(4)], -1)
    events = dc.Events(chain.n, ground=0.0)
    F = dc.Control(F=jnp.zeros((4, 2)).at[:, 1].set(20.0))
    step = jax.jit(lambda es: dc.event_step(chain, events, es, F, DT))
    for count, stays in ((0.0, False), (float(events.chatter_count), True)):
        es = dc.EventState(dc.State(x), stuck=[True] * 4, normal=jnp.broadcast_to(UP, (4, 2)),
                           chatter=jnp.zeros((2, 4)).at[0].set(count))
        out, _ = step(es)
        assert bool(out.stuck.all()) == stays


@pytest.mark.slow
@pytest.mark.full_opt  # bit for bit as users' optimised code (conftest.py)
def test_batch_with_different_event_states_matches_single_runs():
    """vmap over states whose contact and limit sets differ element by element = the same runs one by one. 20 chains,
    of which only a few land: the quanta where a few need more than one slot run those on the gathered elements
    (diffchain._xla.batching.scan_until), the first quantum (every chain refreshes) on the whole batch."""
    chain = dc.free_chain(3, mass=1.0, length=0.4)
    lo, hi = interior_limits(chain.n)
    events = dc.Events(chain.n, ground=0.0, theta_min=lo, theta_max=hi)
    rng = np.random.default_rng(3)
    heights = [1.3, 1.5, 1.9, 1.4] + [6.0] * 16
    states = [dc.from_joint_angles(chain, jnp.asarray(rng.uniform(-1, 1, 3)), base=(0.0, h), base_velocity=(0.0, -2.0))
              for h in heights]
    batch = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *[dc.EventState(s) for s in states])
    run = jax.jit(lambda e: dc.event_rollout(chain, events, e, None, DT, n_steps=300))
    finals, (_, reps) = jax.vmap(run)(batch)
    assert len({int(k) for k in np.asarray(reps.events).sum(1)}) > 1, "the elements should see different events"
    busy = np.sum(np.asarray(reps.slots) > 1, axis=0)  # chains that need more than one slot, per quantum
    size = sparse_size(len(states))
    assert busy.max() > size and np.any((busy > 0) & (busy <= size)), "both the dense and the gathered form should run"
    for i, s in enumerate(states):
        final, (_, rep) = run(dc.EventState(s))
        np.testing.assert_allclose(finals.state.x[i], final.state.x, atol=1e-12)
        np.testing.assert_array_equal(finals.stuck[i], final.stuck)
        np.testing.assert_array_equal(reps.slots[i], rep.slots)


def test_bad_event_input_is_refused():
    with pytest.raises(ValueError, match="unit"):
        dc.Events(3, lines=(jnp.zeros((1, 2)), jnp.array([[0.0, 2.0]])))
    with pytest.raises(ValueError, match="theta_min < theta_max"):
        dc.Events(3, theta_min=0.5, theta_max=0.2)
    with pytest.raises(ValueError, match=r"theta_max must be a scalar or have one entry per link, shape \(n-1,\) = \(2,\)"):
        dc.Events(3, theta_max=[1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="n = 4"):
        dc.event_step(dc.free_chain(3), dc.Events(3), dc.EventState(dc.State(jnp.zeros((4, 2)))), dc.Control(n=4), DT)
    chain = dc.free_chain(2, length=0.5)
    below = dc.from_joint_angles(chain, jnp.array([-0.5, 0.0]), base=(0.0, 0.1))
    with pytest.raises(Exception, match="must start on or above its obstacle lines"):
        eqx.filter_jit(dc.check_event_state)(chain, dc.Events(chain.n, ground=0.0), dc.EventState(below))


@pytest.mark.slow
def test_event_step_without_input_is_a_zero_control():
    """event_step(..., None, dt), as event_rollout takes None: a quantum without input, here free fall (it raised)."""
    chain = dc.free_chain(3, mass=1.0, length=0.3)
    events = dc.Events(chain, ground=0.0)
    es = dc.EventState(dc.from_joint_angles(chain, jnp.array([-0.8, 0.3, 0.0]), base=(0.0, 0.6)))  # 0.1 m up
    dt, g = 1e-3, float(chain.g)
    new, _ = dc.event_step(chain, events, es, None, dt)
    np.testing.assert_allclose(new.state.v, jnp.zeros((4, 2)).at[:, 1].set(-g * dt), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(new.state.x, es.state.x.at[:, 1].add(-g * dt**2 / 2), rtol=1e-12, atol=1e-13)
