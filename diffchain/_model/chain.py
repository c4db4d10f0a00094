"""The chain builder: :func:`Chain` (and :func:`pendulum`, :func:`free_chain`, :func:`cart_chain`), a serial chain as a
:class:`~diffchain.Model` (seed 000 §2; seed 003 natural coordinates). Its state and control input are in
:mod:`diffchain._state`.

The shapes (the number of points ``n``) decide the compiled program; everything else is an array, so a batch of models
can be vmapped and a new model of the same size never recompiles. The joint kinds are boolean masks: the solvers switch
constraints on and off with them, never by changing shapes. (Differentiate with respect to a whole Chain with
``eqx.filter_grad``, which skips the boolean masks, or build the Chain inside the differentiated function.)
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
from jax.typing import ArrayLike

from .checks import _require, _show, runtime_checks
from .host import array as _array, float_dtype, xp as _xp
from .model import Model

G = 9.81  # seed 000 §4.1


def Chain(m: npt.ArrayLike, l: npt.ArrayLike, *, guided: npt.ArrayLike | None = None,
          slider: npt.ArrayLike | None = None, s: npt.ArrayLike | None = None, c: npt.ArrayLike | None = None,
          k_omega: npt.ArrayLike | None = None, k_v: npt.ArrayLike | None = None, g: ArrayLike = G,
          link_mass: npt.ArrayLike | None = None, link_com: npt.ArrayLike | None = None,
          link_inertia: npt.ArrayLike | None = None, torsion_k: npt.ArrayLike | None = None,
          torsion_theta0: npt.ArrayLike | None = None, check: bool = True) -> Model:
    """A planar chain of points ("joints") 1..n joined by rigid rods ("links") 1..n-1 (seed 000 §1–2): a
    :class:`Model` whose :attr:`~Model.serial` is True.

    Arrays (differentiable):
      m:        (n,)   point masses m_i > 0 (>= 0 where the links carry the mass)
      l:        (n-1,) rod lengths l_i > 0, rod i joins point i to point i+1
      s:        (n,2)  unit normal s_i of the line a slider point moves on (used where ``slider[i]``)
      c:        (n,)   offset of that line: the point stays on {x : s_i·x = c_i}
      k_omega:  (n,)   joint viscous damping: torque -k_omega_i * omega_i^z (seed §4.3); a scalar damps joints
                       1..n-1 (joint n has no outgoing link: omega_n^z would be link n-1 against the world);
                       None (the default): no dampers, and nothing of them is computed
      k_v:      (n,)   quadratic air drag: force -k_v_i * v_i * |v_i| (seed §4.3); None (the default): no drag
                       (give 0.0 for a coefficient to differentiate from zero)
      g:        ()     gravitational acceleration, acting along -y (seed §4.1)
      torsion_k: (n,)  optional torsional springs at the joints (None: none): the torque -torsion_k_i
                       wrap(theta_i - torsion_theta0_i) at joint i, about the joint's motor angle theta_i (link i
                       against link i-1, the world where there is none; a
                       :class:`~diffchain._kinds.torsion.TorsionalSprings` in ``model.forces``); a scalar, as
                       ``k_omega``, acts at joints 1..n-1
      torsion_theta0: (n,) their rest angles (a scalar for all; default 0)
    Boolean masks (n,):
      guided:   which points have a prescribed acceleration a^w (seed §6.1; a fixed pin is a^w = 0)
      slider:   which points move on a line (seed §6.3, §6.4); ``guided`` wins where both are set
    The last point is the terminal joint of seed §6.2 (no rod leaves it).
    Optional rigid links with distributed mass (all None for the seed's massless rods; see the guide's
    [Rigid links with distributed mass][rigid-links-with-distributed-mass]):
      link_mass:    (n-1,)   mass of link k
      link_com:     (n-1,2)  its centre of mass (a, b) in metres: a along r_k from point k, b across (along r_k^*);
                             default (l_k/2, 0)
      link_inertia: (n-1,)   moment of inertia about the centre of mass (a uniform rod: mass l^2 / 12); default 0
    The model reads them back under these names (``chain.m``, ``chain.l``, ``chain.k_omega``, ``chain.link_mass``,
    ...). Shapes are checked here; values (finite, positive masses and lengths, ...) too, also when they are traced:
    under ``jit``/``vmap`` the check runs with the program (:func:`runtime_check`). ``check=False`` skips the checks of
    traced values (a program without host callbacks); known values are always checked.
    """
    m = _xp(m).asarray(m)
    m = _array(m, float_dtype(m))
    _require(m.ndim == 1 and m.shape[0] >= 1,
             f"Chain: masses m must be a 1-D array of n >= 1 point masses, got shape {m.shape}")
    n, dtype = m.shape[0], m.dtype
    l = _array(l, dtype)
    _require(l.shape == (n - 1,),
             f"Chain: lengths l must have shape (n-1,) = ({n - 1},) for n = {n} points, got {l.shape}")
    a = {"m": m, "l": l}
    a["s"] = _per_point_or_one(s if s is not None else [0.0, 1.0], (n, 2), dtype, "Chain: s (slider normals)")
    a["c"] = _per_point_or_one(0.0 if c is None else c, (n,), dtype, "Chain: c (slider offsets)")
    if k_omega is not None:
        a["k_omega"] = _per_joint(k_omega, n, dtype, "k_omega")
    if k_v is not None:
        a["k_v"] = _per_point_or_one(k_v, (n,), dtype, "Chain: k_v")
    if torsion_k is not None:
        a["torsion_k"] = _per_joint(torsion_k, n, dtype, "torsion_k")
        a["torsion_theta0"] = _per_point_or_one(0.0 if torsion_theta0 is None else torsion_theta0, (n,), dtype,
                                                "Chain: torsion_theta0")
    else:
        _require(torsion_theta0 is None, "Chain: torsion_theta0 needs torsion_k (the springs' stiffness)")
    a["g"] = _array(g, dtype)
    _require(a["g"].shape == (), f"Chain: g must be a scalar (the gravitational acceleration along -y), got shape "
             f"{a['g'].shape}")
    guided = _array(np.zeros((n,), bool) if guided is None else guided, bool)
    slider = _array(np.zeros((n,), bool) if slider is None else slider, bool)
    _require(guided.shape == (n,), f"Chain: guided must have one flag per point (n = {n}), got shape {guided.shape}")
    _require(slider.shape == (n,), f"Chain: slider must have one flag per point (n = {n}), got shape {slider.shape}")
    links = not (link_mass is None and link_com is None and link_inertia is None)
    if links:
        k = (n - 1,)
        a["link_mass"] = _per_point_or_one(0.0 if link_mass is None else link_mass, k, dtype, "Chain: link_mass")
        a["link_inertia"] = _per_point_or_one(0.0 if link_inertia is None else link_inertia, k, dtype,
                                              "Chain: link_inertia")
        if link_com is None:
            xp = _xp(l)
            a["link_com"] = _array(xp.stack([l / 2, xp.zeros_like(l)], -1), dtype)
        else:
            a["link_com"] = _array(link_com, dtype)
            _require(a["link_com"].shape == k + (2,), f"Chain: link_com must have shape (n-1, 2) = {k + (2,)}, one "
                     f"centre of mass (a, b) per link, got {a['link_com'].shape}")
    a = _check_values(a, guided, slider, check)
    return _path_model(a, guided, slider)


def _path_model(a, guided, slider) -> Model:
    """The :class:`Model` of a chain from its checked arrays ``a`` (:func:`Chain`): rods i -> i+1 as :class:`Rod` rows,
    links as bodies, and at every joint a motor and a damper (joint i: link i against link i-1, the world where
    there is none)."""
    from .._constraints.kinds import Coincide, OnLine, PointKinds, Rod
    from .._kinds.torsion import TorsionalSprings
    from .model import Bodies

    m, dtype = a["m"], a["m"].dtype
    n = m.shape[0]
    k = np.arange(n)
    world = np.array([-2, -1])
    before = np.where((k >= 1)[:, None], np.stack([k - 1, k], -1), world)     # link i-1 (the world before link 1)
    after = np.where((k <= n - 2)[:, None], np.stack([k, k + 1], -1), world)  # link i (the world after the last)
    joints = _array(np.concatenate([before, after], -1))
    start, end = _array(np.arange(n - 1)), _array(np.arange(1, n))
    none_i, none_f = _array(np.zeros((0,), int)), _array(np.zeros((0,)), dtype)
    bodies = Bodies(start, end, a["link_mass"], a["link_com"], a["link_inertia"]) if "link_mass" in a else None
    forces = (TorsionalSprings(joints, a["torsion_k"], a["torsion_theta0"]),) if "torsion_k" in a else ()
    return Model(W=None, offset=None, m=m, bodies=bodies, g=a["g"], dist=Rod(start, end, a["l"]),
                 coin=Coincide(none_i, none_i), line=OnLine(none_i, none_i, none_i, none_f), drivers=(), on=None,
                 point_kinds=PointKinds(guided, slider, a["s"], a["c"]), spring_idx=_array(np.zeros((0, 2), int)),
                 spring_k=none_f, spring_L0=none_f, spring_c=none_f, motor_idx=joints,
                 damper_idx=joints if "k_omega" in a else _array(np.zeros((0, 4), int)),
                 damper_c=a.get("k_omega", none_f), k_v=a.get("k_v"), limit_idx=_array(np.zeros((0, 4), int)),
                 limit_lo=none_f, limit_hi=none_f, forces=forces)


def _check_values(a, guided, slider, check):
    """``a`` after the checks of finite, positive masses and lengths, ...: now where the values are known, else at run
    time if ``check`` (one :func:`runtime_checks` for all, tied to every traced array)."""
    traced = []
    links = "link_mass" in a

    def verify(name, bad, what, got=None):
        val = a[name]
        if not isinstance(val, jax.core.Tracer):
            val_np = np.asarray(val)
            _require(not np.any(bad(np, val_np)), f"Chain: {name} must be {what}, got "
                     f"{_show(val_np if got is None else got(np, val_np))}")
        elif check:
            traced.append((bad(jnp, val), f"Chain: {name} must be {what}", val if got is None else got(jnp, val)))

    finite = lambda xp, v: ~xp.isfinite(v)  # noqa: E731
    for name in ("m", "l"):
        verify(name, finite, "finite")
    if links:
        verify("m", lambda xp, v: v < 0, "non-negative")
    else:
        verify("m", lambda xp, v: ~(v > 0), "positive")
    verify("l", lambda xp, v: ~(v > 0), "positive")
    for name in [k for k in ("k_omega", "k_v", "torsion_k") if k in a]:
        verify(name, lambda xp, v: ~(xp.isfinite(v) & (v >= 0)), "finite and non-negative")
    verify("g", finite, "finite")
    verify("c", finite, "finite")
    if "torsion_theta0" in a:
        verify("torsion_theta0", finite, "finite")
    on = slider if isinstance(slider, jax.core.Tracer) else np.asarray(slider)
    norm = lambda xp, v: xp.sqrt(xp.sum(v * v, -1))  # noqa: E731
    verify("s", lambda xp, v: on & ~(xp.abs(norm(xp, v) - 1) < 1e-6),
           "unit vectors where slider is set (norms 1 to 1e-6): the norms", norm)
    if links:
        for name in ("link_mass", "link_inertia", "link_com"):
            verify(name, finite, "finite")
        for name in ("link_mass", "link_inertia"):
            verify(name, lambda xp, v: v < 0, "non-negative")
        traced += _check_mass(_path_model(a, guided, slider), check)
    if traced:
        names = [k for k, v in a.items() if isinstance(v, jax.core.Tracer)]
        a = {**a, **dict(zip(names, runtime_checks(tuple(a[k] for k in names), traced)))}
    return a


def _check_mass(chain, check):
    """[] or the run-time check that every point carries mass (with rigid links)."""
    lowest = _lowest_mass_eigenvalues(chain)
    if not isinstance(lowest, jax.core.Tracer):
        weak = np.flatnonzero(np.asarray(lowest) <= 0)
        _require(weak.size == 0, f"Chain: points {weak.tolist()} carry no mass (neither a point mass nor link "
                 "mass at that end): their accelerations would be undetermined")
        return []
    return [(lowest <= 0, "Chain: every point must carry mass (a point mass or link mass at that end), else its "
             "acceleration is undetermined; the smallest eigenvalues of the points' 2x2 mass blocks are",
             lowest)] if check else []


@jax.jit
def _lowest_mass_eigenvalues(chain):
    """The smallest eigenvalue of each point's 2x2 mass block (one compiled program, also outside ``jit``)."""
    from .inertia import point_mass_blocks

    return jnp.linalg.eigvalsh(point_mass_blocks(chain))[:, 0]


def _per_joint(value, n, dtype, name):
    """A per-joint coefficient (n,); a scalar acts at joints 1..n-1 (joint n has no outgoing link)."""
    value = _array(value, dtype)
    if value.ndim == 0:
        xp = _xp(value)
        value = _array(xp.where(xp.arange(n) < n - 1, value, 0.0), dtype)
    _require(value.shape == (n,), f"Chain: {name} must be a scalar or have shape ({n},), got {value.shape}")
    return value


def _per_point_or_one(value, shape, dtype, name):
    """``value`` as an array of ``shape``, from that shape or from one entry for all (shape ``shape[1:]``)."""
    xp = _xp(value)
    arr = xp.asarray(value, dtype)
    _require(arr.shape in (shape, shape[1:]), f"{name} must have shape {shape} or {shape[1:]} (one value for all), "
             f"got {arr.shape}")
    return _array(xp.broadcast_to(arr, shape), dtype)


def _per_point(value, n, name):
    xp = _xp(value)  # (on the host where known: pendulum concatenates the result)
    arr = xp.asarray(value)
    arr = arr.astype(float_dtype(arr))
    _require(arr.ndim == 0 or arr.shape == (n,), f"{name} must be a scalar or have shape ({n},), got {arr.shape}")
    return xp.broadcast_to(arr, (n,))


def pendulum(n_links: int, mass: npt.ArrayLike = 1.0, length: npt.ArrayLike = 1.0, **kwargs: Any) -> Model:
    """An ``n_links``-link pendulum: n = n_links + 1 points, point 1 pinned (guided with a^w = 0), the rest free.

    ``mass`` (scalar or (n_links,)) sits at points 2..n; the pinned point gets the same mass as point 2 (it never moves,
    so its value does not matter). ``length`` is a scalar or (n_links,). Other keywords go to :func:`Chain`.
    """
    _require(int(n_links) >= 1, f"pendulum: n_links must be >= 1, got {n_links}")
    m = _per_point(mass, n_links, "pendulum: mass")
    return Chain(_xp(m).concatenate([m[:1], m]), _per_point(length, n_links, "pendulum: length"),
                 guided=[True] + [False] * n_links, **kwargs)


def free_chain(n_links: int, mass: npt.ArrayLike = 1.0, length: npt.ArrayLike = 1.0, **kwargs: Any) -> Model:
    """A free-floating chain of ``n_links`` rods and n_links + 1 point masses (``mass`` scalar or (n_links+1,))."""
    _require(int(n_links) >= 1, f"free_chain: n_links must be >= 1, got {n_links}")
    return Chain(_per_point(mass, n_links + 1, "free_chain: mass"), _per_point(length, n_links, "free_chain: length"),
                 **kwargs)


def cart_chain(n_links: int, mass: npt.ArrayLike = 1.0, length: npt.ArrayLike = 1.0, *,
               normal: npt.ArrayLike = (0.0, 1.0), offset: ArrayLike = 0.0, **kwargs: Any) -> Model:
    """A chain whose first point slides on the line {x : normal·x = offset} (a cart on a rail, seed §6.3, §14).

    ``mass`` is a scalar or (n_links+1,) (the first entry is the cart). The default line is the x axis.
    """
    _require(int(n_links) >= 1, f"cart_chain: n_links must be >= 1, got {n_links}")
    n = n_links + 1
    xp = _xp(normal, offset)
    s = xp.concatenate([xp.asarray(normal, float)[None], xp.zeros((n - 1, 2))])
    c = xp.concatenate([xp.asarray(offset, float)[None], xp.zeros((n - 1,))])
    return Chain(_per_point(mass, n, "cart_chain: mass"), _per_point(length, n_links, "cart_chain: length"),
                 slider=[True] + [False] * n_links, s=s, c=c, **kwargs)
