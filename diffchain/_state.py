"""The state of a model and the input acting on it, as Equinox pytrees (seed 000 §2): :class:`State` (the coordinate
points' positions and velocities and the time) and :class:`Control` (torques, point forces, prescribed accelerations).
The same two for every model, a chain or a mechanism (:class:`~diffchain.Model`); this module sits below every other
module of the package that takes them (it uses only the leaf helpers of :mod:`diffchain._model.checks` and
:mod:`diffchain._model.host`).
"""
from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import numpy.typing as npt
from jax.typing import ArrayLike, DTypeLike
from jaxtyping import Array, Float

from ._model.checks import _require
from ._model.host import array as _array, zeros as _zeros


class State(eqx.Module):
    """Cartesian state at the start of a time quantum (seed 000 §2): positions x_i, velocities v_i, time t."""

    x: Float[Array, "n 2"]
    v: Float[Array, "n 2"]
    t: Float[Array, ""]

    def __init__(self, x: npt.ArrayLike, v: npt.ArrayLike | None = None, t: ArrayLike = 0.0) -> None:
        x = _array(x)
        self.x = x if jnp.issubdtype(x.dtype, jnp.inexact) else x.astype(jnp.result_type(float))
        self.v = _zeros(self.x.shape, self.x.dtype, x) if v is None else _array(v, self.x.dtype)
        self.t = _array(t, self.x.dtype)

    def __check_init__(self):
        _require(self.x.ndim >= 2 and self.x.shape[-1] == 2, f"State: x must have shape (n, 2), got {self.x.shape}")
        _require(self.v.shape == self.x.shape, f"State: v must have the shape of x {self.x.shape}, got {self.v.shape}")
        _require(self.t.ndim <= self.x.ndim - 2, f"State: t must be a scalar time (or one per leading axis of x "
                 f"{self.x.shape[:-2]}), got shape {self.t.shape}")


class Control(eqx.Module):
    """What acts on a model from outside during a quantum.

      tau: (n,)   one torque per motor of the model: a chain's torque at each joint (seed §4.2), tau_i acts between
                  link i-1 and link i (for i = 1 between the world and link 1, for i = n on link n-1 alone), positive
                  counter-clockwise on link i; a mechanism's (n_motors,), in the order the motors were created
      F:   (P,2)  point forces added to F^e, one per point (a chain's n, a mechanism's P in the order of its
                  ``point_names``); None (the default) for none
      a_w: (n,2)  prescribed accelerations of a chain's guided points (seed §6.1); ignored elsewhere and by mechanisms
                  (they prescribe motion with drivers)
    """

    tau: Float[Array, " n"]
    F: Float[Array, "P 2"] | None
    a_w: Float[Array, "n 2"]

    def __init__(self, tau: npt.ArrayLike | None = None, F: npt.ArrayLike | None = None,
                 a_w: npt.ArrayLike | None = None, *, n: int | None = None, dtype: DTypeLike | None = None) -> None:
        """Missing tau and a_w are zero, a missing F is None (no point forces). Leading axes (a time axis for
        ``rollout``, a batch axis) are taken from the given parts: ``Control(tau=jnp.zeros((T, n)))`` is a sequence of T
        controls. The number of joints n is tau's, else a_w's, else F's, else ``n``."""
        lead = None
        for arr, tail in ((tau, 1), (a_w, 2), (F, 2)):
            if arr is not None:
                shape = jnp.shape(arr)
                _require(len(shape) >= tail, f"Control: tau must be (..., n), F and a_w (..., n, 2); got {shape}")
                if lead is None:
                    lead, n = shape[: len(shape) - tail], shape[len(shape) - tail]
        _require(n is not None, "Control: give at least one of tau, F, a_w, or n")
        lead = () if lead is None else lead
        first = [_array(a).dtype for a in (tau, F, a_w) if a is not None][:1]  # (the parts take its dtype)
        dtype = dtype or jnp.result_type(float, *first)
        parts = (tau, F, a_w)
        self.tau = _zeros(lead + (n,), dtype, parts) if tau is None else _array(tau, dtype)
        self.F = None if F is None else _array(F, dtype)
        self.a_w = _zeros(lead + (n, 2), dtype, parts) if a_w is None else _array(a_w, dtype)

    def __check_init__(self):
        lead, n = self.tau.shape[:-1], self.tau.shape[-1] if self.tau.ndim else -1
        _require(self.tau.ndim >= 1, f"Control: tau must have shape (..., n), got {self.tau.shape}")
        _require(self.F is None or self.F.shape[:-2] == lead and self.F.shape[-1:] == (2,),
                 f"Control: F must have shape (..., P, 2) with tau's leading axes {lead}, got "
                 f"{None if self.F is None else self.F.shape}")
        _require(self.a_w.shape == lead + (n, 2),
                 f"Control: a_w must have shape (..., n, 2) = {lead + (n, 2)}, got {self.a_w.shape}")

    def forces(self) -> Array:
        """F, or zeros of a_w's shape where it is None (a chain's n points)."""
        return jnp.zeros_like(self.a_w) if self.F is None else self.F
