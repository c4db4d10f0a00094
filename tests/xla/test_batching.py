"""diffchain._xla.batching.rare_cond and scan_until: under vmap they run the rare branch (the later steps) only on the
elements that need it; every element must get what lax.cond (a Python loop) gives it, whether none, few or many
elements take that branch, and derivatives must be the cond's, in both orders of grad and vmap."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diffchain._xla.batching import rare_cond, scan_until, sparse_size, unless_done

B = 40  # sparse_size(40) = 8: up to 8 elements take the gathered form, more the dense one
C = jnp.asarray(0.3)  # an unbatched value closed over by the branches


def branches(k):
    """A rare branch and a common one of different cost that close over a batched k and the unbatched C."""
    def rare(x):
        return {"y": jnp.sin(x["y"]) * k + C * jnp.cumsum(x["y"]), "i": x["i"] + 1}

    def common(x):
        return {"y": 2.0 * x["y"] - k, "i": x["i"]}

    return rare, common


def with_rare_cond(p, k, x, gather=True):
    rare, common = branches(k)
    return rare_cond(p, rare, common, x, gather)


def with_lax_cond(p, k, x):
    rare, common = branches(k)
    return jax.lax.cond(p, rare, common, x)


def test_the_gathered_batch_is_a_share_of_the_batch_of_at_least_8():
    assert [sparse_size(n) for n in (8, 40, 1024, 65536)] == [8, 8, 64, 4096]  # the default share, 1/16
    assert [sparse_size(n, 0.5) for n in (8, 40, 1024)] == [8, 20, 512]


@pytest.mark.parametrize("gather", [True, False, 0.5])
@pytest.mark.parametrize("taken", [0, 1, 5, sparse_size(B), sparse_size(B) + 1, sparse_size(B, 0.5) + 1, B])
def test_rare_cond_under_vmap_equals_the_cond(taken, gather):
    """Also with half the batch gathered (gather=0.5: up to 20 of the 40 elements)."""
    assert sparse_size(B) < sparse_size(B, 0.5) < B
    rng = np.random.default_rng(taken)
    p = np.zeros(B, bool)
    p[rng.permutation(B)[:taken]] = True
    k = jnp.asarray(rng.normal(size=B))
    x = {"y": jnp.asarray(rng.normal(size=(B, 3))), "i": jnp.arange(B)}
    got = jax.jit(jax.vmap(lambda p, k, x: with_rare_cond(p, k, x, gather)))(jnp.asarray(p), k, x)
    want = jax.vmap(with_lax_cond)(jnp.asarray(p), k, x)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-14, atol=0)
    np.testing.assert_array_equal(got["i"], want["i"])
    np.testing.assert_array_equal(got["i"], np.arange(B) + p)  # and the rare branch ran exactly where p

    # derivatives: the plain cond's, per element (vmap of grad)
    def loss(f):
        return lambda p, k, y: jnp.sum(f(p, k, {"y": y, "i": jnp.zeros((), int)})["y"] ** 2)

    got = jax.vmap(jax.grad(loss(with_rare_cond), (1, 2)))(jnp.asarray(p), k, x["y"])
    want = jax.vmap(jax.grad(loss(with_lax_cond), (1, 2)))(jnp.asarray(p), k, x["y"])
    for g, h in zip(got, want):
        np.testing.assert_allclose(g, h, rtol=1e-13)


def test_grad_of_vmap_equals_vmap_of_grad_and_stays_finite():
    """grad of a vmap: rare_cond's derivative is a select whose rare branch sees stop_gradient-ed operands where it is
    not taken, on the primal values (a batched lax.cond would put stop_gradient on tangents inside the custom_jvp rule,
    which JAX cannot transpose: jax-ml/jax#22011). The rare branch is sqrt(y), not finite where it is not taken
    (y < 0): nothing of it may reach the gradient there."""
    rng = np.random.default_rng(7)
    p = jnp.asarray(rng.random(B) < 0.3)
    y = jnp.where(p, 1.0 + rng.random(B), -1.0 - rng.random(B))
    k = jnp.asarray(rng.normal(size=B))

    def f(p, k, y):
        return rare_cond(p, lambda y: jnp.sqrt(y) * k, lambda y: y * y - k, y)

    g = jax.grad(lambda k, y: jnp.sum(jax.vmap(f)(p, k, y)), (0, 1))(k, y)
    h = jax.vmap(jax.grad(f, (1, 2)))(p, k, y)
    for u, v in zip(g, h):
        assert np.all(np.isfinite(u))
        np.testing.assert_allclose(u, v, rtol=1e-14)
    np.testing.assert_allclose(g[1], np.where(p, 0.5 * k / np.sqrt(np.abs(y)), 2 * y), rtol=1e-14)  # closed form


@pytest.mark.parametrize("taken", [0, 3, B])
def test_a_rare_branch_that_covers_every_element(taken):
    """``covers``: the rare branch is right for every element (here the same function written two ways, with a
    round-off difference), so a batch in which any element takes it runs it everywhere: each element gets the cond's
    result to round-off, and the derivatives in both orders of grad and vmap equal the closed form. Its derivative
    program is a cond, not the select of both branches: smaller than the select form's."""
    rng = np.random.default_rng(taken)
    p = np.zeros(B, bool)
    p[rng.permutation(B)[:taken]] = True
    p, k, y = jnp.asarray(p), jnp.asarray(rng.normal(size=B)), jnp.asarray(rng.normal(size=B))

    def f(p, k, y, covers=True):
        return rare_cond(p, lambda y: 0.5 * (k * y) * (k * y), lambda y: 0.5 * k * k * y * y, y, covers=covers)

    np.testing.assert_allclose(jax.jit(jax.vmap(f))(p, k, y), 0.5 * k**2 * y**2, rtol=1e-15)
    g = jax.grad(lambda k, y: jnp.sum(jax.vmap(f)(p, k, y)), (0, 1))(k, y)
    h = jax.vmap(jax.grad(f, (1, 2)))(p, k, y)
    for u, v, want in zip(g, h, (k * y**2, k**2 * y)):
        np.testing.assert_allclose(u, want, rtol=1e-14)
        np.testing.assert_allclose(v, want, rtol=1e-14)
    size = [len(str(jax.make_jaxpr(jax.grad(lambda y: f(p[0], k[0], y, c)))(y[0]))) for c in (True, False)]
    assert size[0] < 0.8 * size[1], size


def test_unbatched_predicate_and_one_element():
    k = jnp.asarray([0.5, -1.0])
    x = {"y": jnp.ones((2, 3)), "i": jnp.zeros(2, int)}
    for p in (True, False):
        got = jax.vmap(lambda k, x: with_rare_cond(jnp.asarray(p), k, x))(k, x)
        want = jax.vmap(lambda k, x: with_lax_cond(jnp.asarray(p), k, x))(k, x)
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-14)
        one = with_rare_cond(jnp.asarray(p), k[0], jax.tree.map(lambda v: v[0], x))
        np.testing.assert_allclose(one["y"], want["y"][0], rtol=1e-14)


def test_unless_done_runs_only_the_elements_not_done():
    done = jnp.arange(B) % 7 == 0
    out = jax.vmap(lambda d, c: unless_done(lambda c: c + 1, d, c))(done, jnp.zeros(B, int))
    np.testing.assert_array_equal(out, ~done)


@pytest.mark.parametrize("running", [5, B])
def test_scan_until_stops_where_done_in_all_its_forms(running):
    """scan_until: a scan of conds on one element and in derivatives, steps under vmap on the elements not done
    (gathered when ``running`` of them are, at most sparse_size); each must stop where a Python loop stops (done = the
    time reaches 1; the steps' lengths differ by element; the others start done)."""
    rng = np.random.default_rng(running)
    xs = jnp.asarray(rng.uniform(0.05, 0.5, (B, 12)))
    k = jnp.asarray(rng.normal(size=B))
    t0 = jnp.where(jnp.arange(B) < running, 0.0, 1.0)

    def run(k, xs, t0):
        body = lambda c, x: {"t": c["t"] + x, "s": c["s"] + jnp.sin(c["t"] + k) * x}  # noqa: E731
        return scan_until(body, {"t": t0, "s": jnp.zeros(())}, xs, lambda c: c["t"] >= 1.0)["s"]

    def reference(k, xs, t):  # the loop, with its derivative sin -> cos by hand
        s = ds = 0.0
        for x in np.asarray(xs):
            if t >= 1.0:
                break
            s, ds, t = s + np.sin(t + k) * x, ds + np.cos(t + k) * x, t + x
        return s, ds

    want = np.array([reference(float(k[i]), xs[i], float(t0[i])) for i in range(B)])
    one = [run(k[i], xs[i], t0[i]) for i in (0, 1, B - 1)]
    np.testing.assert_allclose(one, want[[0, 1, B - 1], 0], rtol=1e-14)
    np.testing.assert_allclose(jax.jit(jax.vmap(run))(k, xs, t0), want[:, 0], rtol=1e-14)
    np.testing.assert_allclose(jax.vmap(jax.grad(run))(k, xs, t0), want[:, 1], rtol=1e-13)
    np.testing.assert_allclose(jax.grad(lambda k: jnp.sum(jax.vmap(run)(k, xs, t0)))(k), want[:, 1], rtol=1e-13)


@pytest.mark.parametrize("taken", [0, 3])
def test_derivatives_skip_the_rare_branch_when_no_element_takes_it(taken):
    """Under vmap, derivatives of rare_cond take the plain cond per element, but skip the rare branch for the whole
    batch when no element takes it (a cond on ``any_in_batch``; a batched predicate alone turns a cond into a select
    that runs both branches): a callback in the rare branch runs only if some element takes it, in both orders of
    grad and vmap; the derivatives stay the cond's."""
    calls = []

    def rare(y):
        jax.debug.callback(lambda: calls.append(1))
        return jnp.sin(y) * y

    def f(p, y):
        return rare_cond(p, rare, lambda y: 2.0 * y * y, y)

    p = jnp.arange(B) < taken
    y = jnp.linspace(-1.0, 1.0, B)
    want = np.where(p, np.cos(y) * y + np.sin(y), 4.0 * y)
    vmap_of_grad = jax.jit(jax.vmap(jax.grad(f, 1)))
    grad_of_vmap = jax.jit(lambda p, y: jax.grad(lambda y: jnp.sum(jax.vmap(f)(p, y)))(y))
    for g in (vmap_of_grad, grad_of_vmap):
        calls.clear()
        got = g(p, y)
        jax.effects_barrier()
        assert bool(calls) == (taken > 0)
        np.testing.assert_allclose(got, want, rtol=1e-14)


@pytest.mark.parametrize("gather", [True, False])
def test_reverse_mode_runs_the_rare_branch_where_the_forward_pass_does(gather):
    """With ``gather``, reverse mode under vmap recomputes the rare branch and pulls back through it on the gathered
    elements that take it, like the forward pass: a callback in the rare branch, called once per element it runs on,
    counts sparse_size calls in the forward pass and as many again in the backward pass, in both orders of grad and
    vmap (a select over the batch, the form of derivatives without ``gather``, runs it on all B: B calls). Forward
    mode keeps the select. The derivatives are the cond's (closed form)."""
    calls = []

    def rare(y):
        jax.debug.callback(lambda y: calls.append(1), y)  # (under vmap: a call per element)
        return jnp.sin(y) * y

    def f(p, y):
        return rare_cond(p, rare, lambda y: 2.0 * y * y, y, gather)

    p = jnp.arange(B) % 10 == 3  # 4 of 40 take the rare branch
    y = jnp.linspace(-1.0, 1.0, B)
    want = np.where(p, np.cos(y) * y + np.sin(y), 4.0 * y)
    runs, grad_runs = (sparse_size(B), 2 * sparse_size(B)) if gather else (B, B)
    programs = {"forward": (jax.jit(jax.vmap(f)), runs, np.where(p, np.sin(y) * y, 2 * y * y)),
                "vmap of grad": (jax.jit(jax.vmap(jax.grad(f, 1))), grad_runs, want),
                "grad of vmap": (jax.jit(lambda p, y: jax.grad(lambda y: jnp.sum(jax.vmap(f)(p, y)))(y)), grad_runs,
                                 want),
                "vmap of jvp": (jax.jit(jax.vmap(lambda p, y: jax.jvp(lambda y: f(p, y), (y,), (1.0,))[1])), None,
                                want)}
    for name, (g, count, value) in programs.items():
        calls.clear()
        got = g(p, y)
        jax.effects_barrier()
        assert count is None or len(calls) == count, name
        np.testing.assert_allclose(got, value, rtol=1e-14, err_msg=name)
