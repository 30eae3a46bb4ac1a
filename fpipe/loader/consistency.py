"""Cross-rank consistency check of the loader state at save time.

In global mode every rank holds the same plan state at a batch boundary, which is what lets
rank 0 save the loader state alone and any number of ranks restore it. A bug that breaks this
(a rank that took one batch more, a rank built with another seed, dataset or shuffle) would
otherwise surface as a silently wrong resume much later. So, when ``torch.distributed`` is
initialized, ``Loader.state_dict()`` all-gathers a 16-byte hash of this rank's plan state and
raises :class:`ConsistencyError` if the ranks disagree.

Per-rank mode states differ between ranks by design, and so do those of a dataset with
Energon's packing hooks (each rank's buffers yield their own number of packs); there the check
compares the number of batches each rank has taken (all ranks must be at the same step), and
that replicas of one data-parallel rank (tensor / pipeline-parallel peers), when they take
part, hold the same state.

The check is a collective: with it on, every rank of the group must call ``state_dict()`` (as
``accelerate``'s ``save_state`` and torch.distributed.checkpoint do). Turn it off with
``loader.check_consistency = False`` to call ``state_dict()`` on one rank only.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from fpipe.core.errors import FpipeError

__all__ = ["ConsistencyError", "check_loader_consistency", "check_state_consistency"]


class ConsistencyError(FpipeError, RuntimeError):
    """Ranks hold loader states that should be equal and are not."""


def _initialized_dist():
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover
        return None
    if dist.is_available() and dist.is_initialized():
        return dist
    return None


def consistency_enabled(flag: bool | None, group: Any = None) -> bool:
    """``flag``, or (None) whether torch.distributed is initialized with more than one rank."""
    if flag is not None:
        return bool(flag)
    dist = _initialized_dist()
    return dist is not None and dist.get_world_size(group=group) > 1


def _device(dist, group):
    import torch

    backend = str(dist.get_backend(group)).lower()
    if "nccl" in backend and "cpu:" not in backend and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _gather_rows(row: np.ndarray, group: Any) -> np.ndarray:
    """All-gather a small int64 row from every rank: array of shape (ranks, len(row))."""
    import torch

    dist = _initialized_dist()
    if dist is None:
        return row[None, :]
    t = torch.from_numpy(np.ascontiguousarray(row, dtype=np.int64)).to(_device(dist, group))
    out = [torch.empty_like(t) for _ in range(dist.get_world_size(group=group))]
    dist.all_gather(out, t, group=group)
    return np.stack([o.cpu().numpy() for o in out])


def _digest_words(data: bytes) -> list[int]:
    d = hashlib.blake2b(data, digest_size=16).digest()
    return [int(x) for x in np.frombuffer(d, dtype="<i8")]


def check_state_consistency(
    data: bytes,
    *,
    replica_key: int = 0,
    batches: int = 0,
    group: Any = None,
    compare_state: bool = True,
) -> None:
    """Raise :class:`ConsistencyError` unless ranks agree (a collective over ``group``).

    Ranks with the same ``replica_key`` must hold equal ``data`` (when ``compare_state``); all
    ranks must have taken the same number of ``batches``.

    Args:
      data: this rank's state bytes.
      replica_key: ranks that must hold the same state share a key (0 for all in global mode,
        the data-parallel rank in per-rank mode).
      batches: batches this rank has taken.
      group: the torch.distributed group to compare over (None: the default group).
      compare_state: compare the state hashes (False: only the batch counts).
    """
    row = np.array([replica_key, batches, *_digest_words(data)], dtype=np.int64)
    rows = _gather_rows(row, group)
    steps = {int(r[1]) for r in rows}
    problems = []
    if len(steps) > 1:
        by = {s: [i for i, r in enumerate(rows) if int(r[1]) == s] for s in sorted(steps)}
        problems.append(
            "ranks have taken different numbers of batches: "
            + "; ".join(f"ranks {v} took {s}" for s, v in by.items())
        )
    if compare_state:
        for k in sorted({int(r[0]) for r in rows}):
            members = [i for i, r in enumerate(rows) if int(r[0]) == k]
            hashes: dict[bytes, list[int]] = {}
            for i in members:
                hashes.setdefault(rows[i][2:].tobytes(), []).append(i)
            if len(hashes) > 1:
                groups = "; ".join(f"ranks {v} hold {h[:6].hex()}..." for h, v in hashes.items())
                problems.append(f"plan states differ between ranks that must agree: {groups}")
    if problems:
        raise ConsistencyError(
            "loader state check failed at save time: "
            + " | ".join(problems)
            + ". The ranks are not at the same batch, or were built with different settings "
            "(seed, dataset, split, shuffle, batch size); a checkpoint of this state would not "
            "resume the ranks correctly. Every rank must take the same batches and call "
            "state_dict() at the same step (set loader.check_consistency = False to skip this "
            "check)."
        )


def check_loader_consistency(loader: Any) -> None:
    """The check ``Loader.state_dict()`` runs (see the module doc); no-op when disabled.

    It runs over the topology's ``data_parallel_group`` (None: the default group, which also
    compares replicas of a data-parallel rank). Only ranks that hold a loader take part, so
    pass the data-parallel group when some ranks (middle pipeline stages) build none.
    """
    topo = loader.dataset.topology
    group = getattr(topo, "data_parallel_group", None)
    if not consistency_enabled(getattr(loader, "check_consistency", None), group=group):
        return
    state = loader._state
    # per-rank mode, and Energon's packing hooks (each rank at its own place among its own
    # buffers' packs): only replicas of a data-parallel rank hold the same state
    per_rank = getattr(loader.dataset, "distribution", "global") != "global" or bool(
        getattr(loader.dataset, "packing_buffer_size", None)
    )
    check_state_consistency(
        loader.plan.snapshot(state.plan),
        replica_key=topo.rank if per_rank else 0,
        batches=state.batches,
        group=group,
    )
