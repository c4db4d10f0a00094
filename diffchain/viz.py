"""Matplotlib pictures and animations of planar chains.

Three functions, all taking a :func:`~diffchain.Chain` (for the masses and which points are pinned or slide on a line)
and a :class:`~diffchain.State` -- a single state for :func:`draw_chain`, a trajectory with leaves stacked on axis 0
(as returned by :func:`diffchain.rollout`) for the others:

* :func:`draw_chain` -- one pose on an existing ``Axes``;
* :func:`plot_trajectory` -- a stroboscopic overlay of poses, old poses faint, plus the trace of the last point;
* :func:`animate` -- a GIF (pillow writer), skipping steps to reach the requested frame rate.

The module never selects a backend: scripts that run without a display call ``matplotlib.use("Agg")`` themselves
(as ``python -m diffchain`` does), so importing it in a notebook keeps the inline backend.
"""
from __future__ import annotations

import numpy as np

from ._extras import install_hint

_MISSING_MATPLOTLIB = f"diffchain draws with matplotlib, which is not installed; install {install_hint('viz')}"


def _require_matplotlib():
    """Import matplotlib (an optional dependency: the ``viz`` extra); without it, an ImportError that says how to
    install it."""
    try:
        import matplotlib
    except ModuleNotFoundError as e:
        raise ImportError(_MISSING_MATPLOTLIB) from e
    return matplotlib


_require_matplotlib()
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.animation import FuncAnimation, PillowWriter  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402
from matplotlib.patches import Patch, Polygon, Rectangle  # noqa: E402

ROD_COLOR, POINT_COLOR, TRACE_COLOR = "#2b4c7e", "#d1495b", "#edae49"


def _np(a):
    return np.asarray(a, dtype=float)


def hatch_color(color, **kwargs):
    """Keywords for a patch hatched in ``color`` with no outline (``kwargs``: its other keywords).

    ``hatchcolor`` where matplotlib has it (3.11 on); before, a patch hatches in its edge colour, so the edge takes
    ``color`` and is not drawn (``lw=0``): the same picture (the PNG is identical byte for byte on 3.11)."""
    if hasattr(Patch, "set_hatchcolor"):
        return dict(kwargs, ec="none", hatchcolor=color)
    return dict(kwargs, ec=color, lw=0)


def _pin(ax, p, size, color="k", alpha=1.0):
    """A ground-pin symbol below point p: a triangle standing on a hatched strip of ground."""
    x, y = p
    tri = Polygon([(x, y), (x - 0.6 * size, y - size), (x + 0.6 * size, y - size)], closed=True, fc="white", ec=color,
                  lw=1.2, alpha=alpha, zorder=1)
    ground = Rectangle((x - size, y - 1.4 * size), 2 * size, 0.4 * size,
                       **hatch_color(color, fc="none", hatch="////", alpha=alpha, zorder=1))
    ax.add_patch(tri)
    ax.add_patch(ground)
    return [tri, ground] + ax.plot([x - size, x + size], [y - size, y - size], color=color, lw=1.2, alpha=alpha, zorder=1)


def _cart(ax, p, d, size, color="k", alpha=1.0):
    """A slider point: a small block on its line (direction d)."""
    w, h = 1.6 * size, 0.9 * size
    u, n = d, np.array([-d[1], d[0]])
    c = np.array(p)
    corners = [c - u * w / 2 - n * h / 2, c + u * w / 2 - n * h / 2, c + u * w / 2 + n * h / 2, c - u * w / 2 + n * h / 2]
    blk = Polygon(corners, closed=True, fc="0.85", ec=color, lw=1.2, alpha=alpha, zorder=1)
    ax.add_patch(blk)
    return [blk]


def draw_chain(ax, chain, state, *, alpha=1.0, rod_color=ROD_COLOR, point_color=POINT_COLOR, lw=2.5, marker_scale=7.0,
               ground=True, zorder=2):
    """Draw one pose of ``chain`` on ``ax``: rods as lines, points as dots with size ~ sqrt(mass).

    ``state`` is a :class:`~diffchain.State` or just its positions x (n, 2).
    Guided (pinned) points get a ground-pin symbol and slider points their line (only when ``ground``; set it False
    when overlaying many poses). Returns the list of artists. Sets an equal aspect ratio.
    """
    x = _np(getattr(state, "x", state))
    m = _np(chain.m)
    guided, slider = np.asarray(chain.guided), np.asarray(chain.slider) & ~np.asarray(chain.guided)
    scale = float(np.max(_np(chain.l))) if chain.n > 1 else 1.0
    artists = ax.plot(x[:, 0], x[:, 1], "-", color=rod_color, lw=lw, alpha=alpha, solid_capstyle="round",
                      zorder=zorder)
    sizes = marker_scale * np.sqrt(m / np.max(m))
    free = ~guided
    for i in np.flatnonzero(free):
        artists += ax.plot(*x[i], "o", ms=sizes[i], color=point_color, mec="k", mew=0.6, alpha=alpha,
                           zorder=zorder + 1)
    if ground:
        for i in np.flatnonzero(guided):
            artists += _pin(ax, x[i], 0.15 * scale, alpha=alpha)
            artists += ax.plot(*x[i], "o", ms=4, color="white", mec="k", mew=1.2, alpha=alpha, zorder=zorder + 1)
        s = _np(chain.s)
        for i in np.flatnonzero(slider):
            d = np.array([-s[i, 1], s[i, 0]])  # direction of the line {x : s.x = c}, drawn around the point
            span = 0.5 * float(np.sum(_np(chain.l)))
            ends = np.stack([x[i] - span * d, x[i] + span * d])
            artists += ax.plot(ends[:, 0], ends[:, 1], color="0.4", lw=1.0, ls="--", zorder=0)
            artists += _cart(ax, x[i], d, 0.15 * scale, alpha=alpha)
    ax.set_aspect("equal")
    return artists


def _frames(traj):
    """Trajectory as numpy positions (T, n, 2) and times (T,)."""
    x = _np(traj.x)
    t = _np(traj.t) if np.ndim(traj.t) else np.arange(len(x), dtype=float)
    return x, t


def _limits(ax, chain, x, margin=0.15):
    scale = float(np.sum(_np(chain.l)))
    lo, hi = x.reshape(-1, 2).min(0), x.reshape(-1, 2).max(0)
    pad = margin * scale
    ax.set_xlim(lo[0] - pad, hi[0] + pad)
    ax.set_ylim(lo[1] - pad, hi[1] + pad)


def plot_trajectory(chain, traj, every=None, ax=None, tip_trace=True, n_poses=25, window=None, cmap="viridis",
                    colorbar=True):
    """Stroboscopic picture of a trajectory: every ``every``-th pose (default: about ``n_poses`` poses), older poses
    fainter; plus the path of the last point, coloured by time with ``cmap`` (with a colour bar if ``colorbar``).

    ``window=(t0, t1)`` restricts the poses (not the tip path) to a time window -- chaotic motions get unreadable when
    many seconds of poses are overlaid. Returns (fig, ax).
    """
    x, t = _frames(traj)
    T = len(x)
    sel = np.arange(T) if window is None else np.flatnonzero((t >= window[0]) & (t <= window[1]))
    every = max(1, len(sel) // n_poses) if every is None else int(every)
    idx = sel[::every]
    if idx[-1] != sel[-1]:
        idx = np.append(idx, sel[-1])
    fig, ax = (plt.subplots(figsize=(6, 6)) if ax is None else (ax.figure, ax))
    norm = plt.Normalize(t[0], t[-1])
    cm = plt.get_cmap(cmap)
    if tip_trace:
        seg = np.stack([x[:-1, -1], x[1:, -1]], 1)
        lc = LineCollection(seg, cmap=cm, norm=norm, lw=0.9, alpha=0.7, zorder=1)
        lc.set_array(0.5 * (t[:-1] + t[1:]))
        ax.add_collection(lc)
        if colorbar:
            fig.colorbar(lc, ax=ax, shrink=0.6, pad=0.02, label="time along the tip path [s]")
    for k, i in enumerate(idx):
        age = k / max(len(idx) - 1, 1)  # 0 = oldest, 1 = newest
        draw_chain(ax, chain, x[i], alpha=0.12 + 0.88 * age**1.5, lw=1.6, marker_scale=4.5,
                   ground=(k == len(idx) - 1), zorder=2 + k / len(idx))
    _limits(ax, chain, x)
    ax.set_xlabel("x [m]")
    ax.set_ylabel("y [m]")
    return fig, ax


def animate(chain, traj, path, fps=30, dt=None, trail=2.0, figsize=(5, 5), dpi=80):
    """Save an animation of ``traj`` to ``path`` as a GIF (pillow) and return ``path``.

    ``dt`` is the time between trajectory samples (default: from ``traj.t``); samples are skipped so that the GIF
    plays in real time at ``fps``. The last point leaves a trail of the last ``trail`` seconds (0 for none).
    Pinned points and slider lines are drawn once from the first pose (they do not move unless driven).
    """
    x, t = _frames(traj)
    if dt is None:
        dt = float(t[1] - t[0]) if len(t) > 1 else 1.0 / fps
    skip = max(1, int(round(1.0 / (fps * dt))))
    idx = np.arange(0, len(x), skip)
    fig, ax = plt.subplots(figsize=figsize)
    fig.subplots_adjust(left=0.14, right=0.97, bottom=0.11, top=0.97)
    static = draw_chain(ax, chain, x[0])  # ground symbols stay; the moving parts are redrawn below
    for a in static[:1 + int(np.sum(~np.asarray(chain.guided)))]:
        a.remove()
    _limits(ax, chain, x)
    ax.set_xlabel("x [m]")
    ax.set_ylabel("y [m]")
    free = ~np.asarray(chain.guided)
    m = _np(chain.m)
    trace, = ax.plot([], [], "-", color=TRACE_COLOR, lw=1.0, zorder=1)
    rods, = ax.plot([], [], "-", color=ROD_COLOR, lw=2.5, solid_capstyle="round", zorder=2)
    dots = ax.scatter(x[0, free, 0], x[0, free, 1], s=(7.0 * np.sqrt(m[free] / m.max())) ** 2, c=POINT_COLOR,
                      edgecolors="k", linewidths=0.6, zorder=3)
    label = ax.text(0.02, 0.97, "", transform=ax.transAxes, va="top", fontsize=9)
    n_trail = int(round(trail / dt))

    def update(k):
        i = idx[k]
        rods.set_data(x[i, :, 0], x[i, :, 1])
        dots.set_offsets(x[i, free])
        lo = max(0, i - n_trail)
        trace.set_data(x[lo: i + 1, -1, 0], x[lo: i + 1, -1, 1])
        label.set_text(f"t = {t[i]:.2f} s")
        return rods, dots, trace, label

    anim = FuncAnimation(fig, update, frames=len(idx), blit=False)  # save() redraws every frame anyway
    anim.save(path, writer=PillowWriter(fps=fps), dpi=dpi)
    plt.close(fig)
    return path
