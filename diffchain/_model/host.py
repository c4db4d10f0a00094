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
    """``value`` as a JAX array of ``dtype``: a known value converted on the host and transferred."""
    if xp(value) is jnp:
        return jnp.asarray(value, dtype)
    arr = np.asarray(value, dtype)
    return jax.device_put(arr.astype(jax.dtypes.canonicalize_dtype(arr.dtype), copy=False))


def float_dtype(arr):
    """The floating dtype a model stores ``arr`` in: its own if floating, else the default float (NumPy's float64
    canonicalized as JAX would: float32 without x64)."""
    return jnp.result_type(float, jax.dtypes.canonicalize_dtype(arr.dtype))
