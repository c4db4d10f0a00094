"""The small factorizations in XLA operations (diffchain._xla.linalg) against numpy's LAPACK, the factorization choice
of the dense solves (LAPACK for one system, the XLA loops for a batch: ``factorization="auto"``), and the batched
programs of chains and mechanisms free of LAPACK custom calls (batched LAPACK kernels of jaxlib 0.10 deadlock XLA's CPU
thread pool when two run at once)."""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc
from diffchain._events.constraints import _mass_metric_step
from diffchain import systems
from diffchain._xla.linalg import (FACTORIZATIONS, apply_q, apply_qt, cholesky, householder_qr, solve, solve_lower,
                                   solve_upper)


def _matrices():
    rng = np.random.default_rng(0)
    full = rng.normal(size=(9, 5))
    deficient = full.copy()
    deficient[:, 3] = deficient[:, 1] + 2 * deficient[:, 0]   # rank 4
    zero_column = full.copy()
    zero_column[:, 2] = 0.0
    return [full, deficient, zero_column, rng.normal(size=(4, 4))]


@pytest.mark.parametrize("M", _matrices())
def test_householder_qr_is_a_qr_factorization(M):
    p, m = M.shape
    R, V, beta = jax.jit(householder_qr)(jnp.asarray(M))
    Q = jax.vmap(lambda e: apply_q(V, beta, e), 1, 1)(jnp.eye(p))    # Q e_j column by column
    np.testing.assert_allclose(Q.T @ Q, np.eye(p), atol=1e-14)
    np.testing.assert_allclose(Q[:, :m] @ R, M, atol=1e-13)
    np.testing.assert_array_equal(np.tril(np.asarray(R), -1), 0.0)
    if np.linalg.matrix_rank(M) == m:  # (R is unique up to the signs of its rows only then)
        np.testing.assert_allclose(np.abs(R), np.abs(np.linalg.qr(M)[1]), rtol=1e-12, atol=1e-13)
    b = np.random.default_rng(1).normal(size=p)
    np.testing.assert_allclose(apply_qt(V, beta, jnp.asarray(b)), Q.T @ b, atol=1e-13)


def test_cholesky_and_triangular_solves_equal_lapack():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(6, 6))
    A = X @ X.T + 0.1 * np.eye(6)
    L = jax.jit(cholesky)(jnp.asarray(A))
    np.testing.assert_allclose(L, np.linalg.cholesky(A), rtol=1e-12, atol=1e-14)
    for B in (rng.normal(size=6), rng.normal(size=(6, 3))):
        np.testing.assert_allclose(solve_lower(L, jnp.asarray(B)), np.linalg.solve(L, B), rtol=1e-11, atol=1e-13)
        np.testing.assert_allclose(solve_upper(L.T, jnp.asarray(B)), np.linalg.solve(L.T, B), rtol=1e-11,
                                   atol=1e-13)


@pytest.mark.parametrize("dense", [False, True])
def test_mass_metric_step_is_the_projection_in_the_mass_metric(dense):
    """dq = M^-1 J^T (J M^-1 J^T)^-1 (target - J q) for full-rank rows J (unit rows, as the event rows are), with a
    diagonal and a dense mass metric; zero rows are ignored."""
    rng = np.random.default_rng(3)
    J = rng.normal(size=(4, 10))
    J /= np.linalg.norm(J, axis=1, keepdims=True)
    q, target = rng.normal(size=(5, 2)), rng.normal(size=4)
    if dense:
        X = rng.normal(size=(10, 10))
        M = X @ X.T + np.eye(10)
        mass = M
    else:
        mass = rng.uniform(0.5, 2.0, 10)
        M = np.diag(mass)
    Minv_Jt = np.linalg.solve(M, J.T)
    expected = Minv_Jt @ np.linalg.solve(J @ Minv_Jt, target - J @ q.reshape(-1))
    J0 = np.concatenate([J, np.zeros((2, 10))])               # two rows switched off
    dq = jax.jit(_mass_metric_step)(jnp.asarray(mass), jnp.asarray(J0), jnp.asarray(q),
                                    jnp.asarray(np.concatenate([target, np.zeros(2)])))
    np.testing.assert_allclose(dq.reshape(-1), expected, rtol=1e-8, atol=1e-10)


@pytest.mark.slow
def test_mass_metric_step_reverse_mode_matches_central_differences():
    """grad through the loops (QR, Cholesky, substitutions) of the dense-metric projection step, with respect to the
    metric, the rows, the point and the target, equals central differences."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(6, 6))
    args = (jnp.asarray(X @ X.T + np.eye(6)), jnp.asarray(rng.normal(size=(3, 6))), jnp.asarray(rng.normal(size=(3, 2))),
            jnp.asarray(rng.normal(size=3)))
    w = jnp.asarray(rng.normal(size=(3, 2)))
    f = lambda *a: jnp.sum(w * _mass_metric_step(*a))  # noqa: E731
    grads = jax.jit(jax.grad(f, argnums=(0, 1, 2, 3)))(*args)
    eps = 1e-6
    for i, (a, g) in enumerate(zip(args, grads)):
        d = jnp.asarray(rng.normal(size=a.shape))
        plus, minus = list(args), list(args)
        plus[i], minus[i] = a + eps * d, a - eps * d
        fd = (f(*plus) - f(*minus)) / (2 * eps)
        np.testing.assert_allclose(jnp.sum(g * d), fd, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("n", [1, 2, 6])
def test_solve_equals_lapack_with_implicit_derivatives(n):
    """solve (Gauss–Jordan with partial pivoting, a zero leading entry forcing a row swap) equals numpy's LAPACK solve
    for a vector and a matrix right-hand side, batched too; its derivatives (implicit: the transposed solve) equal those of
    jnp.linalg.solve in both arguments; a singular matrix gives non-finite numbers, as LAPACK's does."""
    rng = np.random.default_rng(n)
    A, b, B = rng.normal(size=(n, n)), rng.normal(size=n), rng.normal(size=(n, 3))
    if n > 1:
        A[0, 0] = 0.0
    np.testing.assert_allclose(solve(A, b), np.linalg.solve(A, b), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(solve(A, B), np.linalg.solve(A, B), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(jax.vmap(solve)(jnp.stack([A, A.T]), jnp.stack([b, b])),
                               np.stack([np.linalg.solve(A, b), np.linalg.solve(A.T, b)]), rtol=1e-12, atol=1e-13)
    ours, lapack = [jax.grad(lambda A, b, how=how: jnp.sum(jnp.sin(how(A, b))), (0, 1))(A, b)
                    for how in (solve, jnp.linalg.solve)]
    for x, y in zip(ours, lapack):
        np.testing.assert_allclose(x, y, rtol=1e-11, atol=1e-12)
    assert not np.all(np.isfinite(solve(np.zeros((2, 2)), np.ones(2))))


def _lapack_calls(f, *args):
    return [c for c in set(re.findall(r'custom_call_target="([^"]+)"', jax.jit(f).lower(*args).as_text(dialect="hlo")))
            if "lapack" in c]


def _batched_lapack_calls(f, *args):
    """The LAPACK custom calls of ``f``'s program with a batch dimension (the kernels that split it over the pool)."""
    hlo = jax.jit(f).lower(*args).as_text(dialect="hlo").splitlines()
    return [line for line in hlo if "lapack" in line and 'num_batch_dims="0"' not in line]


def _system(rng, n):
    A = rng.normal(size=(n, n)) + n * np.eye(n)
    A[0, 0] = 0.0          # a zero leading entry: the elimination must swap rows
    return A


@pytest.mark.parametrize("factorization", FACTORIZATIONS)
def test_every_factorization_solves_as_numpy_with_derivatives_by_central_differences(factorization):
    """solve(A, B, factorization) for one system and under vmap (batched matrices; one matrix and batched right-hand
    sides; nested vmaps) equals numpy.linalg.solve, and its reverse- and forward-mode derivatives in A and b, of one
    system and batched, equal central differences of numpy.linalg.solve (f = w . x along a random direction)."""
    rng = np.random.default_rng(11)
    n, batch = 5, 3
    As = np.stack([_system(rng, n) for _ in range(batch)])
    bs, B = rng.normal(size=(batch, n)), rng.normal(size=(n, 2))
    A, b = As[0], bs[0]
    f = lambda A, b: solve(A, b, factorization)  # noqa: E731
    np.testing.assert_allclose(jax.jit(f)(A, b), np.linalg.solve(A, b), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(jax.jit(f)(A, B), np.linalg.solve(A, B), rtol=1e-12, atol=1e-13)
    ref = np.stack([np.linalg.solve(a, c) for a, c in zip(As, bs)])
    np.testing.assert_allclose(jax.jit(jax.vmap(f))(As, bs), ref, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(jax.jit(jax.vmap(f, (None, 0)))(A, bs), np.linalg.solve(A, bs.T).T, rtol=1e-12,
                               atol=1e-13)
    np.testing.assert_allclose(jax.jit(jax.vmap(f, (None, 0)))(A, np.stack([B, 2 * B])),
                               np.stack([np.linalg.solve(A, B), np.linalg.solve(A, 2 * B)]), rtol=1e-12, atol=1e-13)
    every = np.stack([[np.linalg.solve(a, c) for c in bs] for a in As])
    np.testing.assert_allclose(jax.jit(jax.vmap(jax.vmap(f, (None, 0)), (0, None)))(As, bs), every, rtol=1e-12,
                               atol=1e-13)
    np.testing.assert_allclose(jax.jit(jax.vmap(jax.vmap(f, (0, None)), (None, 0)))(As, bs),
                               np.swapaxes(every, 0, 1), rtol=1e-12, atol=1e-13)

    w = rng.normal(size=n)
    loss = lambda A, b: jnp.sum(w * f(A, b))  # noqa: E731
    dA, db = rng.normal(size=(batch, n, n)), rng.normal(size=(batch, n))
    eps = 1e-6
    fd = np.array([(w @ np.linalg.solve(a + eps * da, c + eps * dc_) - w @ np.linalg.solve(a - eps * da, c - eps * dc_))
                   / (2 * eps) for a, c, da, dc_ in zip(As, bs, dA, db)])
    reverse = lambda A, b, dA, db: sum(jnp.sum(g * d) for g, d in zip(jax.grad(loss, (0, 1))(A, b), (dA, db)))  # noqa
    forward = lambda A, b, dA, db: jax.jvp(loss, (A, b), (dA, db))[1]  # noqa: E731
    for derivative in (reverse, forward):
        np.testing.assert_allclose(jax.jit(derivative)(A, b, dA[0], db[0]), fd[0], rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(jax.jit(jax.vmap(derivative))(As, bs, dA, db), fd, rtol=1e-7, atol=1e-9)
    # the gradient of a batched solve's sum: each system's own gradient
    gA = jax.jit(jax.grad(lambda As: jnp.sum(jax.vmap(loss)(As, bs))))(As)
    fd_A = [(w @ np.linalg.solve(a + eps * da, c) - w @ np.linalg.solve(a - eps * da, c)) / (2 * eps)
            for a, c, da in zip(As, bs, dA)]
    np.testing.assert_allclose(np.sum(np.asarray(gA) * dA, (1, 2)), fd_A, rtol=1e-7, atol=1e-9)


def test_auto_calls_lapack_for_one_matrix_and_the_loops_for_a_batch():
    """factorization="auto": LAPACK (getrf) where the solve has one matrix (alone, with batched right-hand sides, and
    in its derivatives), no LAPACK call where the matrices are batched, under one or two vmaps and in their
    derivatives both ways; "lapack" calls LAPACK's batched kernels there, "xla" never calls LAPACK."""
    rng = np.random.default_rng(12)
    As, bs = np.stack([_system(rng, 4) for _ in range(2)]), rng.normal(size=(2, 4))
    A, b = As[0], bs[0]
    auto = lambda A, b: solve(A, b, "auto")  # noqa: E731
    loss = lambda A, b: jnp.sum(jnp.sin(auto(A, b)))  # noqa: E731
    for f, args in ((auto, (A, b)), (jax.vmap(auto, (None, 0)), (A, bs)), (jax.grad(loss, (0, 1)), (A, b)),
                    (lambda A, b: jax.jvp(loss, (A, b), (A, b))[1], (A, b))):
        assert "lapack_dgetrf_ffi" in _lapack_calls(f, *args)
    batched = [(jax.vmap(auto), (As, bs)), (jax.vmap(auto, (0, None)), (As, b)),
               (jax.vmap(jax.vmap(auto, (None, 0)), (0, None)), (As, bs)),
               (jax.vmap(jax.vmap(auto, (0, None)), (None, 0)), (As, bs)),
               (jax.vmap(jax.grad(loss, (0, 1))), (As, bs)),
               (jax.grad(lambda As: jnp.sum(jax.vmap(loss)(As, bs))), (As,)),
               (jax.vmap(lambda A, b: jax.jvp(loss, (A, b), (A, b))[1]), (As, bs))]
    for f, args in batched:
        assert not _lapack_calls(f, *args)
    assert _batched_lapack_calls(jax.vmap(lambda A, b: solve(A, b, "lapack")), As, bs)
    assert not _batched_lapack_calls(jax.vmap(auto, (None, 0)), A, bs)
    assert not _lapack_calls(lambda A, b: solve(A, b, "xla"), A, b)


def test_dense_solvers_choose_their_factorization():
    """The dense solvers' ``factorization`` (default "auto"): their one-system programs call LAPACK (KKT's LU, the
    range space's Cholesky), their batched ones do not, and where only M and Q are batched, the matrices made of J
    alone (the minimum-norm multipliers') are one matrix: unbatched LAPACK calls. "xla" calls none; anything else
    is refused by name."""
    rng = np.random.default_rng(13)
    X = rng.normal(size=(6, 6))
    M, Q, J, gamma = X @ X.T + np.eye(6), rng.normal(size=6), rng.normal(size=(3, 6)), rng.normal(size=3)
    on = np.ones(3, bool)
    for solver, call in ((dc.KKT(), "getrf"), (dc.RangeSpace(), "potrf"), (dc.NullSpace(), "getrf"),
                         (dc.Larin(), "getrf")):
        assert solver.factorization == "auto"
        system = lambda M, Q, solver=solver: solver.system(M, Q, J, gamma, on).a  # noqa: E731
        assert any(call in c for c in _lapack_calls(system, M, Q)), solver
        assert not _batched_lapack_calls(jax.vmap(system), np.stack([M, 2 * M]), np.stack([Q, Q]))
        every = lambda M, Q, J, solver=solver: solver.system(M, Q, J, gamma, on).a  # noqa: E731
        assert not _lapack_calls(jax.vmap(every), np.stack([M, 2 * M]), np.stack([Q, Q]), np.stack([J, -J]))
        xla = type(solver)(factorization="xla")
        assert not _lapack_calls(lambda M, Q: xla.system(M, Q, J, gamma, on).a, M, Q)
    with pytest.raises(ValueError, match=r"RangeSpace: factorization must be 'auto' \(LAPACK for one system, the XLA "
                                         r"loops for a batch\), 'lapack' or 'xla', got 'LU'"):
        dc.RangeSpace(factorization="LU")


@pytest.mark.slow
def test_batched_mechanism_programs_call_no_lapack():
    """vmap of a four-bar's event rollout (motor, stop, floor) and of its rollout, and the rollout's gradient: no
    LAPACK custom call (a 512-copy event rollout of this four-bar hung for ever in jaxlib 0.10's batched LU,
    ``getrf``). A gradient holds the derivatives of the same operations and the transposed solves
    (diffchain._xla.linalg.solve), as the rollout's shows."""
    linkage, start = systems.four_bar(stop=1.28)
    floor = dc.Events(linkage, ground=-0.3, contact=["C"])
    k = jnp.linspace(0.5, 3.0, 4)

    def events(k):
        u = dc.Control(tau=jnp.full((3, 1), 30.0) * k)
        return jnp.sum(dc.event_rollout(linkage, floor, dc.EventState(start, model=linkage), u, 1e-3)[0].state.v)

    def plain(k):
        return jnp.sum(dc.rollout(linkage, start, dc.Control(tau=jnp.full((3, 1), 30.0) * k), 1e-3)[0].v)

    assert not _lapack_calls(jax.vmap(events), k)
    assert not _lapack_calls(jax.vmap(plain), k)
    assert not _lapack_calls(jax.grad(lambda k: jnp.sum(jax.vmap(plain)(k))), k)


def test_batched_event_programs_call_no_lapack():
    """vmap of an event rollout with impacts, limits and the projection: no LAPACK custom call (jaxlib 0.10's batched
    kernels deadlock the CPU thread pool: a 512-copy drop hung for ever). Its derivatives are those of the same
    operations."""
    chain = dc.free_chain(3, mass=1.0, length=0.3)
    events = dc.Events(chain, ground=0.0, theta_min=-1.0, theta_max=1.0)
    s = dc.from_joint_angles(chain, jnp.array([-0.8, 0.2, 0.0]), base=(0.0, 0.5))
    es = jax.tree.map(lambda a: jnp.stack([a] * 4), dc.EventState(s))
    run = jax.vmap(lambda e: dc.event_rollout(chain, events, e, None, 1e-3, n_steps=3,
                                              integrator=dc.Projected(dc.VelocityVerlet()))[0].state.x)
    assert not _lapack_calls(run, es)
