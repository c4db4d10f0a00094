"""How diffchain's programs treat one chain and a batch differently (``jax.custom_batching.custom_vmap``).

A ``lax.cond`` skips work on one chain but under ``vmap`` becomes a select that always computes both branches:
:func:`rare_cond`, :func:`unless_done`, :func:`scan_until` and :func:`any_in_batch` skip a branch that no element
of the batch takes, and run it on the few that do: the same results in every context, as a batching rule.
:func:`batch_form` gives a function its own program under ``vmap`` (the point-major backend, chosen explicitly).
"""
from __future__ import annotations

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad, batching, mlir


def _batched_rule(one, batched):
    """``custom_vmap(one)`` with the rule ``batched(axis_size, in_batched, *args)``, whose outputs are batch first."""
    f = jax.custom_batching.custom_vmap(one)

    @f.def_vmap
    def rule(axis_size, in_batched, *args):
        out = batched(axis_size, in_batched, *args)
        return out, jax.tree.map(lambda _: True, out)

    return f


def batch_form(one, batched, derivative, reverse=None):
    """A function that is ``one`` when evaluated on one chain, ``batched(axis_size, in_batched, *args)`` under
    ``vmap`` (a ``custom_vmap`` rule returning batch-first outputs) and ``derivative`` in every derivative
    (``custom_vmap`` has no reverse-mode rule): three programs for the same arithmetic.

    With ``reverse = (one_res, batched_res, one_vjp, batched_vjp)``, reverse mode has a batched program too: the
    outputs come with residuals, ``one_res(*args)`` or ``batched_res(axis_size, in_batched, *args)`` -> (outputs, res),
    and the tangents are the ``jvp`` of ``derivative`` (forward mode is unchanged) but through a linear map
    (:func:`linear_map`) whose transpose is ``one_vjp(args, res, cts, wanted)`` per chain and
    ``batched_vjp(axis_size, in_batched, args, res, cts, wanted)`` under ``vmap``, both giving the cotangents of the
    inexact leaves of ``args`` (flat; batch first under ``vmap``, for every element even of a shared argument);
    ``cts`` is the list of the outputs' leaves' cotangents, None where zero or not inexact (an output that is not
    inexact, e.g. a counter, has a float0 tangent), and ``wanted`` a tuple of bools, one per
    inexact leaf: whether reverse mode asks for its cotangent (the others may be None)."""
    f = _batched_rule(one, batched)
    g = jax.custom_jvp(f)
    if reverse is None:
        g.defjvp(lambda primals, tangents: jax.jvp(derivative, primals, tangents))
        return g
    one_res, batched_res, one_vjp, batched_vjp = reverse
    f_res = _batched_rule(one_res, batched_res)

    def vjp(args, res, cts, wanted):
        f = jax.custom_batching.custom_vmap(lambda args, res, cts: [
            c if w else None for c, w in zip(one_vjp(args, res, cts, wanted), wanted)])

        @f.def_vmap
        def rule(axis_size, in_batched, args, res, cts):
            batch = lambda v, b: v if b or v is None else jnp.broadcast_to(v, (axis_size,) + jnp.shape(v))  # noqa: E731
            res, cts = jax.tree.map(batch, res, in_batched[1]), [batch(c, b) for c, b in zip(cts, in_batched[2])]
            out = [o if w else None for o, w in zip(batched_vjp(axis_size, in_batched[0], args, res, cts, wanted),
                                                    wanted)]
            return out, [None if o is None else True for o in out]

        return f(args, res, cts)

    @g.defjvp
    def jvp(primals, tangents):
        out, res = f_res(*primals)
        leaves, tree = jax.tree.flatten(primals)
        res_leaves, res_tree = jax.tree.flatten(res)
        diff = [_inexact(p) for p in leaves]
        t_leaves = [t for t, d in zip(tree.flatten_up_to(tangents), diff) if d]

        def tangent(args, lin):  # the jvp of ``derivative``, the non-float arguments' tangents float0
            it, args = iter(lin), args[:len(leaves)]
            tan = [next(it) if d else np.zeros(jnp.shape(p), jax.dtypes.float0) for p, d in zip(args, diff)]
            return jax.tree.leaves(jax.jvp(derivative, tuple(jax.tree.unflatten(tree, args)),
                                           tuple(jax.tree.unflatten(tree, tan)))[1])

        def transpose(args, cts, wanted):
            return list(vjp(tuple(jax.tree.unflatten(tree, args[:len(leaves)])),
                            jax.tree.unflatten(res_tree, args[len(leaves):]), cts, wanted))

        # the outputs' tangents: through the linear map where inexact, float0 zeros elsewhere (counters, masks)
        out_leaves = jax.tree.leaves(out)
        inexact = [_inexact(o) for o in out_leaves]
        t_lin = iter(linear_map(
            lambda args, lin: [t for t, d in zip(tangent(args, lin), inexact) if d],
            lambda args, cts, wanted: transpose(args, _expand(cts, inexact), wanted), leaves + res_leaves, t_leaves,
            [jax.core.ShapedArray(jnp.shape(o), jnp.result_type(o)) for o, d in zip(out_leaves, inexact) if d]))
        t_out = [next(t_lin) if d else np.zeros(jnp.shape(o), jax.dtypes.float0) for o, d in zip(out_leaves, inexact)]
        return out, jax.tree.unflatten(jax.tree.structure(out), t_out)

    return g


def _expand(cts, inexact):
    """The cotangents of the inexact outputs, ``cts``, as a list over every output (None where not inexact)."""
    it = iter(cts)
    return [next(it) if d else None for d in inexact]


# A linear map with its own transpose (what jax.custom_transpose was): reverse mode reaches a batched program
# through it, while forward mode keeps a derivative's jvp.
_linear_p = jax.extend.core.Primitive("diffchain_linear_map")
_linear_p.multiple_results = True


def linear_map(apply, transpose, args, lin, out_avals):
    """``apply(args, lin)``, linear in the arrays ``lin``, whose transpose is ``transpose(args, cts, wanted)``
    (cotangents of ``lin`` for the outputs' cotangents ``cts``, None where zero; ``wanted``, a bool per ``lin``,
    says which of them reverse mode asks for: the others may be None). Under ``vmap`` both are ``vmap``-ed; the
    cotangents of a ``lin`` shared by the batch are summed over it. Its jvp in ``args`` is the jvp of ``apply``."""
    return _linear_p.bind(*args, *lin, apply=apply, transpose=transpose, n_args=len(args),
                          out_avals=tuple(out_avals))


def _linear_impl(*operands, apply, transpose, n_args, out_avals):
    return apply(list(operands[:n_args]), list(operands[n_args:]))


def _linear_transpose(cts, *operands, apply, transpose, n_args, out_avals):
    cts = [None if type(ct) is ad.Zero else ct for ct in cts]
    wanted = tuple(ad.is_undefined_primal(x) for x in operands[n_args:])  # a known tangent (e.g. a zero) wants none
    out = transpose(list(operands[:n_args]), cts, wanted)
    return [None] * n_args + [o if w else None for o, w in zip(out, wanted)]


def _linear_jvp(primals, tangents, *, apply, transpose, n_args, out_avals):
    args, lin = list(primals[:n_args]), list(primals[n_args:])
    out = linear_map(apply, transpose, args, lin, out_avals)
    d_args = [ad.instantiate_zeros(t) for t in tangents[:n_args]]
    d_lin = [ad.instantiate_zeros(t) for t in tangents[n_args:]]
    t_out = linear_map(apply, transpose, args, d_lin, out_avals)
    t_args = jax.jvp(lambda *a: apply(list(a), lin), tuple(args), tuple(d_args))[1]
    return out, [a + b for a, b in zip(t_out, t_args)]


def _linear_batch(operands, dims, *, apply, transpose, n_args, out_avals):
    size = next(o.shape[d] for o, d in zip(operands, dims) if d is not None)
    operands = [o if d is None else jnp.moveaxis(o, d, 0) for o, d in zip(operands, dims)]
    axes = [None if d is None else 0 for d in dims]
    a_axes, l_axes = axes[:n_args], axes[n_args:]

    def apply_b(args, lin):
        return jax.vmap(apply, in_axes=(a_axes, l_axes), axis_size=size)(args, lin)

    def transpose_b(args, cts, wanted):
        out = jax.vmap(lambda a, c: transpose(a, c, wanted), in_axes=(a_axes, 0), axis_size=size)(args, cts)
        return [o if ax == 0 or o is None else jnp.sum(o, 0) for o, ax in zip(out, l_axes)]

    out_b = [jax.core.ShapedArray((size,) + a.shape, a.dtype) for a in out_avals]
    return linear_map(apply_b, transpose_b, operands[:n_args], operands[n_args:], out_b), [0] * len(out_b)


_linear_p.def_impl(_linear_impl)
_linear_p.def_abstract_eval(lambda *avals, out_avals, **_: list(out_avals))
mlir.register_lowering(_linear_p, mlir.lower_fun(_linear_impl, multiple_results=True))
ad.primitive_transposes[_linear_p] = _linear_transpose
ad.primitive_jvps[_linear_p] = _linear_jvp
batching.primitive_batchers[_linear_p] = _linear_batch


def _explicit(f, operand):
    """``f`` as g(consts, operand): its closed-over values (chain, control, ...: tracers of any dtype) become the
    explicit argument ``consts``, so that a batching rule sees which of them are batched."""
    closed, shape = jax.make_jaxpr(f, return_shape=True)(operand)
    out_tree = jax.tree.structure(shape)

    def g(consts, x):
        return jax.tree.unflatten(out_tree, jax.core.eval_jaxpr(closed.jaxpr, consts, *jax.tree.leaves(x)))

    return g, closed.consts


RARE_SHARE = 1 / 16  # the default share of a batch that a gathered rare branch runs on (:func:`sparse_size`)


def sparse_size(axis_size, share=RARE_SHARE):
    """How many elements of a batch of ``axis_size`` the rare branch of :func:`rare_cond` gathers: ``share`` of the
    batch (default 1/16), at least 8 (so a batch of up to 8 / share elements takes the dense form)."""
    return max(8, int(axis_size * share))


def rare_cond(pred, rare, common, operand, gather=False, covers=False):
    """``lax.cond(pred, rare, common, operand)`` for a branch ``rare`` that few elements of a batch take.

    On one chain it is that cond. Under ``vmap``, where the cond would become a select that computes both branches
    for every element, ``common`` runs for the whole batch and ``rare`` only where ``pred``: not at all when no element
    takes it; with ``gather`` (True, or the share of the batch for :func:`sparse_size`), on the (at most
    :func:`sparse_size`) elements that take it, gathered into a small batch
    and scattered back, when few do; otherwise for the whole batch (kept where ``pred``). Each element's result is
    what the cond gives it. The gathered form is a second copy of ``rare`` in the program: nested ``gather``s multiply
    the compile time.

    Derivatives. Forward mode (and reverse mode without ``gather``) takes the cond as a select of both branches whose
    rare branch sees its operands through ``stop_gradient`` where it is not taken (what JAX does to a cond on a batched
    predicate, here on the primal values, so that ``grad`` of a ``vmap`` has no ``stop_gradient`` of a tangent to
    transpose: jax-ml/jax#22011), inside a cond on :func:`any_in_batch`: under ``vmap`` the rare branch and its
    transpose are skipped for the whole batch when no element takes it, and run on all of it otherwise. With
    ``gather``, reverse mode has a rule of its own (:func:`batch_form`): the backward pass recomputes the branch each
    element took and pulls its cotangents back through it, under ``vmap`` gathered like the forward pass, so that a
    rare branch taken by a few elements costs a few elements in the gradient too.

    ``covers``: ``rare`` is right for every element, also those that do not take it (``common`` is a cheaper form of
    the same result, e.g. a solver without the rows that are switched off). Then a batch in which any element takes
    ``rare`` runs it on all of them, without the select, and every derivative is the cond's own on one element and a
    cond on :func:`any_in_batch` under ``vmap``: half the program of the select form, whose rare branch must be cut
    from the elements that do not take it."""
    assert not (covers and gather), "rare_cond: covers and gather exclude each other"
    g1, k1 = _explicit(rare, operand)
    g0, k0 = _explicit(common, operand)

    def plain(pred, k1, k0, x):
        return jax.lax.cond(pred, lambda x: g1(k1, x), lambda x: g0(k0, x), x)

    def derivative(pred, k1, k0, x):  # a select, skipped for the whole batch when no element takes ``rare``
        outer, inner = any_in_batch(pred)

        def select(x):  # the cond written as a select of both branches (on one element ``inner`` is a constant)
            k1_, x_ = jax.tree.map(lambda v: jnp.where(inner, v, jax.lax.stop_gradient(v)), (k1, x))
            return jax.tree.map(lambda a, b: jnp.where(inner, a, b), g1(k1_, x_), g0(k0, x))

        if covers:
            return jax.lax.cond(outer, lambda x: g1(k1, x), lambda x: g0(k0, x), x)
        return jax.lax.cond(outer, select, lambda x: g0(k0, x), x)

    share = RARE_SHARE if gather is True else gather
    size_of = (lambda n: sparse_size(n, share)) if gather else (lambda n: n)

    def by_count(axis_size, pred, common_all, rare_all, rare_on):
        """What the batch runs: ``common_all()`` when no element takes ``rare``; ``rare_on(idx, take, size)`` (the
        common results with those of the gathered elements ``take`` scattered in at ``idx``) when few do; otherwise
        ``rare_all()`` (kept where ``pred``) and ``common_all()``."""
        size, count = size_of(axis_size), jnp.sum(pred)

        def keep(new, old):
            return jax.tree.map(lambda n, o: jnp.where(pred.reshape((-1,) + (1,) * (o.ndim - 1)), n, o), new, old)

        def sparse(_):
            idx = jnp.nonzero(pred, size=size, fill_value=axis_size)[0]  # the fill index is out of range: dropped
            return rare_on(idx, jnp.minimum(idx, axis_size - 1), size)

        branches = [lambda _: common_all(), sparse, lambda _: rare_all() if covers else keep(rare_all(), common_all())]
        if size >= axis_size:
            return jax.lax.cond(count == 0, branches[0], branches[2], None)
        return jax.lax.switch(jnp.where(count == 0, 0, jnp.where(count <= size, 1, 2)), branches, None)

    def batched(axis_size, in_batched, pred, k1, k0, x):
        b_pred, b_k1, b_k0, b_x = in_batched
        x = jax.tree.map(lambda v, b: v if b else jnp.broadcast_to(v, (axis_size,) + v.shape), x, b_x)
        pred = pred if b_pred else jnp.broadcast_to(pred, (axis_size,))
        axes = lambda bs: [0 if b else None for b in bs]  # noqa: E731
        on = lambda g, k, bk, x, n: jax.vmap(g, in_axes=(axes(bk), 0), axis_size=n)(k, x)  # noqa: E731

        def rare_on(idx, take, size):
            sub = on(g1, [v[take] if b else v for v, b in zip(k1, b_k1)], b_k1, jax.tree.map(lambda v: v[take], x), size)
            return jax.tree.map(lambda o, n: o.at[idx].set(n, mode="drop"), on(g0, k0, b_k0, x, axis_size), sub)

        return by_count(axis_size, pred, lambda: on(g0, k0, b_k0, x, axis_size), lambda: on(g1, k1, b_k1, x, axis_size),
                        rare_on)

    if not gather:
        return batch_form(plain, batched, derivative)(pred, k1, k0, operand)

    pull_rare, pull_common = _pullback(lambda k1, k0, x: g1(k1, x)), _pullback(lambda k1, k0, x: g0(k0, x))

    def one_vjp(args, res, cts, wanted):
        return jax.lax.cond(args[0], pull_rare, pull_common, args, cts)

    def batched_vjp(axis_size, in_batched, args, res, cts, wanted):
        leaves, tree = jax.tree.flatten(args)
        flags = tree.flatten_up_to(in_batched)
        pred = args[0] if flags[0] else jnp.broadcast_to(args[0], (axis_size,))
        in_axes = jax.tree.unflatten(tree, [0 if b else None for b in flags])
        on = lambda pull, args, cts, n: jax.vmap(pull, in_axes=(in_axes, 0), axis_size=n)(args, cts)  # noqa: E731

        def rare_on(idx, take, size):
            sub_args = jax.tree.unflatten(tree, [v[take] if b else v for v, b in zip(leaves, flags)])
            sub = on(pull_rare, sub_args, [None if c is None else c[take] for c in cts], size)
            return [o.at[idx].set(n, mode="drop") for o, n in zip(on(pull_common, args, cts, axis_size), sub)]

        return by_count(axis_size, pred, lambda: on(pull_common, args, cts, axis_size),
                        lambda: on(pull_rare, args, cts, axis_size), rare_on)

    reverse = (lambda *a: (plain(*a), ()), lambda n, b, *a: (batched(n, b, *a), ()), one_vjp, batched_vjp)
    return batch_form(plain, batched, derivative, reverse)(pred, k1, k0, operand)


def _pullback(branch):
    """(args, cts) -> the cotangents of the inexact leaves of ``args = (pred, k1, k0, x)`` through
    ``branch(k1, k0, x)``, for the cotangents ``cts`` of its outputs' leaves (None where zero or not inexact)."""
    def pull(args, cts):
        leaves, tree = jax.tree.flatten(args)
        where = [i for i, v in enumerate(leaves) if _inexact(v)]

        def f(*vals):
            full = list(leaves)
            for i, v in zip(where, vals):
                full[i] = v
            _, k1, k0, x = jax.tree.unflatten(tree, full)
            return branch(k1, k0, x)

        out, vjp = jax.vjp(f, *[leaves[i] for i in where])
        outs = jax.tree.leaves(out)
        cts = [(jnp.zeros_like(o) if c is None else c) if _inexact(o) else np.zeros(jnp.shape(o), jax.dtypes.float0)
               for o, c in zip(outs, cts)]
        return list(vjp(jax.tree.unflatten(jax.tree.structure(out), cts)))

    return pull


def _inexact(v):
    return jnp.issubdtype(jnp.result_type(v), jnp.inexact)


@jax.custom_batching.custom_vmap
def any_in_batch(pred):
    """(whether any element's ``pred`` is true, whose ``pred`` is true): on one element (``pred``, True); under
    ``vmap`` (any over the batch, unbatched; ``pred``). A cond on the first stays a cond under ``vmap`` (on a batched
    predicate it would become a select that runs both branches); on one element a cond on the second is a cond on a
    constant. No derivative rule is needed: bools have none."""
    return pred, jnp.ones((), bool)


@any_in_batch.def_vmap
def _any_in_batch(axis_size, in_batched, pred):
    if not in_batched[0]:
        return (pred, jnp.ones((), bool)), (False, False)
    return (jnp.any(pred), pred), (False, True)


def unless_done(f, done, c):
    """``lax.cond(done, identity, f, c)``: :func:`rare_cond` with the identity as the common branch. Under ``vmap``
    ``f`` runs only while some element is not done."""
    return rare_cond(~done, f, lambda c: c, c)


def scan_until(body, c, xs, done, share=RARE_SHARE):
    """The carry after ``c = body(c, x)`` for the x of ``xs`` in turn, where the steps after ``done(c)`` leave ``c``
    as it is (``done`` must stay true once true): a ``lax.scan`` whose steps are skipped by a cond once done (and
    recomputed in the reverse pass, ``jax.checkpoint``). Under ``vmap`` the steps run only while some element is not
    done, and only on those when they are few (at most ``share`` of the batch: :func:`rare_cond` with ``gather``), in
    the forward pass and in reverse mode."""

    @jax.checkpoint  # in reverse mode each step stores its carry, not the many intermediates of an event slot
    def step(c, x):
        return unless_done(lambda c: body(c, x), done(c), c), None

    return rare_cond(~done(c), lambda c: jax.lax.scan(step, c, xs)[0], lambda c: c, c, gather=share)
