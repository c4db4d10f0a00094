"""Checks of bad input that name the argument, also under ``jit`` and ``vmap`` (:func:`runtime_checks`)."""
from __future__ import annotations

import contextlib
import functools
import logging
import re
from typing import Callable, ParamSpec, TypeVar

import equinox as eqx
import jax
import jax.extend.core
import jax.interpreters.batching as batching
import jax.interpreters.mlir as mlir
import jax.numpy as jnp
import numpy as np


def _concrete(x):
    """``x`` as a numpy array when its value is known now, ``None`` while it is being traced."""
    if isinstance(x, jax.core.Tracer):
        return None
    return np.asarray(x)


class InputError(ValueError):
    """Bad input to a diffchain function: a value it cannot take (a NaN, ``dt = 0``, a start off its constraints, ...)
    or an array of the wrong shape. The message names the function and the argument, says what was expected and what
    was received, and under ``vmap`` names the first bad element of the batch.

    diffchain raises it for a value known when you call (a Python number, a model built from Python numbers) and for
    one checked while the compiled program of a diffchain function runs (an array you pass to it), so that
    ``except dc.InputError`` (or ``except ValueError``: it is one) catches it either way. Inside a ``jax.jit`` of your
    own, JAX reports the failed check with an exception of its own, a ``jax.errors.JaxRuntimeError`` (a ``ValueError``
    where it reruns a program it has compiled), whose text holds the line ``"InputError: <message>"``; catch
    ``(ValueError, jax.errors.JaxRuntimeError)`` there.
    """


InputError.__module__ = "diffchain"  # (its public name: a traceback shows it as diffchain.InputError)


def _require(ok: bool, message: str):
    if not ok:
        raise InputError(_one_line(message))


def _one_line(message: str) -> str:
    """``message`` on one line (a value printed by NumPy may span several): a failed check's message travels in the text
    of JAX's error, which :func:`compiled` reads back line by line."""
    return re.sub(r"\s*\n\s*", " ", message)


def _raise_in_generator(error, message):
    """Raise ``error(message)`` from a generator's frame: a finished generator has no caller frame, so the traceback
    that JAX writes into a ``JaxRuntimeError`` when a host callback raises under ``jit`` is one line long and the
    message comes right after it (on the third line of its text), instead of after every frame of the caller's stack;
    :func:`compiled` finds it there by this function's name."""
    raise error(message)
    yield  # (makes this a generator)


def _fail(specs, bads, gots, idxs):
    """Host side of :func:`runtime_checks` (only ever called on bad input): raise the first failed check, naming the
    batch element ``idxs`` of its first bad value under ``vmap``."""
    for (error, message), bad, got, idx in zip(specs, bads, gots, idxs):
        if not bool(np.asarray(bad)):
            continue
        idx = tuple(int(i) for i in np.asarray(idx))
        if idx:
            message = f"{message} (batch element {idx[0] if len(idx) == 1 else idx})"
        next(_raise_in_generator(error, _text(message, got)))
    return np.bool_(True)


def _text(message, got):
    """``message`` with the value ``got``: in place of "{got}" if it has one; in place of the fields "{0}", "{1:.3g}",
    ... (``str.format``) by the entries of ``got`` if it has those; else appended as ", got ..."; on one line."""
    if "{got}" in message:
        text = message.replace("{got}", _show(got))
    elif re.search(r"\{\d", message):
        text = message.format(*np.asarray(got, dtype=float).reshape(-1).tolist())
    else:
        text = f"{message}, got {_show(got)}"
    return _one_line(text)


def _show(value):
    return np.array2string(np.asarray(value), threshold=12, edgeitems=3, precision=6)


# The first bad element of a batch, as values outside the batch: ``first_bad(bad, got, idx)`` is the identity on one
# element; under ``vmap`` its batching rule reduces the batch axis (whether any element is bad; the ``got`` and the index
# of the first bad one, prepended to ``idx``) and hands the result on unbatched, to the next ``vmap`` out. Reductions
# alone: under a sharded batch they are all-reduces of a few numbers (the arrays checked stay where they are).
_first_bad_p = jax.extend.core.Primitive("diffchain_first_bad")
_first_bad_p.multiple_results = True


def _identity(*args):
    return args


def _first_bad_batch(args, dims):
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    bad, got, idx = (jnp.broadcast_to(a, (size,) + a.shape) if d is None else jnp.moveaxis(a, d, 0)
                     for a, d in zip(args, dims))
    element = jnp.arange(size)
    first = jnp.min(jnp.where(bad, element, size))
    pick = element == first

    def at_first(a):  # a[first], as a reduction
        p = pick.reshape((size,) + (1,) * (a.ndim - 1))
        if a.dtype == jnp.bool_:
            return jnp.any(p & a, axis=0)
        return jnp.sum(jnp.where(p, a, jnp.zeros((), a.dtype)), axis=0)

    index = jnp.concatenate([jnp.minimum(first, size - 1).astype(idx.dtype)[None], at_first(idx)])
    return _first_bad_p.bind(jnp.any(bad), at_first(got), index), [None, None, None]


_first_bad_p.def_impl(_identity)
_first_bad_p.def_abstract_eval(_identity)
batching.primitive_batchers[_first_bad_p] = _first_bad_batch
mlir.register_lowering(_first_bad_p, mlir.lower_fun(_identity, multiple_results=True))


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _checked(specs, xs, bads, gots):
    """``xs`` after the checks: one ``lax.cond`` on whether any of ``bads`` holds (in any batch element), whose
    operands and result are small (the reduced checks; a flag), and whose error branch is a host callback. The arrays
    ``xs`` do not pass through it (a program partitioned over devices would gather them where the callback runs): each
    is tied to the flag elementwise (``where(ok, x, nan)``; ``ok`` is always true when the program goes on), which
    keeps them where they are and the check in the program as long as they are used."""
    firsts = [_first_bad_p.bind(b, g, jnp.zeros((0,), jnp.int32)) for b, g in zip(bads, gots)]
    bads, gots, idxs = (tuple(f[k] for f in firsts) for k in range(3))

    def fail(bads, gots, idxs):
        return jax.pure_callback(functools.partial(_fail, specs), jax.ShapeDtypeStruct((), jnp.bool_), bads, gots,
                                 idxs, vmap_method="sequential")

    ok = jax.lax.cond(functools.reduce(jnp.logical_or, bads), fail, lambda *_: jnp.ones((), jnp.bool_),
                      bads, gots, idxs)
    return tuple(jnp.where(ok, x, jnp.nan if jnp.issubdtype(x.dtype, jnp.inexact) else jnp.zeros((), x.dtype))
                 for x in map(jnp.asarray, xs))


@_checked.defjvp
def _checked_jvp(specs, primals, tangents):
    return _checked(specs, *primals), tangents[0]


def describe(obj):
    """An argument as an error message names it: a class passed for an instance, or its repr and type."""
    if isinstance(obj, type):
        return f"the class {obj.__name__} (pass an instance, {obj.__name__}())"
    return f"{obj!r} (of type {type(obj).__name__})"


def runtime_checks(xs: tuple, checks) -> tuple:
    """The arrays ``xs``, after raising ``error(message + ", got " + got)`` (or with ``got`` in place of "{got}" in the
    message) for the first check ``(bad, message, got)`` or ``(bad, message, got, error)`` of ``checks`` whose
    ``bad`` (a boolean array) holds anywhere; ``error`` is :class:`InputError` unless given (a failed run, not bad
    input, raises a plain ``ValueError``: :func:`diffchain._analysis.diagnosis.run_checks`).

    Checks of values known now run now. Checks of traced values (under ``jit``, ``vmap``, ``grad``) run with the
    program: one ``lax.cond`` for all of them, whose error branch is a host callback, so valid input costs the
    reductions and one branch; a diffchain function (:func:`compiled`) raises the error itself, and under a ``jit`` of
    the user's JAX reports it as a ``JaxRuntimeError`` whose third line is ``"InputError: <message>"``. Under
    ``vmap`` a bad element anywhere in the batch raises and is named. The checks are tied to ``xs``: the caller must
    use the returned arrays (checks whose results are unused are removed with them).
    """
    traced = []
    for check in checks:
        bad, message, got, error = check if len(check) == 4 else (*check, InputError)
        got = bad if got is None else got
        if not any(isinstance(a, jax.core.Tracer) for a in (bad, got)):
            if bool(np.any(np.asarray(bad))):
                raise error(_text(message, got))
        else:
            traced.append((jnp.any(bad), (error, message), jnp.asarray(got)))
    if not traced:
        return tuple(xs)
    bads, specs, gots = zip(*traced)
    with _reporting_failed_checks():  # (the checks run now under a vmap outside jit: the error they raise)
        return tuple(_checked(specs, tuple(xs), bads, gots))


def runtime_check(x, bad, message: str, got=None):
    """``x`` after the check ``(bad, message, got)`` of :func:`runtime_checks`."""
    return runtime_checks((x,), [(bad, message, got)])[0]


# the errors a failed check raises (:func:`runtime_checks`), by the names JAX's error text gives them
_ERRORS = {"InputError": InputError, "diffchain.InputError": InputError, "ValueError": ValueError}
_RAISED = re.compile(r"in _raise_in_generator\n(?:[ \t][^\n]*\n)*(?P<name>[\w.]+): (?P<message>[^\n]*)")


def _failed_check(error):
    """The exception a failed run-time check raised, read back from the error by which JAX reports it: a
    ``JaxRuntimeError``, or a ``ValueError`` where it reruns a compiled program (jaxlib 0.10), whose text holds the
    callback's traceback: :func:`_raise_in_generator`, then the error's name and its one-line message. None for any
    other error."""
    match = _RAISED.search(str(error))
    if match is None or match["name"] not in _ERRORS:
        return None
    return _ERRORS[match["name"]](match["message"])


class _QuietCallbackFailure:
    """Drops JAX's log record of a failed host callback (the traceback it writes to stderr, before the error that
    reports it): the error raised in its place says it all. Installed on the logger "jax._src.callback" for one call
    only, as ``equinox.filter_jit`` does."""

    def filter(self, record):
        return not (record.name == "jax._src.callback" and record.getMessage() == "jax.pure_callback failed")


_P = ParamSpec("_P")
_R = TypeVar("_R")


def compiled(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """``fn``, a public entry point, compiled as one program per signature (:func:`equinox.filter_jit`: arrays are
    traced, everything else is static), as diffrax's ``diffeqsolve`` is. Called eagerly, ``fn`` would run op by op:
    every call re-traces its loops and compiles them again (a 200-step rollout: 3.3 s the first time, 1 s every
    time after, against 1.5 s once and then milliseconds compiled). Inside a user's ``jit``, ``grad`` or ``vmap`` it
    is inlined.

    Bad input raises as it would without: argument errors while tracing (the types of the static arguments are part
    of the signature, so that ``n_steps=True`` is checked, not taken for a compiled ``n_steps=1``), and a failed
    run-time check (:func:`runtime_checks`) of a call made here as the error it raised (an :class:`InputError`), not
    as the ``JaxRuntimeError`` by which JAX reports it (whose text holds it, and which is all a user's ``jit`` can
    raise), and without JAX's log of the callback's traceback on stderr. An argument that is a numpy integer or bool
    scalar (``n_steps=np.int64(500)``) is taken as the Python value, as the function takes it, not traced as an
    array. A call with an argument that cannot be hashed (e.g. a policy that is a dataclass instance) runs op by op,
    as before."""
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
            run = functools.partial(fn, *args, **kwargs)
        else:
            run = functools.partial(jitted, tuple(map(type, static)), args, kwargs)
        with _reporting_failed_checks():
            return run()

    return call


@contextlib.contextmanager
def _reporting_failed_checks():
    """Within: a failed run-time check raises the error it raised (:func:`_failed_check`), not the ``JaxRuntimeError``
    that reports it, and JAX's log of the callback's traceback is left out (:class:`_QuietCallbackFailure`)."""
    quiet, logger = _QuietCallbackFailure(), logging.getLogger("jax._src.callback")
    logger.addFilter(quiet)
    try:
        yield
    except (jax.errors.JaxRuntimeError, ValueError) as error:  # (a ValueError where JAX reruns a compiled program)
        failed = None if isinstance(error, InputError) else _failed_check(error)
        if failed is None:
            raise
        raise failed from None
    finally:
        logger.removeFilter(quiet)


def _python_scalar(value):
    """A numpy integer or bool scalar as the Python value (a static argument), anything else as it is."""
    return value.item() if isinstance(value, (np.integer, np.bool_)) else value


def control_checks(control, who: str, traced: bool = True) -> list:
    """Raise now unless the known parts of ``control`` are finite; for traced parts, the checks to run with the
    program (if ``traced``). Only small values enter them (the first bad step or value), never the arrays."""
    pending = []
    for name in ("tau", "F", "a_w"):
        leaf = getattr(control, name)
        if leaf is None or not np.prod(jnp.shape(leaf)):  # (none, or empty: a mechanism without motors)
            continue
        message = f"{who}: the control's {name} must be finite"
        if not isinstance(leaf, jax.core.Tracer):
            value = np.asarray(leaf)
            if not np.all(np.isfinite(value)):
                where = tuple(int(i) for i in np.argwhere(~np.isfinite(value))[0])
                raise InputError(f"{message}, got {value[where]} at index {where}")
        elif traced:
            pending.append(finite_check(leaf, message, time_axis=leaf.ndim > 1 + (name != "tau")))
    return pending


def finite_check(x, message: str, time_axis: bool) -> tuple:
    """The run-time check that the traced ``x`` is finite, naming the first step holding NaN or inf (``time_axis``)
    or the first such value: only scalars enter the check, never ``x`` itself."""
    if time_axis:
        bad_steps = ~jnp.all(jnp.isfinite(x.reshape(x.shape[0], -1)), axis=1)
        return bad_steps, message + ", got NaN or inf at step {got}", jnp.argmax(bad_steps)
    flat = x.reshape(-1)
    bad = ~jnp.isfinite(flat)
    return bad, message, flat[jnp.argmax(bad)]


def finite_state_check(state, what: str) -> tuple:
    """The check that ``state`` (``what``: how the message names it) is finite, for
    :func:`diffchain._model.checks.runtime_checks`; only max|x| and max|v| enter it."""
    size, speed = jnp.max(jnp.abs(state.x), initial=0.0), jnp.max(jnp.abs(state.v), initial=0.0)
    return (~(jnp.isfinite(size) & jnp.isfinite(speed)),
            f"{what} must be finite, but x or v holds NaN or inf (max|x|, max|v| = {{got}})", jnp.stack([size, speed]))
