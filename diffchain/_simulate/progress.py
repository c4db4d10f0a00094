"""Progress meters for long rollouts: ``rollout(..., progress=TextProgressMeter())`` or ``TqdmProgressMeter()``.

The meter advances from inside the compiled loop, by a host callback (``jax.debug.callback``) at most ``updates``
times per run, on the step counter of the rollout's ``lax.scan`` (one counter for a whole batch under ``vmap``, so a
batch advances one meter). Without a meter (``progress=None``, the default) the program holds no callback. In a
gradient the meter shows the forward pass (the reverse pass does not call it again).
"""
from __future__ import annotations

import sys
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from .._extras import install_hint


class ProgressMeter(eqx.Module):
    """How a rollout shows its progress: a host-side display opened at the first step, shown at most ``updates``
    times and closed after the last. Subclasses implement :meth:`open`, :meth:`show` and :meth:`close`; meters with
    equal fields are the same static argument (one compiled program)."""

    updates: int = 100

    def open(self, who: str, total: int) -> Any:
        raise NotImplementedError

    def show(self, handle: Any, done: int, total: int) -> None:
        raise NotImplementedError

    def close(self, handle: Any) -> None:
        pass


class TextProgressMeter(ProgressMeter):
    """One line per update, e.g. ``rollout: 40% (400000/1000000 steps)``, on ``file`` (``None``: standard error at the
    time of the update)."""

    updates: int = 10
    file: Any = None

    def open(self, who: str, total: int) -> Any:
        return who

    def show(self, handle: Any, done: int, total: int) -> None:
        print(f"{handle}: {100 * done / max(total, 1):.0f}% ({done}/{total} steps)", file=self.file or sys.stderr,
              flush=True)


class TqdmProgressMeter(ProgressMeter):
    """A ``tqdm`` bar (the ``progress`` extra) on ``file`` (``None``: tqdm's default, standard error), refreshed at most
    ``updates`` times per run."""

    updates: int = 100
    file: Any = None

    def __check_init__(self):
        _tqdm()

    def open(self, who: str, total: int) -> Any:
        return _tqdm().tqdm(total=total, desc=who, unit="step", file=self.file)

    def show(self, handle: Any, done: int, total: int) -> None:
        handle.update(done - handle.n)

    def close(self, handle: Any) -> None:
        handle.close()


def _tqdm():
    try:
        import tqdm
    except ImportError as e:
        raise ImportError("TqdmProgressMeter draws with tqdm, which is not installed; install "
                          f"{install_hint('progress')}, or use TextProgressMeter(), which needs nothing") from e
    return tqdm


def check_progress(progress, who: str):
    """``progress`` as given: None or a :class:`ProgressMeter` (a TypeError naming the argument otherwise)."""
    if progress is not None and not isinstance(progress, ProgressMeter):
        raise TypeError(f"{who}: progress must be None or a progress meter such as diffchain.TextProgressMeter() or "
                        f"diffchain.TqdmProgressMeter(), got {type(progress).__name__}")
    if progress is not None and (isinstance(progress.updates, bool) or not isinstance(progress.updates, int)
                                 or progress.updates < 1):
        raise ValueError(f"{who}: progress.updates must be an int >= 1, got {progress.updates!r}")
    return progress


def with_progress(body, progress: ProgressMeter, who: str, n_calls: int, per: int = 1):
    """``body(carry, (x, i)) -> (carry, out)`` for the scan body ``body(carry, x)`` of ``n_calls`` iterations of
    ``per`` steps each, ``i`` the iteration (0 to n_calls - 1): ``progress`` is opened before the first and shows the
    steps done after every ceil(n_calls / updates)-th iteration and after the last. (A rollout checkpointed in
    segments wraps the segment, outside the part that its reverse pass recomputes.)"""
    every, total = max(1, -(-n_calls // progress.updates)), n_calls * per
    state = {}  # the display this program has open (host side)

    def report(done):
        done = int(done)
        if done == 0:  # a run starts (closing what a run stopped before its end left open)
            if "handle" in state:
                progress.close(state.pop("handle"))
            state["handle"] = progress.open(who, total)
        progress.show(state["handle"], done, total)
        if done >= total:
            progress.close(state.pop("handle"))

    def callback(done):
        jax.debug.callback(report, done)

    def stepped(c, xi):
        x, i = xi
        jax.lax.cond(i == 0, callback, lambda _: None, jnp.zeros((), i.dtype))
        c, out = body(c, x)
        jax.lax.cond(((i + 1) % every == 0) | (i + 1 == n_calls), callback, lambda _: None, (i + 1) * per)
        return c, out

    return stepped
