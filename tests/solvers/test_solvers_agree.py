"""The seed-000 recursion and the KKT form solve the same equations: they must agree to round-off (SPEC §8)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import diffchain as dc
from strategies import make_problem, random_problem
from diffchain._model import forces as _forces
from diffchain._solvers import recursive as _recursive
from diffchain._constraints.system import system_terms
from diffchain._solvers import dense

rec = jax.jit(lambda c, s, u, stab: (lambda sol: (sol.a, sol.forces))(dc.Recursive()(c, s, u, stab)))
kkt = jax.jit(lambda c, s, u, stab: (lambda sol: (sol.a, sol.forces))(dc.KKT()(c, s, u, stab)))
banded = jax.jit(lambda c, s, u, stab: (lambda sol: (sol.a, sol.forces))(dc.Banded()(c, s, u, stab)))


def _rel(x, y):
    return float(np.max(np.abs(x - y)) / max(np.max(np.abs(y)), 1e-300))


def assert_solvers_agree(problem, stab=None, solver=None):
    """The recursion (or ``solver``, jitted as ``rec``) == KKT: accelerations to 1e-10 relative, rod tensions to 1e-9
    where they are determined (a rod between two guided points carries none: seed §6.1)."""
    chain, state, control, desc = problem
    a1, phi1 = (solver or rec)(chain, state, control, stab)
    a2, phi2 = kkt(chain, state, control, stab)
    assert np.all(np.isfinite(a1)), desc
    assert _rel(a1, a2) <= 1e-10, desc
    free_rod = ~(np.asarray(chain.guided[:-1]) & np.asarray(chain.guided[1:]))
    if free_rod.any():
        assert _rel(np.asarray(phi1)[free_rod], np.asarray(phi2)[free_rod]) <= 1e-9, desc


@pytest.mark.slow
@given(random_problem(), st.sampled_from([None, 0.01]))
def test_recursive_equals_kkt_on_random_chains(problem, stab):
    assert_solvers_agree(problem, stab)


@pytest.mark.slow
@given(random_problem(pose="random"), st.sampled_from([None, 0.01]))
def test_the_sparse_method_equals_kkt_on_random_chains(problem, stab):
    """Seed 001's sparse method (dc.Banded: the tridiagonal range-space form, guided points and sliders eliminated
    first) against dense KKT on random chains of point masses: accelerations to 1e-10, determined tensions to 1e-9."""
    assert_solvers_agree(problem, stab, banded)


@pytest.mark.slow
@given(random_problem())
def test_accelerations_satisfy_every_constraint(problem):
    """Independent of both solvers: the returned a satisfies the rod equations (seed eq. 4) and the point constraints,
    and m a = F^e + constraint forces with the rod forces the recursion reports (Newton's law per point)."""
    chain, state, control, desc = problem
    a, phi = rec(chain, state, control, None)
    a, phi = np.asarray(a), np.asarray(phi)
    x, v = np.asarray(state.x), np.asarray(state.v)
    d = x[1:] - x[:-1]
    rho = np.linalg.norm(d, axis=1)
    r = d / rho[:, None]
    dv = v[1:] - v[:-1]
    e = (np.sum(dv**2, 1) - np.sum(r * dv, 1) ** 2) / rho
    g, sl = np.asarray(chain.guided), np.asarray(chain.slider) & ~np.asarray(chain.guided)
    both_guided = g[:-1] & g[1:]
    scale = max(np.abs(a).max(), 1.0)
    link_eq = np.sum(r * (a[:-1] - a[1:]), 1) - e
    assert np.all(np.abs(link_eq[~both_guided]) <= 1e-9 * scale), desc
    assert np.allclose(a[g], np.asarray(control.a_w)[g], atol=1e-12 * scale), desc
    assert np.all(np.abs(np.sum(np.asarray(chain.s)[sl] * a[sl], 1)) <= 1e-9 * scale), desc
    # residual force on each free point must vanish; on a slider it must be along s
    Fe = np.asarray(_forces.external_forces(chain, state, control))
    rod = np.zeros_like(a)
    rod[1:] += r * phi[:, None]
    rod[:-1] -= r * phi[:, None]
    resid = np.asarray(chain.m)[:, None] * a - Fe - rod
    free = ~g & ~sl
    fscale = max(np.abs(Fe).max(), np.abs(rod).max(), 1.0)
    assert np.all(np.abs(resid[free]) <= 1e-9 * fscale), desc
    s = np.asarray(chain.s)[sl]
    tangential = resid[sl] - np.sum(resid[sl] * s, 1)[:, None] * s
    assert np.all(np.abs(tangential) <= 1e-9 * fscale), desc


def test_recursion_is_the_seed_closed_form_for_an_ordinary_joint():
    """Seed eqs. (6)-(9) written out literally for a 2-point free chain agree with the projector-form sweep."""
    rng = np.random.default_rng(3)
    m = np.array([1.3, 0.7])
    r = np.array([[0.6, 0.8], [0.0, 0.0]])
    e = np.array([0.4, 0.0])
    Fe = rng.normal(size=(2, 2))
    P = np.broadcast_to(np.eye(2), (2, 2, 2))
    A, b, C, d = map(np.asarray, _recursive.abcd_backward(jnp.asarray(m), jnp.asarray(r), jnp.asarray(e),
                                                             jnp.asarray(Fe), jnp.asarray(P), jnp.zeros((2, 2))))
    A2, b2 = np.eye(2) / m[1], Fe[1] / m[1]  # terminal joint, seed §6.2
    r1 = r[0]
    D = 1 + m[0] * r1 @ A2 @ r1
    C1 = np.outer(r1, r1) / D  # (6)
    d1 = C1 @ Fe[0] - m[0] * r1 * (r1 @ b2 + e[0]) / D  # (7)
    A1 = np.eye(2) / m[0] - np.outer(r1, r1) / (m[0] * D)  # (8)
    b1 = A1 @ Fe[0] + r1 * (r1 @ b2 + e[0]) / D  # (9)
    for got, want in [(A[1], A2), (b[1], b2), (C[1], 0 * A2), (d[1], 0 * b2), (A[0], A1), (b[0], b1), (C[0], C1),
                      (d[0], d1)]:
        np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-14)


def _sweep_inputs(rng, n, kind=None):
    """Random per-point inputs of the sweeps: unit rods r (a terminal rod r_n = 0), e (e_n = 0), F^e, and the point
    constraints P, a0 of ``kind`` (0 free, 1 slider, 2 guided; random if None)."""
    ang = rng.uniform(0, 2 * np.pi, n)
    r = np.stack([np.cos(ang), np.sin(ang)], -1)
    r[-1] = 0.0
    e = rng.normal(size=n)
    e[-1] = 0.0
    Fe, a0 = rng.normal(size=(n, 2)), rng.normal(size=(n, 2))
    s = rng.normal(size=(n, 2))
    s /= np.linalg.norm(s, axis=-1, keepdims=True)
    kind = rng.integers(0, 3, n) if kind is None else kind
    P = np.where((kind == 0)[:, None, None], np.eye(2), np.eye(2) - s[:, :, None] * s[:, None, :])
    P = np.where((kind == 2)[:, None, None], 0.0, P)
    return r, e, Fe, P, np.where((kind == 0)[:, None], 0.0, a0)


@pytest.mark.parametrize("form", ["scan", "blocked", "vmap", "rows"])
def test_component_sweeps_are_the_reference_sweeps(form):
    """The hot path (:func:`abcd_sweeps_c`, by components) = the readable matrix sweeps on random inputs with free,
    slider and guided points and a terminal rod (accelerations and rod tensions, to round-off); in all of its forms:
    the ``lax.scan``, the scan over blocks of points (here 2 blocks of 4 after a head of 1), under ``vmap``, and with a
    row of right-hand sides per point: its second column, other forces and a^w, against a second run of the
    reference."""
    rng = np.random.default_rng(7)
    n = 9
    m = rng.uniform(0.5, 2.0, n)
    r, e, Fe, P, a0 = _sweep_inputs(rng, n)
    A, b, C, d = _recursive.abcd_backward(*map(jnp.asarray, (m, r, e, Fe, P, a0)))
    a_ref, Fd = _recursive.forward_sweep(A, b, C, d)
    args = tuple(map(jnp.asarray, (m, r[:, 0], r[:, 1], e, Fe[:, 0], Fe[:, 1], P[:, 0, 0], P[:, 0, 1], P[:, 1, 1],
                                   a0[:, 0], a0[:, 1])))
    if form == "vmap":
        ax, ay, phi = (o[0] for o in jax.vmap(_recursive.abcd_sweeps_c)(*(x[None] for x in args)))
    elif form == "rows":
        Fe, a0 = rng.normal(size=Fe.shape), np.where(a0 != 0, rng.normal(size=a0.shape), 0.0)
        A, b, C, d = _recursive.abcd_backward(*map(jnp.asarray, (m, r, e, Fe, P, a0)))
        a_ref, Fd = _recursive.forward_sweep(A, b, C, d)
        second = dict(zip((4, 5, 9, 10), (Fe[:, 0], Fe[:, 1], a0[:, 0], a0[:, 1])))
        rows = [jnp.stack([q, jnp.asarray(second.get(i, q))], 1) for i, q in enumerate(args)]
        ax, ay, phi = (o[:, 1] for o in _recursive.abcd_sweeps_c(*rows))
    else:
        ax, ay, phi = _recursive.abcd_sweeps_c(*args, block=4 if form == "blocked" else None)
    np.testing.assert_allclose(np.stack([ax, ay], -1), a_ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(phi[:-1], np.sum(r[:-1] * np.asarray(Fd)[1:], -1), rtol=1e-12, atol=1e-12)


def test_the_recursion_runs_its_sweeps_in_the_blocks_it_is_given():
    """``Recursive(block=b)``: the sweeps of Part I (a rollout step) and of Part II (held joints) and the projection
    of the default integrator run as scans over blocks of b points (nested scans in the program), and give what one
    scan over all points (``block=None``) gives, bit for bit, and KKT's accelerations to round-off."""
    rng = np.random.default_rng(5)
    chain = dc.pendulum(11)
    state = dc.from_joint_angles(chain, rng.uniform(-1, 1, 11), rng.uniform(-1, 1, 11))
    held = jnp.zeros(12, bool).at[3].set(True).at[7].set(True)

    def outputs(solver):
        return (dc.forward_dynamics(chain, state, None, solver=solver),
                solver.held(chain, state, dc.Control(n=12), held, jnp.zeros(12)).a,
                dc.step(chain, state, dc.Control(n=12), 1e-3, solver=solver).x)

    def scans(solver):
        return str(jax.make_jaxpr(lambda s: dc.step(chain, s, dc.Control(n=12), 1e-3, solver=solver,
                                                      check=False))(state)).count("scan[")

    assert scans(dc.Recursive(block=4)) > scans(dc.Recursive(block=None)) == scans(dc.Recursive())  # 12 < 2 * 32
    for x, y in zip(outputs(dc.Recursive(block=4)), outputs(dc.Recursive(block=None))):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_allclose(outputs(dc.Recursive(block=4))[0], dc.forward_dynamics(chain, state, None,
                                                                                      solver=dc.KKT()), atol=1e-10)
    with pytest.raises(ValueError, match="block must be None or an integer >= 1, got 0"):
        dc.Recursive(block=0)


def test_inertial_component_sweeps_equal_matrix_sweeps():
    """The rigid-link hot path (:func:`_inertial_sweeps_c`, by components) = the readable matrix sweeps
    (:func:`abcd_backward_inertial`, :func:`forward_sweep`) on random inputs: random symmetric positive mass blocks and
    general coupling blocks M12, free, slider and guided points, a terminal rod (accelerations and rod tensions)."""
    rng = np.random.default_rng(8)
    n = 7
    L = rng.normal(size=(n, 2, 2))
    B = L @ np.swapaxes(L, 1, 2) + 0.5 * np.eye(2)
    M12 = 0.3 * rng.normal(size=(n, 2, 2))
    M12[-1] = 0.0
    r, e, Fe, P, a0 = _sweep_inputs(rng, n, kind=np.array([2, 0, 1, 0, 2, 1, 0]))
    coeffs, (k, phi0) = _recursive.abcd_backward_inertial(*map(jnp.asarray, (B, r, e, Fe, P, a0, M12)))
    a_ref, Fd = _recursive.forward_sweep(*coeffs)
    comps = lambda X, ij: tuple(jnp.asarray(X[:, i, j]) for i, j in ij)  # noqa: E731
    vec = lambda X: (jnp.asarray(X[:, 0]), jnp.asarray(X[:, 1]))  # noqa: E731
    sym, full = ((0, 0), (0, 1), (1, 1)), ((0, 0), (0, 1), (1, 0), (1, 1))
    ax, ay, phi = _recursive._inertial_sweeps_c(comps(B, sym), vec(r), jnp.asarray(e), vec(Fe), comps(P, sym),
                                                  vec(a0), comps(M12, full))
    np.testing.assert_allclose(np.stack([ax, ay], -1), a_ref, rtol=1e-12, atol=1e-12)
    phi_ref = np.sum(np.asarray(k) * np.asarray(Fd), -1) + np.asarray(phi0)
    np.testing.assert_allclose(phi, phi_ref, rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------ every solver on every model it applies to
SOLVERS = {"Recursive": dc.Recursive(), "ShortChain": dc.ShortChain(), "Banded": dc.Banded(),
           "RangeSpace": dc.RangeSpace(), "NullSpace": dc.NullSpace(), "Larin": dc.Larin()}
CHAINS = [pytest.param(3, 0, False, id="n3"), pytest.param(5, 1, False, id="n5"), pytest.param(4, 2, True, id="n4-links")]


@pytest.mark.parametrize("name", list(SOLVERS))
@pytest.mark.parametrize("n, seed, links", CHAINS)
def test_every_solver_agrees_with_kkt_on_chains(name, n, seed, links):
    """Every solver equals dense KKT on a chain, with guided points and sliders (Part I) and with held joints on a
    free chain (Part II): accelerations to 1e-10, tensions and held torques to 1e-9 relative. The dense solvers solve
    the chain's own (M, Q, J, gamma) with rank decisions; KKT solves it directly. The recursion's Part II takes point
    masses only and says so for rigid links (tests/solvers/test_active.py); the written-out form takes short chains
    of point masses only and says so; the sparse method takes point masses and no held joints and says so."""
    solver = SOLVERS[name]
    chain, state, control, desc = make_problem(n, seed, "random", kinds=True, links=links)
    if links and name == "ShortChain":
        with pytest.raises(ValueError, match=r"ShortChain: solves chains of 2 to SMALL_MAX = 8 point masses, got a "
                                             r"chain with rigid links: use Recursive\(\)"):
            solver(chain, state, control)
        return
    if links and name == "Banded":
        with pytest.raises(ValueError, match=r"Banded: the sparse method needs a diagonal mass matrix"):
            solver(chain, state, control)
        return
    sol, ref = jax.jit(solver)(chain, state, control), jax.jit(dc.KKT())(chain, state, control)
    (a, phi), (a_k, phi_k) = (sol.a, sol.forces), (ref.a, ref.forces)
    assert _rel(a, a_k) <= 1e-10, desc
    free_rod = ~(np.asarray(chain.guided[:-1]) & np.asarray(chain.guided[1:]))
    assert _rel(np.asarray(phi)[free_rod], np.asarray(phi_k)[free_rod]) <= 1e-9, desc
    if links and name == "Recursive":
        return
    chain, state, control, desc = make_problem(n, seed + 10, "random", kinds=False, links=links)
    if name == "Banded":
        with pytest.raises(NotImplementedError, match="Banded: held joints"):
            solver.held(chain, state, control, np.ones(n, bool), np.zeros(n))
        return
    rng = np.random.default_rng(seed)
    held = rng.uniform(size=n) < 0.5
    alpha_w = rng.normal(size=n)
    out = jax.jit(solver.held)(chain, state, control, held, alpha_w)
    ref = jax.jit(dc.KKT().held)(chain, state, control, held, alpha_w)
    assert _rel(out.a, ref.a) <= 1e-10, desc
    assert _rel(out.forces, ref.forces) <= 1e-9 and _rel(out.tau_w, ref.tau_w) <= 1e-9, desc
    assert np.allclose(np.asarray(dc.joint_accelerations(state, out.a))[held], alpha_w[held], atol=1e-9), desc


@pytest.mark.parametrize("name", ["Recursive", "ShortChain"])
def test_projection_by_the_recursion_equals_the_dense_one(name):
    """dc.project of a chain off its constraints (guided points, sliders): the recursion's saddle-point solves equal
    the dense system's, positions and velocities to 1e-10, and the result is on the rods."""
    chain, state, _, desc = make_problem(5, 3, "random", kinds=True, links=False)
    rng = np.random.default_rng(4)
    off = dc.State(state.x + 1e-3 * rng.standard_normal(state.x.shape), state.v + rng.standard_normal(state.x.shape))
    project = jax.jit(dc.project, static_argnums=2)
    p = project(chain, off, 3, SOLVERS[name])
    p_k = project(chain, off, 3, dc.KKT())
    assert _rel(p.x, p_k.x) <= 1e-10 and _rel(p.v, p_k.v) <= 1e-10, desc
    assert float(dc.constraint_violation(chain, p)[0]) < 1e-10, desc


def test_every_solver_returns_the_same_record():
    """One Solution from every solver and question (its fields' shapes, by jax.eval_shape): a chain's a (n, 2) and rod
    tensions (n-1,), with held joints their torques (n,) (None without), a system's q_dd (N,), one multiplier per row
    and its rank information (the values are checked to round-off by the tests above)."""
    chain, state, control, _ = make_problem(4, 1, "random", kinds=False, links=False)
    held = jnp.array([False, True, False, True])
    M, Q, J, gamma, on = system_terms(chain, state, control)
    for name, solver in {**SOLVERS, "KKT": dc.KKT()}.items():
        sol = jax.eval_shape(solver, chain, state, control)
        sol_held = sol if name == "Banded" else jax.eval_shape(solver.held, chain, state, control, held, jnp.zeros(4))
        for s in (sol, sol_held):
            assert isinstance(s, dc.Solution) and s.a.shape == (4, 2) and s.forces.shape == (3,), name
        assert sol.tau_w is None and (name == "Banded" or sol_held.tau_w.shape == (4,)), name
        if not solver.chains_only:
            system = jax.eval_shape(solver.system, M, Q, J, gamma, on)
            assert system.a.shape == (8,) and system.forces.shape == (J.shape[0],), name
            assert isinstance(system.info, dc.Info) and system.info.rank.shape == (), name


@pytest.mark.parametrize("solver", [dc.Recursive(), dc.ShortChain()], ids=["recursive", "short"])
def test_the_recursion_refuses_a_mechanism(solver):
    with pytest.raises(TypeError, match="solves .*serial chains only"):
        solver.system(jnp.eye(2), jnp.zeros(2), jnp.ones((1, 2)), jnp.zeros(1), jnp.ones(1, bool))


def test_short_chain_refuses_a_long_chain():
    chain = dc.pendulum(9)
    state = dc.from_joint_angles(chain, jnp.full(9, 0.2))
    with pytest.raises(ValueError, match=r"ShortChain: solves chains of 2 to SMALL_MAX = 8 point masses, got a chain "
                                         r"with n = 10 points"):
        dc.forward_dynamics(chain, state, solver=dc.ShortChain())


DENSE = {"KKT": dc.KKT, "RangeSpace": dc.RangeSpace, "NullSpace": dc.NullSpace, "Larin": dc.Larin}


@pytest.mark.parametrize("name", list(DENSE))
def test_every_dense_factorization_agrees_with_kkt(name):
    """The dense solvers' other factorizations against the default KKT (LAPACK for one system, as the test above runs
    every solver): with ``factorization="xla"`` (the XLA loops) on one chain with guided points and sliders, and with
    the default under ``vmap`` over two states (which runs the same loops) with held joints: accelerations to 1e-10,
    tensions and held torques to 1e-9 relative."""
    chain, state, control, desc = make_problem(5, 1, "random", kinds=True, links=False)
    sol, ref = jax.jit(DENSE[name](factorization="xla"))(chain, state, control), kkt(chain, state, control, None)
    assert _rel(sol.a, ref[0]) <= 1e-10 and _rel(sol.forces, ref[1]) <= 1e-9, desc
    chain, state, control, desc = make_problem(5, 11, "random", kinds=False, links=False)
    states = dc.State(jnp.stack([state.x, state.x]), jnp.stack([state.v, -state.v]), jnp.stack([state.t, state.t]))
    held, alpha_w = np.array([True, False, True, False, False]), np.linspace(-1.0, 1.0, 5)
    out = jax.jit(jax.vmap(lambda s: DENSE[name]().held(chain, s, control, held, alpha_w)))(states)
    for i in range(2):
        ref = jax.jit(dc.KKT().held)(chain, jax.tree.map(lambda a: a[i], states), control, held, alpha_w)
        assert _rel(out.a[i], ref.a) <= 1e-10, desc
        assert _rel(out.forces[i], ref.forces) <= 1e-9 and _rel(out.tau_w[i], ref.tau_w) <= 1e-9, desc


@pytest.mark.parametrize("factorization", ["auto", "xla"])
def test_range_space_derivatives_are_those_of_the_saddle_point_solution(factorization):
    """The range-space method's derivatives (implicit, through its saddle-point matrix) with a row left out of the
    independent set S: reverse and forward mode, of one system and under vmap, equal central differences of
    numpy.linalg.solve of ``[[M, J_S^T], [J_S, 0]] [q_dd; -lambda_S] = [Q; gamma_S]``; lambda off S is 0."""
    rng = np.random.default_rng(5)
    n, m = 6, 4
    X = rng.normal(size=(n, n))
    args = [X @ X.T + np.eye(n), rng.normal(size=n), rng.normal(size=(m, n)), rng.normal(size=m)]
    sel = np.array([True, False, True, True])
    w = rng.normal(size=n + m)

    def reference(M, Q, J, gamma):
        K = np.block([[M, J[sel].T], [J[sel], np.zeros((3, 3))]])
        x = np.linalg.solve(K, np.concatenate([Q, gamma[sel]]))
        lam = np.zeros(m)
        lam[sel] = -x[n:]
        return w @ np.concatenate([x[:n], lam])

    def loss(M, Q, J, gamma):
        qdd, lam = dense.range_space_solve(M, Q, J, gamma, sel, factorization)
        return jnp.sum(w * jnp.concatenate([qdd, lam]))

    dirs = [rng.normal(size=a.shape) for a in args]
    dirs[0] = dirs[0] + dirs[0].T                       # M stays symmetric
    eps = 1e-6
    fd = (reference(*(a + eps * d for a, d in zip(args, dirs))) - reference(*(a - eps * d for a, d in zip(args, dirs)))
          ) / (2 * eps)
    np.testing.assert_allclose(jax.jit(loss)(*args), reference(*args), rtol=1e-12)
    reverse = lambda a, d: sum(jnp.sum(g * t) for g, t in zip(jax.grad(loss, (0, 1, 2, 3))(*a), d))  # noqa: E731
    forward = lambda a, d: jax.jvp(loss, tuple(a), tuple(d))[1]  # noqa: E731
    for derivative in (reverse, forward):
        np.testing.assert_allclose(jax.jit(derivative)(args, dirs), fd, rtol=1e-7, atol=1e-9)
        twice = jax.jit(jax.vmap(derivative))([np.stack([a, a]) for a in args], [np.stack([d, 2 * d]) for d in dirs])
        np.testing.assert_allclose(twice, [fd, 2 * fd], rtol=1e-7, atol=1e-9)
