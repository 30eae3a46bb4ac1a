"""A torch DataLoader over batch recipes, with exact, small, worker-independent state.

The plan runs in the main process and feeds recipes (as bytes) to a standard
``torch.utils.data.DataLoader`` as its "indices"; workers materialize them; batches arrive in
plan order. The loader remembers the plan state that follows each recipe handed out, and when
the consumer *takes* a batch, that state becomes the loader's state. So the state never
includes prefetched work, nothing is per worker, and a restore replays nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal, get_args

import msgspec

from fpipe.core.errors import ConfigError, SnapshotError
from fpipe.core.keywords import check_keywords
from fpipe.encode.packing import check_plan_packing
from fpipe.loader import _steering
from fpipe.loader._energon import DebugLog, check_worker_config
from fpipe.loader._group_batches import check_group_loader
from fpipe.loader._iteration import closed_at_exit, iterate_batches
from fpipe.loader._read_ahead import DEFAULT_READ_AHEAD_BYTES, DEFAULT_READ_AHEAD_STEPS
from fpipe.loader._recovery import Healer
from fpipe.loader._stats import loader_stats
from fpipe.loader.state import (
    LoaderState,
    LoaderStats,
    decode_loader_state,
    encode_loader_state,
    loader_parts,
    snapshot_bytes,
)
from fpipe.loader.watchdog import WatchdogDataset, watch_batches
from fpipe.materialize.parts import leaves
from fpipe.plan.skip import normalize_step_ranges

if TYPE_CHECKING:  # planned.py imports this module to iterate a dataset
    from fpipe.loader.planned import PlannedDataset

__all__ = ["Loader", "LoaderStats", "get_loader", "get_savable_loader"]


#: Seconds the loader waits for one batch from its workers before raising WorkerError.
DEFAULT_TIMEOUT_S = 300.0

#: ``worker_mode``: DataLoader worker processes, threads of the main process, or Ray actors.
WorkerMode = Literal["process", "thread", "ray"]
WORKER_MODES: tuple[str, ...] = get_args(WorkerMode)


class Loader:
    """Iterable of batches with ``state_dict`` / ``load_state_dict`` (torch Stateful).

    Use :func:`get_loader` to build one.
    """

    def __init__(
        self,
        dataset: PlannedDataset,
        *,
        num_workers: int = 0,
        prefetch_factor: int = 2,
        pin_memory: bool = False,
        timeout: float = DEFAULT_TIMEOUT_S,
        multiprocessing_context: Any = None,
        worker_mode: WorkerMode = "process",
        recover_workers: bool = True,
        read_ahead_bytes: int | None = None,
        read_ahead_steps: int = DEFAULT_READ_AHEAD_STEPS,
        ray_options: dict | None = None,
    ):
        if worker_mode not in WORKER_MODES:
            raise ConfigError(
                f"worker_mode must be one of {', '.join(map(repr, WORKER_MODES))}, "
                f"got {worker_mode!r}"
            )
        check_group_loader(dataset, worker_mode, num_workers)
        self.dataset = dataset
        self.plan = dataset.plan
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.multiprocessing_context = multiprocessing_context
        self.worker_mode = worker_mode
        #: bytes each worker reads ahead at most (see fpipe.loader._read_ahead), steps ahead
        self.read_ahead_bytes = _read_ahead_budget(dataset, read_ahead_bytes)
        if read_ahead_steps < 0:
            raise ConfigError(f"read_ahead_steps must be >= 0, got {read_ahead_steps}")
        self.read_ahead_steps = read_ahead_steps
        #: the workers' read counters, summed (stats().io)
        self._io: dict[str, int] = {}
        #: worker_mode="ray": the actors' options, and ``address`` for ray.init (docs/ray.md)
        self.ray_options = dict(ray_options or {})
        if worker_mode == "ray":
            from fpipe.loader._ray_workers import import_ray

            import_ray()  # a ConfigError naming the extra now, not at the first batch
        for mat in leaves(dataset.materializer):  # in this process, not at a worker's batch
            if getattr(mat, "plan_packs", False):
                check_plan_packing(mat.task_encoder)
        #: replace failed workers and materialize their recipes again (see _recovery)
        self._healer = Healer(dataset.materializer) if recover_workers else None
        skip = getattr(dataset, "skip_steps", ())
        _check_skippable(dataset, skip)
        self._state = LoaderState(plan=self.plan.init(), skip=skip)
        #: the online weight changes this loader knows (see _steering.MixLog)
        self._mix = _steering.MixLog()
        self._generation = 0
        self._debug_log = DebugLog(dataset.topology)
        #: grouped batching's groups (fpipe.loader._group_batches), kept between loops
        self._grouper: Any = None

    def __len__(self) -> int:
        """``len(dataset)``, Energon's length: the batches of a ``for`` loop (the whole stream
        when it ends, one epoch of a repeating one, or ``virtual_epoch_length``). It does not
        shrink as batches are taken or after a restore."""
        return len(self.dataset)

    def config(self) -> dict[str, Any]:
        """Energon's ``loader.config()``: the loader's settings and its dataset's description,
        JSON-able, to log and compare (see :mod:`fpipe.loader.config_tree`)."""
        from fpipe.loader.config_tree import loader_config

        return loader_config(self)

    def __bool__(self) -> bool:
        """Always true, so ``loader or make_loader()`` keeps it: truthiness would otherwise
        fall back to ``len()``, which an endless stream does not have."""
        return True

    def __repr__(self) -> str:
        return (
            f"Loader({self.dataset!r}, num_workers={self.num_workers}, "
            f"worker_mode={self.worker_mode!r}, batches_taken={self._state.batches})"
        )

    # --- iteration ---------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        """Batches from the last one taken on. A loop ends at the end of the stream, after
        ``limit`` batches (a validation pass), or at the end of a virtual epoch
        (``virtual_epoch_length``: the next loop goes on from there). A loop after one that
        reached the end starts a new pass from the beginning."""
        if self._state.finished:  # the last loop went to the end: a new pass (as torch's)
            self._state = LoaderState(plan=self.plan.init(), skip=self._state.skip)
        limit = getattr(self.dataset, "limit", None)
        virtual = getattr(self.dataset, "virtual_epoch_length", 0)
        stop = limit
        if virtual:  # the end of the virtual epoch the last batch taken is in
            stop = (self._state.batches // virtual + 1) * virtual
        if limit is not None and self._state.batches >= limit:
            self._finish()
            return
        batches = closed_at_exit(iterate_batches(self))
        watched = watch_batches(self, batches)  # the watchdog, where batches are built here
        try:
            for batch in watched:
                if self._debug_log:
                    self._debug_log.batch(self._state.batches - 1, batch)
                yield batch
                if stop is not None and self._state.batches >= stop:
                    if not virtual:
                        self._finish()
                    return
            self._finish()
        finally:
            watched.close()
            batches.close()

    def _finish(self) -> None:
        """Record in the state that a loop reached the end (see ``LoaderState.finished``)."""
        self._state = msgspec.structs.replace(self._state, finished=True)

    def _describe(self, recipe) -> tuple:
        """(step, sample keys) of a recipe, for a WorkerError's message."""
        if recipe is None:
            return None, ()
        return recipe.step, self.dataset.materializer.recipe_keys(recipe)

    # --- state -------------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The state after the last batch taken, as bytes (small, the same on every rank in
        global mode, for any number of workers)."""
        return encode_loader_state(self.plan, self._state, loader_parts(self.dataset))

    def restore(self, data: bytes) -> None:
        """Continue from snapshot bytes: the next batch is the one after the saved one.

        The skip ranges of the snapshot are kept, and so are those this loader already had
        (``skip_steps``, :meth:`skip`)."""
        state = decode_loader_state(self.plan, data, loader_parts(self.dataset))
        skip = normalize_step_ranges(state.skip + self._state.skip)
        self._state = msgspec.structs.replace(state, skip=skip)
        self._mix = _steering.known_history(self, self._mix)
        self._generation += 1

    def skip(self, steps: Any) -> None:
        """Leave out global steps: ``steps`` is ``range(a, b)``, ``(a, b)``, ``"a:b"`` or a list
        of them (steps ``a`` to ``b - 1``, counted as ``fpipe plan --step`` counts them).

        Their batches are not delivered and nothing is read or decoded for them: the plan runs
        over them on metadata only, so every later batch is the one the run would have made.
        The ranges go into the state (a later restore keeps them). Call it after
        ``load_state_dict``, before iterating (during iteration, it starts over from the
        last batch taken). A range already behind the loader changes nothing. See
        docs/steering.md.
        """
        skip = normalize_step_ranges(normalize_step_ranges(steps) + self._state.skip)
        _check_skippable(self.dataset, skip)
        self._state = msgspec.structs.replace(self._state, skip=skip)
        self._generation += 1

    def set_weights(self, weights: Any, at_step: int | None = None) -> None:
        """Change the blend's weights from global step ``at_step`` on (None: the next step).

        ``weights``: ``{dataset name or index: weight}`` (datasets left out weigh 0) or one
        weight per dataset; shares of samples, or of the blend's unit (``blend_unit``), as the
        blend's own weights are. Stored as float32. The change is applied at the step
        boundary, the same way on every rank; samples a shuffle window or packing buffer had
        already drawn for earlier steps keep their weights. It goes into the loader state (the
        current weights, their step and a digest of every change) and into
        :meth:`mix_history`. Under torch.distributed every rank must call it with the same
        values (a collective; different values are refused and nothing changes). See
        docs/steering.md.
        """
        _steering.set_weights(self, weights, at_step)

    def mix_history(self) -> dict:
        """Every online weight change of this run up to the last batch taken, as plain data
        (JSON-ready): save it beside the checkpoint. :meth:`seek` and ``fpipe plan`` replay a
        run from it; :meth:`load_mix_history` gives it back after a restore."""
        return _steering.mix_history(self)

    def load_mix_history(self, history: Any) -> None:
        """Give this loader the history (:meth:`mix_history`) of the run its state comes from,
        checked against the state's digest; changes after the state's step are applied again
        at their steps (an exact replay of the run)."""
        _steering.load_mix_history(self, history)

    def seek(self, step: int, mix_history: Any = None) -> None:
        """Go to global step ``step`` from the configuration alone (plus ``mix_history`` when
        weights were changed online): the state equals the snapshot a run saved after taking
        the batch before ``step``, without reading any sample (the plan runs on metadata; skip
        ranges are passed over by counting). Samples the error policy skipped are not known
        without reading them and count as delivered.

        The weight changes this loader knows (from ``get_loader(mix_history=...)``,
        :meth:`load_mix_history`, :meth:`set_weights`, or a restored state they led to) are
        replayed at their steps, so every seek stays in that run. ``mix_history`` may go on
        from them (an earlier save is also accepted); one that differs is refused
        (ConfigError), as is a seek without it after a restore from changes the loader does
        not know. See docs/steering.md."""
        _steering.seek(self, step, mix_history)

    #: The watchdog over batches built in the loop (num_workers=0): Energon's
    #: watchdog_timeout_seconds (see fpipe.loader.watchdog); None: none.
    watchdog: WatchdogDataset | None = None

    #: Compare the state across ranks in state_dict() (None: when torch.distributed
    #: is initialized with > 1 rank). A collective; see fpipe.loader.consistency.
    check_consistency: bool | None = None

    def state_dict(self) -> dict:
        """torch Stateful: ``{"fpipe_snapshot": bytes}``.

        Under torch.distributed this first checks that the ranks' states agree (every rank must
        call it; set ``loader.check_consistency = False`` to save from one rank alone)."""
        from fpipe.loader.consistency import check_loader_consistency

        check_loader_consistency(self)
        return {"fpipe_snapshot": self.snapshot()}

    def load_state_dict(self, state_dict: dict | bytes) -> None:
        """torch Stateful: accepts what :meth:`state_dict` returned (or the bare bytes); anything
        else is a :class:`SnapshotError` (see :func:`fpipe.loader.state.snapshot_bytes`)."""
        if isinstance(state_dict, (bytes, bytearray, memoryview)):
            return self.restore(bytes(state_dict))
        if not isinstance(state_dict, dict) or "fpipe_snapshot" not in state_dict:
            raise SnapshotError(
                "expected the dict returned by Loader.state_dict() ({'fpipe_snapshot': bytes}) or "
                f"the snapshot bytes, got {type(state_dict).__name__}"
            )
        self.restore(snapshot_bytes(state_dict["fpipe_snapshot"]))

    # Energon's names
    save_state_rank = snapshot
    restore_state_rank = restore

    def save_state_global(self, global_dst_rank: int = 0) -> list[bytes] | None:
        """Energon's collective save: every rank's state gathered on ``global_dst_rank`` (a list
        by rank there, None on the others; ``[state]`` without torch.distributed)."""
        from fpipe.loader.topology import gather_states

        return gather_states(self.snapshot(), global_dst_rank, self.dataset.topology)

    def restore_state_global(self, state: Any, *, src_rank: int | None = None) -> None:
        """Energon's collective restore of what :meth:`save_state_global` returned: every rank
        passes the list (``src_rank=None``), or only ``src_rank`` does and it is scattered."""
        from fpipe.loader.topology import scatter_state

        self.restore(scatter_state(state, src_rank, self.dataset.topology))

    def __enter__(self) -> Loader:
        """``with get_loader(ds) as loader:`` (Energon's form); workers end with iteration."""
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def can_restore_sample(self) -> bool:
        """Whether :meth:`restore_sample` can rebuild this loader's batches (Energon's)."""
        from fpipe.loader._restore_sample import can_restore

        return can_restore(self.dataset)

    def restore_sample(self, restore_key: Any) -> Any:
        """The batch this loader delivered with ``__restore_key__ == restore_key``, built
        again from its recipe (Energon's ``restore_sample``; see
        :mod:`fpipe.loader._restore_sample`). The loader's state is unchanged."""
        from fpipe.loader._restore_sample import restore_batch

        return restore_batch(self.dataset, restore_key)

    def stats(self) -> LoaderStats:
        """The global position (epoch, refs of the global order taken: identical on every rank
        in global mode), this rank's delivered batches and samples, skipped samples, the plan's
        counters and a blend's per-dataset counters (see :class:`LoaderStats`)."""
        return loader_stats(self)


def _read_ahead_budget(dataset: Any, read_ahead_bytes: int | None) -> int:
    """The read-ahead budget per worker: the given one, else the default for a dataset on
    object storage and none on local files (whose reads the kernel's own read-ahead serves)."""
    if read_ahead_bytes is not None:
        if read_ahead_bytes < 0:
            raise ConfigError(f"read_ahead_bytes must be >= 0, got {read_ahead_bytes}")
        return int(read_ahead_bytes)
    from fpipe.storage.paths import is_url

    sources = getattr(getattr(dataset, "materializer", None), "sources", ())
    remote = any(is_url(s.path) and not s.path.startswith("file:") for s in sources)
    return DEFAULT_READ_AHEAD_BYTES if remote else 0


def _check_skippable(dataset: Any, skip: tuple) -> None:
    """Skip ranges count plan steps; with a packing buffer a batch is made of packs of several
    recipes, which only materializing decides, so steps cannot be skipped without reading."""
    if skip and getattr(dataset, "packing_buffer_size", None):
        raise ConfigError(
            "skip ranges need batches the plan decides: with packing_buffer_size (the task "
            "encoder's packing hooks) a batch's packs are only known after reading its samples. "
            "Pack in the plan tier instead (plan_stages=[fpipe.plan.pack(...)], docs/packing.md)"
        )


@check_keywords
def get_loader(
    dataset: PlannedDataset | WatchdogDataset,
    *,
    num_workers: int | None = None,
    prefetch_factor: int = 2,
    pin_memory: bool = False,
    timeout: float = DEFAULT_TIMEOUT_S,
    multiprocessing_context: Any = None,
    check_consistency: bool | None = None,
    worker_mode: WorkerMode = "process",
    recover_workers: bool = True,
    ray_options: dict | None = None,
    worker_config: Any = None,
    checkpoint_every_sec: float = 60,
    checkpoint_every_min_n_samples: int | None = None,
    n_checkpoints: int | None = None,
    gc_collect_every_n_steps: int | None = None,
    cache_pool: Any = None,
    watchdog_timeout_seconds: float | None = None,
    watchdog_initial_timeout_seconds: float | None = None,
    fail_on_timeout: bool = False,
    start_step: int | None = None,
    mix_history: Any = None,
    read_ahead_bytes: int | None = None,
    read_ahead_steps: int = DEFAULT_READ_AHEAD_STEPS,
) -> Loader:
    """A :class:`Loader` over ``dataset`` (savable: every fpipe loader is).

    The output does not depend on ``num_workers`` or ``prefetch_factor``.
    ``timeout``: seconds to wait for one batch from the workers; a worker that produced nothing
    for that long counts as hung (0: wait forever for a slow worker; a dead one is noticed
    within about half a second either way).
    ``recover_workers``: when a worker dies (a signal, the OOM killer, a native crash), hangs
    past ``timeout`` or runs out of memory, replace the workers and materialize the recipes in
    flight again, so the batches are those of an uninterrupted run (counted in
    ``stats().recoveries``); a sample that does so twice follows the dataset's error policy.
    False: raise one :class:`fpipe.core.WorkerError` naming the worker and its recipe. See
    docs/failures.md.
    ``worker_mode``: ``"process"`` (default: torch DataLoader worker processes, as torch and
    Energon users expect) or ``"thread"`` (``num_workers`` threads of this process, as Grain's
    thread workers: no batch is copied between processes, which is faster when materializing
    mostly releases the GIL, e.g. Pillow image decode; see docs/loader.md). The output, the
    snapshots and resume are the same in every mode and at ``num_workers=0``.
    ``"ray"``: ``num_workers`` Ray actors, on any node of a Ray cluster, with the same batches,
    snapshots and recovery (``ray_options``: the actors' options, e.g. ``{"num_cpus": 2,
    "resources": {"cpu_node": 1}}``, and ``"address"`` for ``ray.init`` when this process has
    not called it; see docs/ray.md).
    ``check_consistency``: compare the state across ranks in ``state_dict()`` (None: when
    torch.distributed is initialized; it is a collective, so every rank must call it).
    ``read_ahead_bytes``: each worker starts the reads of the recipes it will materialize in
    the next ``read_ahead_steps`` loader steps early, holding at most this many bytes read ahead
    and not yet used (None: 64 MiB for datasets on object storage, 0 (off) for local files;
    threads share one budget of ``num_workers`` times this). The output and the state are the
    same with it on or off; see docs/remote.md.

    Energon's keywords: ``worker_config`` must be the dataset's (another is refused; it has no
    effect, as in Energon). ``watchdog_timeout_seconds`` (off by default; Energon's is 60 s):
    a batch that takes longer than this to build (reading, ``encode_sample``,
    ``encode_batch``...; in the loop with ``num_workers=0``, else in its worker process; thread
    and Ray workers are not watched) prints the stack where it is stuck and calls
    ``WatchdogDataset._watchdog_trigger`` (a RuntimeWarning; ``watchdog_initial_timeout_seconds``:
    the first batch's limit; see :mod:`fpipe.loader.watchdog`). ``fail_on_timeout=True`` stops
    with a :class:`fpipe.core.WorkerError` instead: the late batch is stopped, or with workers,
    when no batch came for ``watchdog_timeout_seconds`` (else ``timeout``), the workers are not
    replaced. ``dataset`` may be Energon's ``WatchdogDataset(dataset, ...)``: its settings
    apply unless given here. ``checkpoint_every_sec``, ``checkpoint_every_min_n_samples``,
    ``n_checkpoints``, ``gc_collect_every_n_steps`` and ``cache_pool`` have no effect on what is
    delivered: fpipe's state is exact after every batch (there are no worker checkpoints to
    space out), members are read by random access (nothing to cache), and ``timeout`` governs
    hung workers. See docs/energon_migration.md.
    """
    wrapper: WatchdogDataset | None = None
    if isinstance(dataset, WatchdogDataset):  # Energon's wrapper: its settings, unless given
        wrapper, planned = dataset, dataset.dataset
    else:
        planned = dataset
    check_worker_config(planned, worker_config)
    if wrapper is not None and watchdog_timeout_seconds is None:
        watchdog_timeout_seconds = wrapper.timeout_seconds
        watchdog_initial_timeout_seconds = wrapper.initial_timeout_seconds
        fail_on_timeout = fail_on_timeout or wrapper.fail_on_timeout
    if fail_on_timeout:
        recover_workers = False
        if watchdog_timeout_seconds:
            timeout = watchdog_timeout_seconds
    if num_workers is None:
        num_workers = planned.topology.num_workers
    loader = Loader(
        planned,
        num_workers=num_workers,
        prefetch_factor=prefetch_factor,
        pin_memory=pin_memory,
        timeout=timeout,
        multiprocessing_context=multiprocessing_context,
        worker_mode=worker_mode,
        recover_workers=recover_workers,
        read_ahead_bytes=read_ahead_bytes,
        read_ahead_steps=read_ahead_steps,
        ray_options=ray_options,
    )
    loader.check_consistency = check_consistency
    if watchdog_timeout_seconds:
        # (a copy of the user's wrapper, whose own trigger a subclass may define)
        watchdog = (
            WatchdogDataset(planned, worker_config) if wrapper is None else copy.copy(wrapper)
        )
        loader.watchdog = watchdog
        watchdog.dataset, watchdog.timeout_seconds = planned, watchdog_timeout_seconds
        watchdog.initial_timeout_seconds = watchdog_initial_timeout_seconds
        watchdog.fail_on_timeout = fail_on_timeout
    if start_step is not None:
        loader.seek(start_step, mix_history)
    elif mix_history is not None:
        loader.load_mix_history(mix_history)
    return loader


get_savable_loader = get_loader
