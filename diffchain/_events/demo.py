"""A free chain falls onto the ground and folds against its joint angle limits (:mod:`diffchain._events.quantum`).

The scenario (:data:`SCENARIO`): ``dc.free_chain(6, mass=1.0, length=0.3)`` -- 7 unit point masses, 6 rods of 0.3 m --
released straight, tilted ``phi0`` = -0.8 rad (46 deg) below the horizontal, its centre of mass at ``height`` = 1 m,
spinning rigidly at ``omega`` = -2 rad/s (clockwise) with centre-of-mass velocity (``vx``, 0) = 0. The ground is the
line y = 0; every point can touch it and sticks where it lands (released when the ground would have to pull it). The
interior joints 2..6 are limited to [-1, 1] rad; joint 1, the first link's angle against the world, is free. Impact
impulses, stick / release, limit hits and releases, chatter locks and substep halving are all done by
:func:`diffchain.event_rollout` inside one ``jax.jit``, in float64 (``jax_enable_x64``, which the command line sets for
its own process).

The picture (``docs/falling_chain.png``):

* top: snapshots of the chain side by side (colour from early to late), with the points stuck to the ground (black
  squares) and the joints held at a limit (red rings) at each snapshot time;
* bottom left: the interior joint angles against the dashed limits, thick where a joint is held at its limit, with
  the limit-hit (red, top) and impact (grey, bottom) times as ticks;
* bottom right: which points are stuck and which joints are held over time, and the kinetic + potential energy,
  which drops at every impact and limit hit (the impulses are inelastic).

    python -m diffchain events [--out falling_chain.png] [--gif falling_chain.gif] [--steps 1500]

:func:`falling_chain_figure` is the entry point of that command. It never selects a matplotlib backend
and never touches pyplot's global state: it draws on :class:`matplotlib.figure.Figure` objects (rendered with Agg).
"""
from __future__ import annotations

import os
import time

import jax
import matplotlib
import numpy as np
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

import diffchain as dc
from diffchain import viz


HELD_COLOR, STUCK_COLOR, IMPACT_COLOR = "#c62828", "#1b1b1b", "0.45"
SCENARIO = {"n_links": 6, "mass": 1.0, "length": 0.3, "phi0": -0.8, "height": 1.0, "vx": 0.0, "omega": -2.0,
            "theta_lim": 1.0}


def initial_state(chain, phi0, height, vx, omega):
    """A straight chain tilted by phi0, centre of mass at (0, height) moving at (vx, 0), spinning rigidly at omega."""
    theta = np.zeros(chain.n - 1)
    theta[0] = phi0
    x = np.asarray(dc.from_joint_angles(chain, theta).x)  # point 1 at the origin
    m = np.asarray(chain.m)
    cm = (m[:, None] * x).sum(0) / m.sum()
    # rigid motion v_i = v_cm + omega e_z x (x_i - cm); point 1 sits at -cm relative to the centre of mass
    base_v = (vx + omega * cm[1], -omega * cm[0])
    theta_dot = np.zeros(chain.n - 1)
    theta_dot[0] = omega
    return dc.from_joint_angles(chain, theta, theta_dot, base=(-cm[0], height - cm[1]), base_velocity=base_v)


def simulate(T=1500, dt=1e-3, *, n_links=6, mass=1.0, length=0.3, phi0=-0.8, height=1.0, vx=0.0, omega=-2.0,
             theta_lim=1.0, progress=None):
    """Run the scenario for T quanta of dt under ``jax.jit`` (``progress``: a progress meter, as for
    :func:`diffchain.event_rollout`).

    Returns (chain, events, initial EventState, EventStates after each quantum, StepReports, wall seconds incl.
    compile)."""
    if not jax.config.jax_enable_x64:
        raise RuntimeError("the falling-chain scenario is computed in float64: call "
                           "jax.config.update('jax_enable_x64', True) first")
    chain = dc.free_chain(n_links, mass=mass, length=length)
    n = chain.n
    lo, hi = np.full(n - 1, -theta_lim), np.full(n - 1, theta_lim)
    lo[0], hi[0] = -np.inf, np.inf  # joint 1 is the first link against the world: free for a free chain
    events = dc.Events(n, ground=0.0, theta_min=lo, theta_max=hi)
    es = dc.EventState(initial_state(chain, phi0, height, vx, omega))

    @jax.jit
    def run(chain, events, es):
        _, (traj, reports) = dc.event_rollout(chain, events, es, None, dt, n_steps=T, progress=progress)
        return traj, reports

    t0 = time.perf_counter()
    traj, reports = jax.block_until_ready(run(chain, events, es))
    return chain, events, es, traj, reports, time.perf_counter() - t0


def _ground(ax, xlim, depth=0.07):
    """The line y = 0 with a hatched strip below it."""
    ax.add_patch(Rectangle((xlim[0], -depth), xlim[1] - xlim[0], depth,
                           **viz.hatch_color("0.45", fc="0.93", hatch="////", lw=0, zorder=0)))
    ax.plot(xlim, [0.0, 0.0], color="0.15", lw=1.3, zorder=0.5)


def _marks(ax, x, stuck, held, alpha=1.0, ms=6.5, zorder=10):
    """Filled squares at the stuck points, red rings at the joints held at a limit (joint j+1 sits at point j+1)."""
    arts = []
    if held.any():
        arts += ax.plot(x[held, 0], x[held, 1], "o", ms=1.85 * ms, mfc="none", mec=HELD_COLOR, mew=1.7, alpha=alpha,
                        zorder=zorder)
    if stuck.any():
        arts += ax.plot(x[stuck, 0], x[stuck, 1], "s", ms=ms, color=STUCK_COLOR, mec="white", mew=0.6, alpha=alpha,
                        zorder=zorder + 0.1)
    return arts


def _legend_handles(lim=None):
    held = "joint held at its limit" + ("" if lim is None else f" (|θ| = {lim:g} rad)")
    return [Line2D([], [], marker="s", ls="none", color=STUCK_COLOR, mec="white", ms=7,
                   label="point stuck to the ground"),
            Line2D([], [], marker="o", ls="none", mfc="none", mec=HELD_COLOR, mew=1.7, ms=11, label=held)]


def _snapshot_indices(t, t_first, t_last, n_frames):
    """The start, evenly spaced poses from shortly before the first event to shortly after the last, and the end."""
    times = np.concatenate([[0.0], np.linspace(0.8 * t_first, min(t_last + 0.05, t[-1]), n_frames - 2), [t[-1]]])
    return np.unique(np.clip(np.searchsorted(t, times - 1e-12), 0, len(t) - 1))


def _filmstrip(ax, chain, x, t, stuck, held, idx, cmap, gap=0.2):
    """The poses x[idx] side by side on one ground line, each shifted by a multiple of the motion's x extent."""
    lo, hi = x.reshape(-1, 2).min(0), x.reshape(-1, 2).max(0)
    step = hi[0] - lo[0] + gap
    norm = Normalize(0, t[idx[-1]])
    for k, i in enumerate(idx):
        dx = np.array([k * step - lo[0], 0.0])
        col = cmap(0.05 + 0.72 * norm(t[i]))
        viz.draw_chain(ax, chain, x[i] + dx, rod_color=col, point_color=col, lw=2.2, marker_scale=4.5, ground=False)
        _marks(ax, x[i] + dx, stuck[i], held[i])
        ax.text(k * step + 0.5 * (hi[0] - lo[0]), hi[1] + 0.06, f"t = {t[i]:.2f} s", ha="center", va="bottom",
                fontsize=9, color=col)
        if k:
            ax.axvline(k * step - 0.5 * gap, color="0.85", lw=0.8, zorder=0)
    xlim = (-0.5 * gap, len(idx) * step - 0.5 * gap)
    _ground(ax, xlim)
    ax.set_xlim(*xlim)
    ax.set_ylim(-0.07, hi[1] + 0.25)
    ax.set_aspect("equal")
    ax.set_yticks(np.arange(0, hi[1] + 0.01, 0.5))
    ax.set_xticks([])
    ax.set_ylabel("y [m]")
    for s in ("top", "right", "bottom"):
        ax.spines[s].set_visible(False)
    return (lo[0] - gap, hi[0] + gap), hi[1] + 0.2


def falling_chain_figure(path="docs/falling_chain.png", gif=None, T=1500, dt=1e-3, *, n_frames=8, dpi=100,
                         verbose=True, progress=None, **scenario):
    """Simulate the falling chain for ``T`` quanta of ``dt`` and draw the picture to ``path`` (PNG); with ``gif`` (a
    path) also an animation, if pillow is installed. ``scenario`` overrides entries of :data:`SCENARIO`; ``progress``
    shows the simulation's progress (a progress meter, as for :func:`diffchain.event_rollout`).

    Returns a dict of statistics: event counts (impacts, limit_hits, releases, limit_releases, exhausted, halvings),
    min_height (the lowest point height reached, i.e. minus the worst penetration), energies, wall time, paths."""
    sc = {**SCENARIO, **scenario}
    chain, _, es0, traj, rep, wall = simulate(T, dt, progress=progress, **sc)
    n = chain.n

    def with_start(a0, a):  # prepend the initial value: index k is the state at t = k dt
        return np.concatenate([np.asarray(a0)[None], np.asarray(a)])

    x = with_start(es0.x, traj.state.x)
    t = with_start(es0.t, traj.state.t)
    stuck, held = with_start(es0.stuck, traj.stuck), with_start(es0.held, traj.held)
    E = with_start(dc.energy(chain, es0.state), dc.energy(chain, traj.state))
    theta = with_start(dc.joint_angles(es0.state), jax.vmap(dc.joint_angles)(traj.state))
    imp, hits = np.asarray(rep.impacts), np.asarray(rep.limit_hits)
    t_rep = t[1:]  # the report of quantum k is about (t[k], t[k+1]]
    if not np.all(np.isfinite(x)):
        raise FloatingPointError("falling_chain_figure: the simulation produced NaN")
    stats = {"wall": wall, "T": T, "dt": dt, "impacts": int(imp.sum()), "limit_hits": int(hits.sum()),
             "releases": int(np.asarray(rep.releases).sum()),
             "limit_releases": int(np.asarray(rep.limit_releases).sum()),
             "exhausted": int(np.asarray(rep.exhausted).sum()), "halvings": int(np.asarray(rep.halvings).sum()),
             "event_cuts": int(np.asarray(rep.events).sum()), "min_height": float(x[..., 1].min()),
             "stuck_final": (np.flatnonzero(stuck[-1]) + 1).tolist(),  # 1-based point / joint numbers
             "held_final": (np.flatnonzero(held[-1]) + 1).tolist(),
             "E0": float(E[0]), "E_end": float(E[-1]), "max_energy_rise": float(np.max(np.diff(E))), "scenario": sc}

    k_imp, k_hit = np.flatnonzero(imp.any(1)), np.flatnonzero(hits.any(1))
    k_ev = np.union1d(k_imp, k_hit)
    t_first, t_last = (t_rep[k_ev[0]], t_rep[k_hit[-1] if len(k_hit) else k_ev[-1]]) if len(k_ev) else (0.0, t[-1])
    idx = _snapshot_indices(t, t_first, t_last, n_frames)
    cmap = matplotlib.colormaps["viridis"]

    fig = Figure(figsize=(12.5, 7.6), layout="constrained")
    gs = fig.add_gridspec(3, 2, width_ratios=[1.3, 1], height_ratios=[1.45, 1.0, 1.0])
    ax0 = fig.add_subplot(gs[0, :])
    gif_xlim, gif_ytop = _filmstrip(ax0, chain, x, t, stuck, held, idx, cmap)
    ax0.legend(handles=_legend_handles(sc["theta_lim"]), loc="upper right", bbox_to_anchor=(1.0, 1.22), ncol=2,
               fontsize=9, frameon=False)
    spin = "clockwise" if sc["omega"] < 0 else "counter-clockwise"
    ax0.set_title(f"snapshots: released straight, tilted {np.degrees(-sc['phi0']):.0f}° with its centre of mass at "
                  f"{sc['height']:g} m, spinning {spin} at {abs(sc['omega']):g} rad/s", loc="left", fontsize=10)

    # joint angles, with the limit-hit and impact times as ticks
    joints = np.arange(1, n - 1)  # interior joints: 0-based index j is joint j+1 (at point j+1)
    ax1 = fig.add_subplot(gs[1:, 0])
    jcols = matplotlib.colormaps["tab10"](np.arange(len(joints)))
    for c, j in zip(jcols, joints):
        ax1.plot(t, theta[:, j], color=c, lw=1.3, label=f"θ{j + 1}")
        ax1.plot(t, np.where(held[:, j], theta[:, j], np.nan), color=c, lw=5.0, alpha=0.4, solid_capstyle="butt")
    lim = sc["theta_lim"]
    for v in (-lim, lim):
        ax1.axhline(v, color="0.3", ls="--", lw=1.0)
    ytop, ybot = 1.3 * lim, -1.3 * lim
    ax1.set_ylim(ybot, ytop)
    for k in k_hit:
        ax1.plot([t_rep[k]] * 2, [ytop - 0.09 * lim, ytop], color=HELD_COLOR, lw=1.3)
    for k in k_imp:
        ax1.plot([t_rep[k]] * 2, [ybot, ybot + 0.09 * lim], color=IMPACT_COLOR, lw=1.3)
    ax1.text(0.995, 0.975, "limit hits", transform=ax1.transAxes, color=HELD_COLOR, fontsize=8, va="top", ha="right")
    ax1.text(0.995, 0.025, "impacts", transform=ax1.transAxes, color=IMPACT_COLOR, fontsize=8, va="bottom", ha="right")
    ax1.set_ylabel("joint angle θ [rad]")
    ax1.set_xlabel("time [s]")
    ax1.set_title("interior joint angles (thick: held at the limit, dashed: limits)", loc="left", fontsize=10)
    ax1.legend(ncol=1, fontsize=8.5, loc="lower right", bbox_to_anchor=(1.0, 0.1), framealpha=0.9, handlelength=1.4)
    ax1.grid(alpha=0.3)
    ax1.set_xlim(0, t[-1])

    # which points are stuck and which joints are held
    ax2 = fig.add_subplot(gs[1, 1], sharex=ax1)
    rows = [(stuck[:, i], f"p{i + 1}", STUCK_COLOR) for i in range(n)] + \
           [(held[:, j], f"θ{j + 1}", HELD_COLOR) for j in joints]
    for r, (on, _, c) in enumerate(rows):
        ax2.fill_between(t, r - 0.36, r + 0.36, where=on, color=c, lw=0, step="mid")
    ax2.set_yticks(range(len(rows)), [name for _, name, _ in rows], fontsize=7)
    ax2.set_ylim(-0.7, len(rows) - 0.3)
    ax2.axhline(n - 0.5, color="0.6", lw=0.6)
    ax2.set_title("points stuck to the ground (black), joints held at a limit (red)", loc="left", fontsize=10)
    ax2.grid(axis="x", alpha=0.3)
    ax2.tick_params(labelbottom=False)

    # energy
    ax3 = fig.add_subplot(gs[2, 1], sharex=ax1)
    for k in k_imp:
        ax3.axvline(t_rep[k], color=IMPACT_COLOR, lw=0.8, ls=":")
    for k in k_hit:
        ax3.axvline(t_rep[k], color=HELD_COLOR, lw=0.8, ls=":", alpha=0.7)
    ax3.plot(t, E, color=viz.ROD_COLOR, lw=1.6)
    ax3.set_ylabel("E [J]")
    ax3.set_xlabel("time [s]")
    ax3.set_title("kinetic + potential energy (dotted: impacts grey, limit hits red)", loc="left", fontsize=10)
    ax3.grid(alpha=0.3)

    fig.suptitle(f"A {sc['n_links']}-link chain falls onto the ground and folds against its joint angle limits\n"
                 f"{chain.n} × {sc['mass']:g} kg, rods {sc['length']:g} m, |θ2..θ{n - 1}| ≤ {lim:g} rad; "
                 f"dc.event_rollout, dt = {dt * 1e3:g} ms: {stats['impacts']} impacts, {stats['limit_hits']} limit "
                 f"hits, {stats['releases']} contact and {stats['limit_releases']} limit releases", fontsize=11.5)
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, dpi=dpi)
    stats["png"] = path
    stats["gif"] = _animate(chain, x, t, stuck, held, gif_xlim, gif_ytop, gif) if gif else None
    if verbose:
        print(f"{path}: {stats['impacts']} impacts, {stats['limit_hits']} limit hits, {stats['releases']} contact "
              f"releases, {stats['limit_releases']} limit releases, {stats['exhausted']} exhausted quanta, "
              f"{stats['halvings']} halvings; min height {stats['min_height']:.2e} m; energy {stats['E0']:.2f} -> "
              f"{stats['E_end']:.2f} J (largest rise in a quantum {stats['max_energy_rise']:.1e} J); {T} quanta in "
              f"{wall:.1f} s incl. compile")
    return stats


def _animate(chain, x, t, stuck, held, xlim, ytop, path, fps=25, slow=2.0, dpi=80, hold=1.0):
    """A GIF at 1/slow of real speed (pillow writer), the last pose held for ``hold`` s; returns its path, or None
    without pillow."""
    try:
        import PIL  # noqa: F401
    except ImportError:
        print("falling_chain: pillow is not installed, no GIF written")
        return None
    from matplotlib.animation import FuncAnimation, PillowWriter

    skip = max(1, round(1.0 / (fps * slow * (t[1] - t[0]))))
    idx = np.arange(0, len(t), skip)
    idx = np.concatenate([idx, np.full(round(hold * fps), len(t) - 1)])
    fig = Figure(figsize=(4.6, 4.8), layout="constrained")
    ax = fig.add_subplot()
    ax.set_xlim(*xlim)
    ax.set_ylim(-0.07, ytop)
    ax.set_aspect("equal")
    _ground(ax, xlim)
    ax.set_xlabel("x [m]")
    ax.set_ylabel("y [m]")
    ax.set_title(f"falling chain, {1 / slow:g}× speed", fontsize=10)
    ax.legend(handles=_legend_handles(), loc="upper right", fontsize=7.5, framealpha=0.9)
    label = ax.text(0.03, 0.97, "", transform=ax.transAxes, va="top", fontsize=9)
    moving = []

    def update(k):
        i = idx[k]
        for a in moving:
            a.remove()
        moving[:] = viz.draw_chain(ax, chain, x[i], point_color=viz.TRACE_COLOR, ground=False) + \
            _marks(ax, x[i], stuck[i], held[i])
        label.set_text(f"t = {t[i]:.2f} s")
        return [*moving, label]

    FuncAnimation(fig, update, frames=len(idx), blit=False).save(path, writer=PillowWriter(fps=fps), dpi=dpi)
    return path
