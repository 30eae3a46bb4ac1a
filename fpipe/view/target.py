"""What ``fpipe view`` shows: the datasets named by its TARGET, the plan of that TARGET, and an
optional saved loader state.

TARGET is what ``fpipe plan`` takes: a dataset folder, a table, a metadataset.yaml or a plan
YAML (:func:`fpipe.datasets.plan_config.load_plan_config`), with the same flags. The datasets
are those the plan reads (a blend's leaves), so the server can only ever open these: a request
names a dataset by its number in :attr:`ViewTarget.names` and a sample by its index.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fpipe.core.errors import ConfigError, FpipeError
from fpipe.datasets.plan_config import PlanConfig, build_dataset, load_plan_config

__all__ = ["DEFAULT_BATCH_SIZE", "ViewTarget", "open_target"]

#: Samples per rank and step when TARGET sets no batch size (a dataset folder without flags).
DEFAULT_BATCH_SIZE = 8


@dataclasses.dataclass
class ViewTarget:
    """The datasets, plan and state one server shows (see :func:`open_target`)."""

    where: str  #: TARGET as given
    names: tuple[str, ...]  #: dataset names, by number
    sources: tuple[tuple[str, dict[str, Any]], ...]  #: (path, open_dataset keywords) by number
    cfg: PlanConfig | None  #: the plan (None when TARGET cannot be planned: see plan_error)
    plan_note: str = ""  #: how the plan was completed (a default batch size), for the pages
    plan_error: str = ""  #: why there is no plan
    state: bytes | None = None  #: a saved loader (or plan) snapshot
    state_info: Mapping[str, Any] | None = None  #: its envelope (``fpipe state show``'s)
    state_name: str = ""  #: the file it came from
    _opened: dict[int, Any] = dataclasses.field(default_factory=dict, repr=False)
    _planned: Any = dataclasses.field(default=None, repr=False)
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    def dataset(self, n: int):
        """Dataset number ``n`` (opened once); IndexError for a number out of range."""
        if not 0 <= n < len(self.sources):
            raise IndexError(f"no dataset {n}")
        with self._lock:
            ds = self._opened.get(n)
            if ds is None:
                if self._planned is not None:  # the one the plan's materializer opened
                    ds = self._planned.materializer.dataset(n)
                else:
                    from fpipe.storage import open_dataset

                    path, kwargs = self.sources[n]
                    ds = open_dataset(path, **kwargs)
                self._opened[n] = ds
            return ds

    def planned(self):
        """Rank 0's :class:`~fpipe.loader.PlannedDataset` (built once), or None without a plan."""
        if self.cfg is None:
            return None
        with self._lock:
            if self._planned is None:
                self._planned = build_dataset(self.cfg, 0)
            return self._planned

    def cook(self, n: int, i: int) -> Any:
        """Sample ``i`` of dataset ``n`` as the plan's materializer cooks it (the server has no
        plan to cook with: None). One at a time: the pages' threads share that materializer,
        whose open datasets and caches are one worker's, not made for several threads."""
        pd = self.planned()
        if pd is None:
            return None
        with self._lock:
            return pd.materializer.sample(n, i, 0, 0)[0]

    def warm(self) -> None:
        """Cook one sample, so that the first sample page does not wait for the materializer's
        imports (torch); run in a thread at start. Errors are left to the pages."""
        try:
            if self.planned() is not None and len(self.dataset(0)):
                self.cook(0, 0)
        except Exception:  # noqa: BLE001 - a warm-up only; the page reports the error
            pass


def open_target(
    target: str,
    overrides: Mapping[str, Any] | None = None,
    *,
    state: bytes | None = None,
    state_info: Mapping[str, Any] | None = None,
    state_name: str = "",
) -> ViewTarget:
    """The :class:`ViewTarget` of TARGET with plan options ``overrides`` (flags, by option
    name; ``mix_history``: a JSON file). Without a batch size, the plan takes
    :data:`DEFAULT_BATCH_SIZE` per rank and the pages say so. A TARGET that cannot be planned
    (no ``train`` split, say) still shows its dataset pages; a path that is no dataset is a
    ConfigError."""
    overrides = dict(overrides or {})
    note, error, cfg = "", "", None
    try:
        cfg = load_plan_config(target, overrides)
    except ConfigError as e:
        try:
            cfg = load_plan_config(target, {"batch_size": DEFAULT_BATCH_SIZE, **overrides})
            note = (
                f"batch_size {DEFAULT_BATCH_SIZE} per rank: fpipe view's default, as TARGET "
                "sets no batch size (give --batch-size or --global-batch-size)"
            )
        except ConfigError:
            error = str(e)
    kwargs = dict(state=state, state_info=state_info, state_name=state_name)
    if cfg is not None:
        try:
            pd = build_dataset(cfg, 0)
        except FpipeError as e:
            error, cfg = str(e), None
        else:
            src = pd.materializer.sources
            sources = tuple((s.path, dict(s.open_kwargs or {})) for s in src)
            view = ViewTarget(target, tuple(pd.datasets), sources, cfg, note, **kwargs)
            view._planned = pd
            return view
    # no plan: a single dataset, shown without the plan pages
    from fpipe.storage import open_dataset

    path = str(Path(target))
    try:
        open_dataset(path)
    except (FpipeError, OSError) as e:
        raise ConfigError(f"{target}: {error or e}") from None
    return ViewTarget(target, (Path(path).name,), ((path, {}),), None, "", error, **kwargs)
