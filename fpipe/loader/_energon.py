"""Energon's loader settings that have an fpipe meaning: ``get_loader(worker_config=)`` and the
worker debug log of ``WorkerConfig(worker_debug_path=, worker_log_level=)``."""

from __future__ import annotations

import json
import os
from typing import Any

from fpipe.core.errors import ConfigError

__all__ = ["DebugLog", "check_worker_config"]


def check_worker_config(dataset: Any, worker_config: Any) -> None:
    """Energon's ``get_loader(ds, worker_config=wc)``: ``wc`` must be the dataset's own (it
    has no effect: the dataset was built for it); another one is refused."""
    if worker_config is None or worker_config == dataset.topology:
        return
    raise ConfigError(
        f"get_loader(worker_config={worker_config!r}) does not match the dataset's "
        f"{dataset.topology!r}: the rank, world size and workers are the dataset's (pass the "
        "worker_config to get_train_dataset / get_val_dataset; as in Energon, the loader's "
        "argument must match it and has no effect)"
    )


class DebugLog:
    """One JSON line per batch the consumer takes, when ``worker_log_level >= 1`` and
    ``worker_debug_path`` is set, as Energon's loader writes it: ``{"t":
    "SavableDataLoader.yield", "r": rank, "w": null, "idx": batch index in this loop,
    "global_idx": batches taken by this loader, "keys": [sample keys]}``. fpipe plans every
    batch in the main process, so the log is written there, to the file of Energon's main
    process: ``{worker_id}`` in the path becomes ``rank * (num_workers + 1)`` (``{pid}``: this
    process id). The folder is created; workers write no log of their own."""

    def __init__(self, topology: Any):
        path = getattr(topology, "worker_debug_path", None)
        level = getattr(topology, "worker_log_level", 0)
        self.rank = topology.rank
        main = topology.rank * (max(getattr(topology, "num_workers", 0), 0) + 1)
        self.path = path.format(worker_id=main, pid=os.getpid()) if path and level else None
        self._taken = 0

    def __bool__(self) -> bool:
        return self.path is not None

    def batch(self, index: int, batch: Any) -> None:
        keys = getattr(batch, "__key__", None)
        if isinstance(batch, dict):
            keys = batch.get("__key__")
        line = {"t": "SavableDataLoader.yield", "r": self.rank, "w": None, "idx": index,
                "global_idx": self._taken}  # fmt: skip
        self._taken += 1
        if keys is not None:
            line["keys"] = [str(k) for k in keys] if isinstance(keys, (list, tuple)) else str(keys)
        assert self.path is not None
        folder = os.path.dirname(self.path)
        if folder:
            os.makedirs(folder, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
