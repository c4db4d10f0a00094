"""Checks of bad input that name the argument, also under ``jit`` and ``vmap`` (:func:`runtime_checks`)."""
from __future__ import annotations

import functools
import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from equinox.internal import unvmap_any


def _concrete(x):
    """``x`` as a numpy array when its value is known now, ``None`` while it is being traced."""
    if isinstance(x, jax.core.Tracer):
        return None
    return np.asarray(x)


def _require(ok: bool, message: str):
    if not ok:
        raise ValueError(message)


def _raise_in_generator(message):
    """Raise ValueError(message) from a generator's frame: a finished generator has no caller frame, so the traceback
    that JAX writes into a ``JaxRuntimeError`` when a host callback raises under ``jit`` is one line long and the
    message comes right after it, instead of after every frame of the caller's stack."""
    raise ValueError(message)
    yield  # (makes this a generator)


_FAILED = [None]  # the message of the last failed run-time check (:func:`compiled` raises it as a ValueError)


def _fail(messages, xs, bads, gots):
    """Host side of :func:`runtime_checks` (only ever called on bad input): raise the first failed check."""
    for message, bad, got in zip(messages, bads, gots):
        bad, got = np.asarray(bad), np.asarray(got)
        if not bad.any():
            continue
        if bad.ndim:  # under vmap: name the first bad element of the batch
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            got = got[tuple(min(i, s - 1) for i, s in zip(idx, got.shape))]
            message = f"{message} (batch element {idx[0] if len(idx) == 1 else idx})"
        _FAILED[0] = _text(message, got)
        next(_raise_in_generator(_FAILED[0]))
    return xs


def _text(message, got):
    """``message`` with the value ``got``: in place of "{got}" if it has one; in place of the fields "{0}", "{1:.3g}",
    ... (``str.format``) by the entries of ``got`` if it has those; else appended as ", got ..."."""
    if "{got}" in message:
        return message.replace("{got}", _show(got))
    if re.search(r"\{\d", message):
        return message.format(*np.asarray(got, dtype=float).reshape(-1).tolist())
    return f"{message}, got {_show(got)}"


def _show(value):
    return np.array2string(np.asarray(value), threshold=12, edgeitems=3, precision=6)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _checked(messages, xs, bads, gots):
    def fail(xs, bads, gots):
        return jax.pure_callback(functools.partial(_fail, messages), jax.eval_shape(lambda: xs), xs, bads, gots,
                                 vmap_method="expand_dims")

    any_bad = unvmap_any(functools.reduce(jnp.logical_or, bads))
    return jax.lax.cond(any_bad, fail, lambda xs, bads, gots: xs, xs, bads, gots)


@_checked.defjvp
def _checked_jvp(messages, primals, tangents):
    return _checked(messages, *primals), tangents[0]


def describe(obj):
    """An argument as an error message names it: a class passed for an instance, or its repr and type."""
    if isinstance(obj, type):
        return f"the class {obj.__name__} (pass an instance, {obj.__name__}())"
    return f"{obj!r} (of type {type(obj).__name__})"


def runtime_checks(xs: tuple, checks) -> tuple:
    """The arrays ``xs``, after raising ``ValueError(message + ", got " + got)`` (or with ``got`` in place of "{got}"
    in the message) for the first ``(bad, message, got)`` of ``checks`` whose ``bad`` (a boolean array) holds anywhere.

    Checks of values known now run now (a plain ValueError). Checks of traced values (under ``jit``, ``vmap``,
    ``grad``) run with the program: one ``lax.cond`` for all of them, whose error branch is a host callback, so valid
    input costs the reductions and one branch; under ``jit`` JAX reports a failure as a ``JaxRuntimeError`` whose text
    starts with the message (the ``ValueError`` itself when a compiled program is reused). Under ``vmap`` a bad element
    anywhere in the batch raises and is named. The checks are tied to ``xs``: the caller must use the returned arrays
    (checks whose results are unused are removed with them).
    """
    traced = []
    for bad, message, got in checks:
        got = bad if got is None else got
        if not any(isinstance(a, jax.core.Tracer) for a in (bad, got)):
            if bool(np.any(np.asarray(bad))):
                raise ValueError(_text(message, got))
        else:
            traced.append((jnp.any(bad), message, jnp.asarray(got)))
    if not traced:
        return tuple(xs)
    bads, messages, gots = zip(*traced)
    return tuple(_checked(messages, tuple(xs), bads, gots))


def runtime_check(x, bad, message: str, got=None):
    """``x`` after the check ``(bad, message, got)`` of :func:`runtime_checks`."""
    return runtime_checks((x,), [(bad, message, got)])[0]


def compiled(fn):
    """``fn``, a public entry point, compiled as one program per signature (:func:`equinox.filter_jit`: arrays are
    traced, everything else is static), as diffrax's ``diffeqsolve`` is. Called eagerly, ``fn`` would run op by op:
    every call re-traces its loops and compiles them again (a 200-step rollout: 3.3 s the first time, 1 s every
    time after, against 1.5 s once and then milliseconds compiled). Inside a user's ``jit``, ``grad`` or ``vmap`` it
    is inlined.

    Bad input raises as it would without: argument errors while tracing (the types of the static arguments are part
    of the signature, so that ``n_steps=True`` is checked, not taken for a compiled ``n_steps=1``), and a failed
    run-time check (:func:`runtime_checks`) of a call made here as the ``ValueError`` with its message (JAX reports an
    error in a host callback as a ``JaxRuntimeError`` holding that text; within a user's ``jit`` it still does).
    An argument that is a numpy integer or bool scalar (``n_steps=np.int64(500)``) is taken as the Python value, as
    the function takes it, not traced as an array. A call with an argument that cannot be hashed (e.g. a policy that
    is a dataclass instance) runs op by op, as before."""
    @eqx.filter_jit
    def jitted(kinds, args, kwargs):
        return fn(*args, **kwargs)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        args, kwargs = tuple(map(_python_scalar, args)), {k: _python_scalar(v) for k, v in kwargs.items()}
        static = [leaf for leaf in jax.tree.leaves((args, kwargs)) if not eqx.is_array(leaf)]
        try:
            hash(tuple(static))
        except TypeError:
            return fn(*args, **kwargs)
        kinds = tuple(map(type, static))
        _FAILED[0] = None
        try:
            return jitted(kinds, args, kwargs)
        except jax.errors.JaxRuntimeError as error:
            message = _FAILED[0]
            if message is None or message not in str(error):
                raise
            raise ValueError(message) from None

    return call


def _python_scalar(value):
    """A numpy integer or bool scalar as the Python value (a static argument), anything else as it is."""
    return value.item() if isinstance(value, (np.integer, np.bool_)) else value
