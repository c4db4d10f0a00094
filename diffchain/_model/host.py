"""Models are built on the host: outside ``jit`` every jax.numpy operation compiles a program of its own (once per
shape and dtype), so a model, its events and its start state built from known values are assembled with NumPy and
transferred, and traced values (a model built inside ``jit``, ``vmap`` or ``grad``) take jax.numpy.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def xp(*values):
    """NumPy where every value is known, else jax.numpy."""
    return jnp if any(isinstance(v, jax.core.Tracer) for v in jax.tree.leaves(values)) else np


def array(value, dtype=None):
    """``value`` as a JAX array of ``dtype``: a value on the host (NumPy, Python) converted there and transferred; a JAX
    array (or a traced one) by jax.numpy, where it is."""
    if isinstance(value, jax.Array) or xp(value) is jnp:
        return jnp.asarray(value, dtype)
    arr = np.asarray(value, dtype)
    return jax.device_put(arr.astype(jax.dtypes.canonicalize_dtype(arr.dtype), copy=False))


def zeros(shape, dtype, like=()):
    """Zeros as a JAX array: made on the host unless ``like`` (the values they go with) is traced, where jnp.zeros
    keeps them an operation of the program (a host array there would be a constant of its size in the program)."""
    return jnp.zeros(shape, dtype) if xp(like) is jnp else array(np.zeros(shape), dtype)


def float_dtype(arr):
    """The floating dtype a model stores ``arr`` in: its own if floating, else the default float (NumPy's float64
    canonicalized as JAX would: float32 without x64)."""
    return jnp.result_type(float, jax.dtypes.canonicalize_dtype(arr.dtype))
