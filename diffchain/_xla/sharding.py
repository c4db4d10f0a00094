"""A batch spread over several devices: :func:`shard` places it, ``jax.jit`` partitions the program that maps it."""
from __future__ import annotations

from typing import Any, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec


def shard(tree: Any, devices: Sequence[jax.Device] | None = None, axis_name: str = "batch") -> Any:
    """``tree`` with the leading (batch) axis of every array leaf split evenly across ``devices`` (default: all of
    ``jax.devices()``, which spans every host after ``jax.distributed.initialize()``).

    The leaves become ``jax.Array`` s with a ``NamedSharding`` over a 1-D ``Mesh`` whose axis is ``axis_name``; other
    leaves (Python numbers, None) are left as they are. A ``jax.jit`` of a ``vmap`` over that axis -- a batch of
    rollouts, its gradient, with any backend and integrator -- then runs each device's part of the batch on that
    device, and its batched outputs come back sharded the same way::

        starts = dc.shard(jax.vmap(lambda th: dc.from_joint_angles(chain, th))(thetas))
        taus = dc.shard(taus)                                       # (B, T, n)
        final, traj = jax.jit(jax.vmap(lambda s, u: dc.rollout(chain, s, dc.Control(tau=u), dt)))(starts, taus)

    The only communication is that of the run-time checks of ``check=True``: each reduces its results over the batch
    (whether an element is bad, the first bad one's index and values: a few numbers per call) for the device where
    its host callback runs, and the checked arrays stay where they are (:func:`diffchain._model.checks.runtime_checks`);
    ``check=False`` has none. A check that fails stops that device while the others wait for it (CPU host devices:
    XLA ends the process after its 40 s timeout): check a doubtful batch before sharding it. On several hosts each
    process passes the same whole batch (it is checked to be equal), and each keeps only its devices' part.

    Raises ValueError if an array leaf has no leading axis or one whose size is not a multiple of the number of
    devices, naming the leaf.
    """
    if not isinstance(axis_name, str) or not axis_name:
        raise TypeError(f"shard: axis_name must be a non-empty str, got {axis_name!r}")
    given = devices
    devices = jax.devices() if devices is None else list(devices) if isinstance(devices, (list, tuple)) else None
    if devices is None or not all(isinstance(d, jax.Device) for d in devices):
        raise TypeError(f"shard: devices must be None or a list or tuple of jax devices (e.g. jax.devices()), got "
                        f"{given!r}")
    if not devices or len(set(devices)) != len(devices):
        raise ValueError(f"shard: devices must be a non-empty sequence of distinct devices, got {devices!r}")
    sharding = NamedSharding(Mesh(np.array(devices), (axis_name,)), PartitionSpec(axis_name))
    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    is_array = [isinstance(leaf, (jax.Array, np.ndarray, np.generic)) for _, leaf in leaves]
    for (path, leaf), array in zip(leaves, is_array):
        shape = np.shape(leaf)
        if array and (not shape or shape[0] % len(devices)):
            raise ValueError(f"shard: every array leaf of tree must have a leading (batch) axis whose size is a "
                             f"multiple of the number of devices ({len(devices)}), got tree"
                             f"{jax.tree_util.keystr(path)} of shape {shape}")
    return jax.tree_util.tree_unflatten(
        treedef, [jax.device_put(leaf, sharding) if array else leaf for (_, leaf), array in zip(leaves, is_array)])
