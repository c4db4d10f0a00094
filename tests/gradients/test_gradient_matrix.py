"""The gradient matrix: every differentiable leaf of a model on every path has finite forward- and reverse-mode
derivatives equal to central differences wherever the sequence of events does not change.

The leaves are found, not listed: every inexact array of the model (point masses, lengths, link masses, centres of
mass, inertias, gravity, slider lines, spring, damper and drag constants, attachment geometry), of the events
(obstacle lines, limits) and of the start and the controls. For each leaf a random direction d is drawn (zero where
the leaf is infinite, e.g. a missing limit); the directional derivative of a scalar of the final state is computed
three ways: ``jax.jvp`` (forward), ``jax.grad`` dotted with d (reverse), and (f(p + h d) - f(p - h d)) / 2h with the
event reports of both sides equal to the unperturbed run's (h = 1e-5: the located event times carry round-off of
about 1e-14, which h = 1e-6 would turn into 1e-8 of noise in the differences; where the quotient's own error shows, Richardson's
extrapolation removes it: see :func:`check_matrix`) (else that leaf's difference is not a derivative and the
test says so). A batch is checked copy by copy in one compiled program (the copies are independent, so the batched
gradient of their sum holds each copy's gradient); its random drops are also the fuzz for non-finite gradients.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import equinox as eqx

import diffchain as dc

DT = 1e-3


# Arrays that decide, not parameters: the halving threshold and the chattering counts (derivative zero where defined).
DECISIONS = (".threshold", ".chatter_count", ".chatter_window")


def _leaves(p):
    """(path, array) of every inexact array leaf of ``p`` but the decisions."""
    flat = jax.tree_util.tree_flatten_with_path(eqx.filter(p, eqx.is_inexact_array))[0]
    return [(jax.tree_util.keystr(k), v) for k, v in flat if not jax.tree_util.keystr(k).endswith(DECISIONS)]


def _direction(p, paths, key):
    """A tangent of ``p`` (its inexact arrays): random in the leaves at ``paths`` (zero where a leaf is not finite),
    zero elsewhere."""
    def leaf(k, v):
        if jax.tree_util.keystr(k) not in paths:
            return jnp.zeros_like(v)
        d = jax.random.normal(jax.random.fold_in(key, paths.index(jax.tree_util.keystr(k))), v.shape, v.dtype)
        return jnp.where(jnp.isfinite(v), d, 0.0)
    return _strong(jax.tree_util.tree_map_with_path(leaf, p))


def _shift(p, d, h):
    return _strong(jax.tree.map(lambda a, b: jnp.where(b != 0, a + h * b, a), p, d))


def _strong(p):
    """``p`` with every array strongly typed in its own dtype: the compiled programs are keyed by their inputs' types,
    and a weakly typed zero tangent against a strongly typed random one would compile the same program twice."""
    return jax.tree.map(lambda a: jnp.array(a, dtype=a.dtype), p)


def _dot(g, d, batch):
    """<g, d> summed over every axis but the batch's (when ``batch``)."""
    parts = [jnp.sum((a * b).reshape((a.shape[0], -1) if batch else (-1,)), -1)
             for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(d))]
    return sum(parts)


def _same(r1, r2, batch=False):
    """Whether two event reports (or None) record the same events (copy by copy along the leading axis of batched
    reports)."""
    if r1 is None:
        return True
    keys = ("impacts", "limit_hits", "releases", "limit_releases", "halvings", "events", "exhausted")
    out = None
    for k in keys:
        a, b = np.asarray(getattr(r1, k)), np.asarray(getattr(r2, k))
        eq = (a == b).reshape(a.shape[0], -1).all(-1) if batch else (a == b).all()
        out = eq if out is None else out & eq
    return out


def check_matrix(f, p, *, batch=False, h=1e-5, rtol=1e-6, atol=1e-9, live=(), seed=0, min_share=0.75,
                 joint=None, events=(), require=None):
    """Check f's derivatives with respect to every leaf of ``p`` (forward, reverse, central differences).

    ``f(p) -> (value, report)``: value a scalar, or (B,) for a batch of independent copies (``batch``); report the
    stacked event reports or None. Each leaf is moved along its own random direction, or, with ``joint=K``, all of
    them at once along K random directions (for programs whose runs are expensive). ``live``: substrings of leaf
    paths whose derivative must be nonzero, so that the check is not vacuous (with ``joint``: the reverse-mode
    gradient's part in that leaf, which the joint directions check). ``events``: the kinds of event (fields of the
    report) that must happen in the unperturbed run, ``require(report)`` another condition on it that must hold;
    both are checked before the derivatives. Returns {direction: (forward, reverse, central)}."""
    p, static = eqx.partition(p, eqx.is_inexact_array)
    p = _strong(p)
    f_ = lambda q: f(eqx.combine(q, static))  # noqa: E731
    # two programs: forward mode (whose primal output gives the central differences) and reverse mode
    jvp = jax.jit(lambda p, d: jax.jvp(f_, (p,), (d,), has_aux=True))
    total = lambda q: (lambda v, r: (jnp.sum(v), r))(*f_(q))  # noqa: E731
    grad = jax.jit(jax.grad(total, has_aux=True))
    g, report = grad(p)
    for kind in events:
        assert int(getattr(report, kind).sum()) >= 1, f"no {kind} in the run"
    assert require is None or require(report), "the run does not have the events the check needs"
    zero = _strong(jax.tree.map(jnp.zeros_like, p))
    value = jvp(p, zero)[0]
    for path, leaf in _leaves(g):
        assert np.all(np.isfinite(leaf)), f"reverse-mode gradient with respect to {path} is not finite: {leaf}"
    paths = [path for path, _ in _leaves(p)]
    groups = [[path] for path in paths] if joint is None else [paths] * joint
    out = {}
    for i, group in enumerate(groups):
        d = _direction(p, group, jax.random.PRNGKey(seed + i))
        if not any(np.any(np.asarray(x) != 0) for x in jax.tree.leaves(d)):
            continue  # nothing finite to move (e.g. a leaf of infinite limits)
        name = group[0] if joint is None else f"joint direction {i}"
        fwd = np.asarray(jvp(p, d)[1])
        rev = np.asarray(_dot(g, d, batch))

        def central(h):  # (the difference quotient, whether the events at +-h are the unperturbed run's)
            (vp, _, rp), (vm, _, rm) = jvp(_shift(p, d, h), zero), jvp(_shift(p, d, -h), zero)
            return (np.asarray(vp) - np.asarray(vm)) / (2 * h), _same(report, rp, batch) & _same(report, rm, batch)

        fd, same = central(h)
        assert np.all(np.isfinite(fwd)), f"forward-mode derivative along {name} is not finite: {fwd}"
        tol = atol * (1.0 + np.abs(np.asarray(value))) + rtol * np.abs(fd)  # (round-off of the differences)
        off = lambda fd: (np.abs(fwd - fd) > tol) | (np.abs(rev - fd) > tol)  # noqa: E731
        if np.any(same & off(fd)):
            # Two errors of the reference can show: a large third derivative (an event that is nearly grazing) makes
            # the quotient's O(h^2) error visible, and the located event times' round-off (about 1e-12 of the loss
            # after a few hundred quanta with held joints) its O(1/h) noise. Richardson's extrapolation from h and h/2
            # removes the first; from 10 h and 5 h it removes it with a tenth of the noise. A copy passes with either.
            fd2, same2 = central(h / 2)
            fd10, same10 = central(10 * h)
            fd5, same5 = central(5 * h)
            rich, rich10 = (4 * fd2 - fd) / 3, (4 * fd5 - fd10) / 3
            use10 = off(rich) & same10 & same5
            fd, same = np.where(use10, rich10, rich), np.where(use10, same10 & same5, same & same2)
        if batch:
            assert np.mean(same) >= min_share, f"{name}: the events changed within +-h in {np.sum(~same)} copies"
        else:
            assert same, f"{name}: the events change within +-{h}: choose another start"
        for mode, val in (("forward", fwd), ("reverse", rev)):
            err = np.where(same, np.abs(val - fd), 0.0)
            worst = np.unravel_index(np.argmax(err - tol), np.shape(err)) if np.ndim(err) else ()
            assert np.all(err <= tol), (f"{mode}-mode derivative along {name}: {np.asarray(val)[worst]} against "
                                        f"central differences {np.asarray(fd)[worst]} (copy {worst}; "
                                        f"{np.sum(err > tol)} beyond the tolerance)")
        out[name] = (fwd, rev, fd)
    for name in live:
        hits = [k for k in paths if name in k]
        assert hits, f"no leaf named {name} was checked (leaves: {paths})"
        for k in hits:
            part = out[k][2] if joint is None else _dot(g, _direction(p, [k], jax.random.PRNGKey(seed)), batch)
            assert np.any(np.abs(part) > 1e-6), f"{k}: the loss does not depend on it (vacuous check)"
    return out


def _weights(x):
    """Fixed weights that give every coordinate of a final state its own say in the loss."""
    return jnp.cos(jnp.arange(x.size, dtype=x.dtype).reshape(x.shape) * 0.7) + 1.5


def _loss_of(final):
    return jnp.sum(_weights(final.x) * final.x) + 0.3 * jnp.sum(_weights(final.v) * final.v)


# -- chains -----------------------------------------------------------------------------------------------------------

def _chain(n, links):
    """A free chain with point masses, joint damping and air drag, and with ``links`` rigid links (mass, centre of
    mass, inertia)."""
    k = n - 1
    if not links:
        return dc.Chain(jnp.linspace(0.8, 1.2, n), jnp.linspace(0.45, 0.35, k), k_omega=0.05, k_v=0.02)
    return dc.Chain(jnp.linspace(0.8, 1.2, n), jnp.linspace(0.45, 0.35, k), k_omega=0.05, k_v=0.02,
                    link_mass=jnp.linspace(0.5, 0.3, k),
                    link_com=jnp.stack([jnp.linspace(0.2, 0.15, k), jnp.full((k,), 0.03)], -1),
                    link_inertia=jnp.linspace(0.02, 0.01, k))


def _drop(n, steps, theta, base, base_v, limit, links=False, dt=DT, threshold=1.0):
    """f(p) for a chain of n points dropped on the ground with joint limits +-``limit`` (not on joint 1); the
    recursion solves a chain of point masses, dense KKT one with rigid links (the recursion's held joints are for point
    masses)."""
    chain, solver = _chain(n, links), (dc.KKT() if links else None)
    lim = jnp.concatenate([jnp.array([jnp.inf]), jnp.full((n - 2,), limit)])
    events = dc.Events(chain.n, ground=0.0, theta_min=-lim, theta_max=lim, threshold=threshold)
    p = dict(model=chain, events=events, theta=jnp.asarray(theta), base=jnp.asarray(base), base_v=jnp.asarray(base_v),
             tau=jnp.zeros((steps, n)) + 0.2 * jnp.sin(jnp.arange(steps) * 0.01)[:, None] * (jnp.arange(n) > 0))

    def f(p):
        start = dc.from_joint_angles(p["model"], p["theta"], base=p["base"], base_velocity=p["base_v"])
        final, (_, rep) = dc.event_rollout(p["model"], p["events"], dc.EventState(start), dc.Control(tau=p["tau"]), dt,
                                        solver=solver)
        return _loss_of(final.state), rep
    return f, p


def test_small_matrix_of_a_chain_dropped_on_the_ground():
    """The everyday form: a 2-point chain with damping and drag falls and its tip lands (an impact and a projection
    ran: where the masses' gradients were NaN)."""
    f, p = _drop(2, 250, [0.6], [0.0, 0.3], [1.0, -1.0], 1.0)
    check_matrix(f, p, events=("impacts",), live=(".m", "dist.L", "base", "['theta']", "tau", ".g", "z0", "k_v"))


@pytest.mark.slow
def test_derivatives_with_respect_to_one_of_equal_consecutive_torques():
    """Equal consecutive controls (a torque held for 40 quanta, the usual start of an optimisation): each quantum
    starts from the accelerations the last one cached, which are those of the last control. The derivative with respect
    to a single step's torque must still be that of the program a perturbation of that torque runs (a refresh at the
    start): forward and reverse equal central differences. They were off by up to 50 % (the cached accelerations
    counted as independent of the new control). With the seed's quantum the cache is exact; velocity Verlet's cached
    accelerations are those at the predicted velocity and a refresh's at the corrected one (an O(dt^2) difference of
    the two programs), which shows in its derivatives as 6e-5 at dt = 10 ms and 6e-6 at 5 ms."""
    chain = dc.free_chain(3, mass=1.0, length=0.5)
    events = dc.Events(chain.n, ground=-100.0)  # (events on, none happens: the cache holds over every quantum)
    start = dc.from_joint_angles(chain, jnp.array([0.3, 0.5, -0.4]), base=(0.0, 1.0))
    tau = jnp.zeros((40, chain.n)).at[:, 1].set(0.5)
    h = 1e-4  # (the losses are nearly linear in one torque: the quotient's error is round-off, ~1e-12 / h)
    for integrator, rtol in ((dc.SeedQuantum(), 1e-7), (dc.VelocityVerlet(), 1e-4)):
        # one program per integrator and mode (a Jacobian of both losses would be a vmapped reverse pass, which
        # compiles in twice the time of the two gradients); the forward program's primal gives the differences
        def loss(tau, integrator=integrator):
            final = dc.event_rollout(chain, events, dc.EventState(start), dc.Control(tau=tau), 1e-2,
                                     integrator=integrator, check=False)[0]
            return jnp.sum(final.state.x[:, 0] * jnp.arange(1.0, 5.0))

        rev = jax.jit(jax.grad(loss))(tau)
        jvp = jax.jit(lambda t, d, loss=loss: jax.jvp(loss, (t,), (d,)))
        for k in (0, 10, 39):
            e = jnp.zeros_like(tau).at[k, 1].set(1.0)
            fd = (float(jvp(tau + h * e, e)[0]) - float(jvp(tau - h * e, e)[0])) / (2 * h)
            assert abs(fd) > 1e-4
            for mode, val in (("reverse", float(rev[k, 1])), ("forward", float(jvp(tau, e)[1]))):
                assert abs(val - fd) <= rtol * abs(fd), \
                    f"{type(integrator).__name__}, {mode} mode, step {k}: {val} against {fd}"


@pytest.mark.slow
def test_matrix_of_a_chain_through_impacts_limit_hits_releases_and_halvings():
    """A 4-point chain dropped at dt = 5 ms with a low halving threshold: every kind of event happens."""
    f, p = _drop(4, 150, [0.6, 0.8, -0.5], [0.0, 1.0], [1.0, -1.0], 1.2, dt=5e-3, threshold=0.02)
    check_matrix(f, p, events=("impacts", "limit_hits", "releases", "limit_releases", "halvings"),
                 live=(".m", "dist.L", "damper_c", "k_v", ".g", "theta_max", "z0", "base", "['theta']", "tau"))


@pytest.mark.slow
def test_matrix_of_a_chain_with_rigid_links_through_an_impact_and_a_limit():
    f, p = _drop(3, 500, [0.6, 0.8], [0.0, 0.8], [1.0, -1.0], 1.0, links=True)
    check_matrix(f, p, events=("impacts", "limit_hits"), live=(".m", "bodies.mass", "bodies.com", "bodies.inertia", "dist.L", "damper_c", "k_v",
                             "theta_max", "z0", "base", "tau"))


INTEGRATORS = (dc.SeedQuantum(), dc.VelocityVerlet(), dc.SemiImplicitEuler(), dc.RK4(), dc.Projected(), dc.RATTLE())


@pytest.mark.slow
def test_matrix_of_rollouts_with_every_integrator():
    """A chain with rigid links, damping, drag and a slider point on a tilted rail, pinned at its first point, under
    torques, 150 steps with each integrator; the loss weighs each integrator's final state differently, so a wrong
    derivative of any of them shows."""
    n = 4
    chain = dc.Chain(jnp.linspace(0.8, 1.2, n), jnp.linspace(0.45, 0.35, n - 1), k_omega=0.05, k_v=0.02,
                     guided=jnp.arange(n) == 0, slider=jnp.arange(n) == n - 1,
                     s=jnp.array([0.6, 0.8]), c=-0.9, link_mass=jnp.array([0.5, 0.4, 0.3]),
                     link_com=jnp.array([[0.2, 0.03], [0.2, -0.02], [0.15, 0.01]]),
                     link_inertia=jnp.array([0.02, 0.015, 0.01]))
    p = dict(model=chain, theta=jnp.array([-1.8, 0.3, 0.25]), theta_dot=jnp.array([0.3, -0.2, 0.5]),
             tau=0.3 * jnp.sin(jnp.arange(150.0)[:, None] * 0.02 + jnp.arange(n)))

    def f(p):
        start = dc.project(p["model"], dc.from_joint_angles(p["model"], p["theta"], p["theta_dot"]))
        total = 0.0
        for k, integrator in enumerate(INTEGRATORS):
            final, _ = dc.rollout(p["model"], start, dc.Control(tau=p["tau"]), 2e-3, integrator=integrator)
            total = total + (k + 1.0) * _loss_of(final)
        return total, None

    check_matrix(f, p, rtol=1e-6, live=(".m", "bodies.mass", "bodies.com", "bodies.inertia", "dist.L", "damper_c",
                                        "k_v", ".g", "point_kinds.s", "point_kinds.c", "['theta']", "tau"))


# -- mechanisms -------------------------------------------------------------------------------------------------------

def _four_bar(stop=None, floor=False):
    """The four-bar of :func:`diffchain.systems.four_bar` with a spring, a rotational damper, air drag on its coupler
    point and a crank motor, and optionally the rocker's stop."""
    b = dc.MechanismBuilder()
    b.ground("A0", (0.0, 0.0)), b.ground("B0", (2.0, 0.0))
    b.point("A", (0.6, 0.8)), b.point("B", (2.3, 1.4))
    b.body("crank", "A0", "A", mass=1.0, inertia=0.1)
    b.body("coupler", "A", "B", mass=2.0, com=(0.8, 0.1), inertia=0.5)
    b.body("rocker", "B0", "B", mass=1.0, inertia=0.2)
    b.attach("C", "coupler", (1.0, -0.8))
    b.motor("drive", "ground", "crank")
    b.spring("spring", "B0", "C", k=20.0, L0=1.0, c=0.5)
    b.damper("joint", "crank", "coupler", c=0.3)
    b.drag("C", 0.05)
    if stop is not None:
        b.limit("stop", "ground", "rocker", lo=stop)
    return b.build()


MECH_LIVE = ("bodies.mass", "bodies.com", "bodies.inertia", "spring_k", "spring_L0", "spring_c", "damper_c", "k_v",
             ".g", "W", "offset", "tau")


@pytest.mark.slow
def test_matrix_of_a_mechanism_rollout():
    """The four-bar with a spring, a damper and drag, driven by its motor for 300 steps with the default integrator
    and with RK4 (dense KKT, a mechanism's default solver)."""
    mech, start = _four_bar()
    p = dict(model=mech, tau=2.0 + jnp.sin(jnp.arange(300.0) * 0.02)[:, None])

    def f(p):
        total = 0.0
        for k, integrator in enumerate((None, dc.RK4())):
            kw = {} if integrator is None else dict(integrator=integrator)
            final, _ = dc.rollout(p["model"], start, dc.Control(tau=p["tau"]), 1e-3, check=False, **kw)
            total = total + (k + 1.0) * _loss_of(final)
        return total, None

    check_matrix(f, p, live=MECH_LIVE)


@pytest.mark.slow
def test_matrix_of_a_mechanism_against_a_stop_and_an_obstacle():
    """The four-bar (with a spring, damping and drag) falls against its rocker's stop, is driven off it by the motor
    and its crank tip A hits a line above it (an impact, then A stuck there). The loss weighs the path too: at the
    end the linkage rests against the line, where its state no longer depends on the masses."""
    mech, start = _four_bar(stop=1.33)
    events = dc.Events(mech, lines=(jnp.array([[0.0, 0.85]]), jnp.array([[0.0, -1.0]])), contact=["A"])
    steps, dt = 240, 2e-3
    # a torque that changes every step: a quantum whose control equals the last one's reuses its accelerations
    # (velocity Verlet's cache), a scheme that differs from the refreshed one by O(dt^2), so central differences
    # along a direction that makes the controls differ would compare two schemes
    tau = jnp.where(jnp.arange(steps) * dt >= 0.26, 30.0, 0.0) + 0.5 * jnp.sin(jnp.arange(steps) * 0.05)
    p = dict(model=mech, events=events, tau=tau[:, None])

    def f(p):
        final, (path, rep) = dc.event_rollout(p["model"], p["events"], dc.EventState(start, model=p["model"]),
                                              dc.Control(tau=p["tau"]), dt, check=False)
        return _loss_of(final.state) + jnp.mean(_weights(path.state.x) * path.state.x), rep

    check_matrix(f, p, events=("impacts", "limit_hits", "limit_releases"), live=MECH_LIVE + ("theta_min", "z0"),
                 joint=3)


def _five_bar():
    """A five-bar linkage (two degrees of freedom), its second crank against a stop, driven by one motor."""
    b = dc.MechanismBuilder()
    b.ground("A0", (0.0, 0.0)), b.ground("E0", (2.0, 0.0))
    b.point("A", (0.0, 1.0)), b.point("B", (1.0, 1.6)), b.point("D", (2.0, 1.0))
    b.body("crank", "A0", "A", mass=1.0, inertia=0.08)
    b.body("left", "A", "B", mass=0.8, inertia=0.07)
    b.body("right", "B", "D", mass=0.8, inertia=0.07)
    b.body("crank2", "E0", "D", mass=1.2, inertia=0.1)
    b.motor("drive", "ground", "crank")
    b.limit("stop", "ground", "crank2", hi=1.75)
    return b.build()


@pytest.mark.slow
def test_five_bar_through_a_stop_hit_crank_angle_by_link_mass():
    """d(final crank angle)/d(link mass) of a five-bar whose second crank hits its stop: reverse, forward and central
    differences agree to 1e-6 relative (they were NaN, forward and reverse, where central differences give a finite
    value)."""
    mech, start = _five_bar()
    events = dc.Events(mech)
    steps = 600
    crank = mech.bodies.i[0], mech.bodies.j[0]

    def angle(mass):
        model = eqx.tree_at(lambda m: m.bodies.mass, mech, mass)
        final, (_, rep) = dc.event_rollout(model, events, dc.EventState(start, model=model),
                                           dc.Control(tau=jnp.full((steps, 1), 1.5)), DT, check=False)
        P = (model.W @ final.state.x.reshape(-1) + model.offset).reshape(-1, 2)
        d = P[crank[1]] - P[crank[0]]
        return jnp.arctan2(d[1], d[0]), rep

    mass = mech.bodies.mass
    value, rep = jax.jit(angle)(mass)
    assert int(rep.limit_hits.sum()) >= 1
    rev = jax.jit(jax.grad(lambda m: angle(m)[0]))(mass)
    fwd = jax.jit(jax.jacfwd(lambda m: angle(m)[0]))(mass)
    h = 1e-6
    for k in range(mass.shape[0]):
        e = jnp.zeros_like(mass).at[k].set(h)
        (vp, rp), (vm, rm) = jax.jit(angle)(mass + e), jax.jit(angle)(mass - e)
        assert _same(rep, rp) and _same(rep, rm)
        fd = float(vp - vm) / (2 * h)
        assert abs(fd) > 1e-4
        np.testing.assert_allclose([rev[k], fwd[k]], fd, rtol=1e-6)


# -- a batch of random drops ------------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.full_opt  # its runs (200 copies, up to 14 of them) cost more than its compile: 270 -> 208 s optimised
def test_matrix_of_a_batch_of_random_drops():
    """200 random drops of a 3-point chain on the ground against +-0.7 rad limits (random masses, lengths, angles,
    rates, heights and torques), in one vmapped program: every gradient finite in every copy, and in every copy whose
    events do not change within +-h, forward and reverse equal central differences.

    The torques change from quantum to quantum: with a control equal to the last quantum's, velocity Verlet starts
    from the accelerations it cached at the predicted velocity, otherwise it evaluates them at the corrected one
    (an O(dt^2) difference), so central differences that make equal controls unequal do not differentiate one
    program."""
    B, n, steps, dt = 200, 3, 225, 2e-3
    keys = jax.random.split(jax.random.PRNGKey(7), 6)
    u = lambda k, shape, lo, hi: jax.random.uniform(k, (B,) + shape, minval=lo, maxval=hi)  # noqa: E731
    chain = dc.Chain(jnp.ones(n), jnp.ones(n - 1), k_omega=0.05, k_v=0.02)
    chain = jax.tree.map(lambda a: jnp.broadcast_to(a, (B,) + a.shape) if eqx.is_inexact_array(a) else a, chain)
    chain = eqx.tree_at(lambda c: (c.m, c.dist.L), chain, (u(keys[0], (n,), 0.5, 1.5), u(keys[1], (n - 1,), 0.3, 0.6)))
    lim = jnp.array([jnp.inf, 0.7])
    events = dc.Events(n, ground=0.0, theta_min=-lim, theta_max=lim)
    p = dict(model=chain, theta=u(keys[2], (n - 1,), -0.5, 0.5),
             base=jnp.stack([jnp.zeros(B), u(keys[3], (), 1.0, 1.4)], -1),
             base_v=jnp.stack([u(keys[4], (), -1.0, 1.0), u(keys[4], (), -2.5, -1.5)], -1), tau=u(keys[5], (1, n), -0.3, 0.3) * jnp.cos(0.02 * jnp.arange(steps))[:, None])

    def one(p):
        start = dc.from_joint_angles(p["model"], p["theta"], base=p["base"], base_velocity=p["base_v"])
        final, (_, rep) = dc.event_rollout(p["model"], events, dc.EventState(start), dc.Control(tau=p["tau"]), dt)
        return _loss_of(final.state), rep

    def f(p):  # every inexact leaf batched, the masks and indices shared
        diff, static = eqx.partition(p, eqx.is_inexact_array)
        return jax.vmap(lambda d: one(eqx.combine(d, static)))(diff)

    def enough(rep):  # most copies land, some hit a limit
        return int(rep.impacts.any((1, 2)).sum()) >= 0.9 * B and int(rep.limit_hits.sum()) >= B // 20

    # rtol 1e-5: in copies with many held-joint events the loss carries about 1e-12 of round-off, which limits the
    # central differences themselves to a few 1e-7 (measured on copy 75: the quotients at h = 1e-4 ... 1e-7 spread
    # around the forward and reverse derivatives, which agree with each other, by 5e-8 ... 2e-5)
    # two joint directions (every leaf moved at once): each costs two to six vmapped runs of 225 quanta
    check_matrix(f, p, batch=True, rtol=1e-5, joint=2, require=enough, live=(".m", "dist.L", "['theta']", "base", "tau"))
