"""Event detection on a sub-quantum of the seed's constant-acceleration motion (seed 000 §7, §12.1).

Over a sub-quantum of length h a point moves as x(s) = x + s v + s^2 a / 2 (:func:`_quantum`), so its slack to an
obstacle line, z^T (x(s) - z0), is a quadratic in s, and the seed's time since an impact is its root (§7); a joint
angle is modelled by the same quadratic with omega^z and alpha^z (§12.1). :func:`detect` decides from the slacks and
angles at the end of the sub-quantum whether anything crosses, and only then computes the crossing times
(:func:`first_crossing`). Used by :mod:`diffchain._events.quantum`.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from .._xla.batching import rare_cond


def _finite(x):
    return jnp.where(jnp.isfinite(x), x, 0.0)


def first_crossing(g0, g1, g2, g_end, h, exact, where=True):
    """Time s in [0, h] after the sub-quantum's start where a slack g(s) = g0 + g1 s + g2 s^2 / 2 first reaches 0.

    This is the seed's time since the event (§7: eps = (-z^T v + sqrt(Delta))/(z^T a); §12.1: the smaller positive
    root) counted from the start, s = h - eps, in the cancellation-free form s = 2 g0 / (-g1 + sqrt(g1^2 - 2 g2 g0))
    (no division by z^T a, which may vanish). For a contact the quadratic is exact (constant acceleration); for an
    angle (``exact`` False) it is a model, and where it has no root in [0, h] the crossing is interpolated linearly
    between g0 and the true end slack g_end. Already violated at the start (g0 <= 0): s = 0. Only the entries
    ``where`` are wanted: elsewhere s = h.

    The gradient is finite on every entry, wanted or not (a ``jnp.where`` outside cannot mask an infinite partial
    derivative: 0 * inf = nan): every guarded division sees a safe denominator where its guard is off, and the
    slacks are divided by their size S = max(|g0|, |g_end|) first (the root does not depend on the scale; S is held
    constant). Without that, a point resting on an obstacle in float32 (a tiny slack) squares its slack in the
    derivative of the quotient to below the smallest float, and the gradient is nan.
    """
    S = jax.lax.stop_gradient(jnp.maximum(jnp.abs(g0), jnp.abs(g_end)))
    good_S = where & (S > 0)
    S = jnp.where(good_S, S, 1.0)
    g0, g1, g2, g_end = g0 / S, g1 / S, g2 / S, g_end / S
    D = g1**2 - 2.0 * g2 * g0
    sq = jnp.sqrt(jnp.where(D > 0, D, 1.0))
    den = -g1 + sq
    ok = good_S & (g0 > 0) & (D > 0) & (den > 0)
    s_quad = jnp.where(ok, 2.0 * g0 / jnp.where(ok, den, 1.0), h)
    lin_ok = good_S & (g0 > 0) & (g0 - g_end > 0)
    s_lin = jnp.where(lin_ok, h * g0 / jnp.where(lin_ok, g0 - g_end, 1.0), h)
    good = ok & (s_quad <= h)
    s = jnp.where(good | exact, s_quad, s_lin)
    return jnp.where(where, jnp.clip(jnp.where(g0 > 0, s, 0.0), 0.0, h), h)


def limit_arc(events):
    """The allowed range [lo, hi] (n,) of each joint's continuous angle and which joints are limited (seed §12.1).

    A relative angle is continuous, so a limit is a stop that the joint cannot pass from either side. With both
    limits, [theta^m, theta^M] (within [-pi, pi]). With only theta^m, the joint may turn the other way round up to
    the same direction, theta^m + 2 pi, and no further: [theta^m, theta^m + 2 pi]; with only theta^M,
    [theta^M - 2 pi, theta^M]. (A joint driven round from theta^m the free way reaches theta^m's direction from the
    other side: there it is stopped, and held as at an upper limit.)"""
    lo, hi = events.theta_min, events.theta_max
    has_lo, has_hi = jnp.isfinite(lo), jnp.isfinite(hi)
    lo_f, hi_f = _finite(lo), _finite(hi)
    two_pi = 2.0 * jnp.pi
    return jnp.where(has_lo, lo_f, hi_f - two_pi), jnp.where(has_hi, hi_f, lo_f + two_pi), has_lo | has_hi


def _slack(z, z0, x):
    """z_k^T (x_i - z0_k) for every point i and line k, (n, K), elementwise (no dot kernels)."""
    return x[:, :1] * z[:, 0] + x[:, 1:] * z[:, 1] - (z0[:, 0] * z[:, 0] + z0[:, 1] * z[:, 1])


def _quantum(x, v, a, h):
    """The seed's constant-acceleration quantum (§3): x + h v + h^2 a / 2, v + h a."""
    return x + h * v + 0.5 * h**2 * a, v + h * a


def _ends_beyond(model, events, es, x, x1):
    """Which free contact points end a sub-quantum from x to x1 below an obstacle line and which free joints beyond a
    limit: the end slacks z^T (x1 - z0) (F, K) and hit (F, K); the joint angles at both ends and hit_hi, hit_lo (F,).
    The angles are the continuous ones (on the branch of ``es.theta``), compared with :func:`limit_arc`, so that no
    wrapping can carry a joint past a limit unseen. (Points and angles: the model's features,
    :class:`diffchain.Model`.)"""
    free = model.free_contacts(events.contact, es.stuck)
    g_end = _slack(events.z, events.z0, model.contact_points(x1))
    th0 = model.feature_angles(x, es.theta)
    th1 = model.feature_angles(x1, th0)
    lo, hi, limited = limit_arc(events)
    free_l = ~es.held & limited
    return (g_end, free[:, None] & (g_end < 0)), (th0, th1, free_l & (th1 > hi), free_l & (th1 < lo))


def detect(model, events, es, x, v, a, h):
    """Contacts and limit hits during a sub-quantum x(s) = x + s v + s^2 a / 2, s in [0, h] (seed §7, §12.1).

    Returns the crossing times s_c (F,) of the free contact points (earliest line), the line index k (F,), and s_l (F,)
    and side (F,) of the free limited joints; h where nothing happens. Whether anything crosses is decided from the
    slacks at the end; the crossing times are computed only then (``lax.cond``: most sub-quanta have no event).
    """
    n = es.stuck.shape[0]
    z, z0 = events.z, events.z0
    lo, hi, _ = limit_arc(events)
    (g_end, hit), (th0, th1, hit_hi, hit_lo) = _ends_beyond(model, events, es, x, _quantum(x, v, a, h)[0])
    hit_c = jnp.any(hit, 1)

    def times(_):
        g0 = _slack(z, z0, model.contact_points(x))
        g1, g2 = _slack(z, 0.0 * z0, model.contact_rates(v)), _slack(z, 0.0 * z0, model.contact_rates(a))
        s = first_crossing(g0, g1, g2, g_end, h, True, hit)
        k = jnp.argmin(s, axis=1) if z.shape[0] else jnp.zeros((n,), int)
        s_c = jnp.where(hit_c, jnp.take_along_axis(s, k[:, None], 1)[:, 0], h) if z.shape[0] else jnp.full((n,), h)
        om, al = model.angle_rates(x, v, a)
        s_hi = first_crossing(hi - th0, -om, -al, hi - th1, h, False, hit_hi)
        s_lo = first_crossing(th0 - lo, om, al, th1 - lo, h, False, hit_lo)
        return s_c, k, s_hi, s_lo

    def none(_):
        full = jnp.full((n,), h)
        return full, jnp.zeros((n,), int), full, full

    s_c, k, s_hi, s_lo = rare_cond(jnp.any(hit_c) | jnp.any(hit_hi | hit_lo), times, none, None)
    side = jnp.where(s_hi <= s_lo, 1.0, -1.0).astype(x.dtype)
    return (s_c, hit_c, k), (jnp.minimum(s_hi, s_lo), hit_hi | hit_lo, side)
