"""The materialize tier: a pure function from a batch recipe to a batch.

``Materializer(recipe) -> MaterializedBatch``: read each ref's bytes by random access, cook a
typed sample, ``encode_sample(sample, rng)`` with an rng keyed by (dataset, index, epoch),
``batch``, ``encode_batch``; with a packing buffer (Energon's hook path) a recipe is one buffer
and the result is its packs (see :mod:`fpipe.encode.packing`). Any worker can compute any
recipe and gets the same tensors. Recipes travel to workers as msgpack bytes (no pickle of our
objects; :mod:`fpipe.materialize.recipe_codec`). How each dataset is opened and read is in
:mod:`fpipe.materialize.sources`. A recipe runs in two phases: ``_encode.py`` reads, cooks and
encodes its samples under the error policy, ``_assemble.py`` makes the batch or the packs;
``_hook_errors.py`` names the hook, keys and step of a failure, ``_cook.py`` cooks one sample.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from fpipe.core.errors import ConfigError, ErrorPolicy
from fpipe.core.records import Recipe
from fpipe.core.rng import LazyGenerator, fold_in_array
from fpipe.encode.hook_forms import check_hook_forms, groups_batches
from fpipe.encode.packing import check_packing_hooks
from fpipe.encode.task_encoder import decode_limits_of, image_options, sample_decoder_of
from fpipe.materialize._assemble import assemble
from fpipe.materialize._cook import COOK, ENCODE, cook, new_cooking
from fpipe.materialize._cook_many import Cooked, cook_many
from fpipe.materialize._encode import encode_samples
from fpipe.materialize._hook_errors import naming_failures, show_keys, wrap_error
from fpipe.materialize.join import joined_sample, prefetch_parts, read_joined
from fpipe.materialize.sources import DatasetSource, open_source, read_many_held
from fpipe.samples import compile_field_map, sample_type_from_name
from fpipe.storage.config.dataset_yaml import is_crude

__all__ = [
    "GROUP_CHUNK",
    "MaterializedBatch",
    "Materializer",
    "naming_failures",
    "show_keys",
    "wrap_error",
]

_READ_CHUNK = 256  # samples read ahead at once (their raw bytes are held together)
#: Datasets one process keeps open at once. Each holds its index arrays mapped (a file
#: descriptor each) besides its shard files (bounded per process by the file caches), so a
#: worker of a blend of 10,000 datasets would otherwise end with tens of thousands open.
MAX_OPEN_DATASETS = 64

#: With grouped batching and ``batch_size=None``: samples per recipe (a chunk of the stream the
#: workers encode; the groups do not depend on it).
GROUP_CHUNK = 16


@dataclasses.dataclass
class MaterializedBatch:
    """What a worker returns: the batch (or a buffer's packs), and how many samples the error
    policy skipped."""

    step: int
    batch: Any
    num_samples: int
    skipped: int
    skipped_keys: list
    #: With a packing buffer: the packed samples of the buffer (the loader batches them) and
    #: how many samples each holds; ``batch`` is then None.
    packs: list | None = None
    pack_sizes: list | None = None
    #: With an ``encode_batch`` written as a generator: every batch it yielded, in order (the
    #: loader delivers each); ``batch`` is then None.
    batches: list | None = None
    #: With grouped batching: the recipe's encoded samples in order and, for each, the
    #: position in the recipe of the sample it was encoded from (the loader groups them);
    #: ``batch`` is then None.
    samples: list | None = None
    positions: list | None = None
    #: The worker process's read counters since its last result (requests, hedges, reads
    #: ahead...; see :func:`fpipe.storage.read.read_ahead.take_io_counters`), for
    #: ``loader.stats().io``.
    io: dict | None = None


def dataset_ids(datasets: np.ndarray) -> list[int]:
    """The distinct dataset ids of a recipe's refs, ascending. Not ``np.unique``: its first
    call imports ``numpy.ma`` (~20 ms), which every worker process would pay at its first
    recipe."""
    return sorted(set(datasets.tolist()))


class Materializer:
    """Pure ``recipe -> batch``; picklable (datasets are opened lazily in each process)."""

    def __init__(
        self,
        sources: list[DatasetSource],
        task_encoder,
        *,
        image_decode=None,
        error_policy: ErrorPolicy = ErrorPolicy.RAISE,
        packing_buffer_size: int | None = None,
        decode_limits=None,
        unbatched: bool = False,
        error_handler: Callable[..., Any] | None = None,
        batch_size: int | None = None,
        plan_packs: bool = False,
    ):
        self.sources = list(sources)
        self.task_encoder = task_encoder
        #: the plan chooses packs (a fpipe.plan.pack step), each merged by the encoder's
        #: pack_selected_samples: checked when a loader is made, since the plan alone (ds.plan,
        #: fpipe inspect) needs no encoder
        self.plan_packs = plan_packs
        #: Energon's grouped batching (``batch_group_criterion``): a recipe's result is its
        #: encoded samples, which the loader groups into batches (fpipe.loader._group_batches)
        self.grouping = groups_batches(task_encoder)
        if self.grouping:  # the loader batches: a recipe is a chunk of the stream
            unbatched = False
            if plan_packs:
                raise ConfigError(
                    f"{type(task_encoder).__name__} defines batch_group_criterion and a "
                    "fpipe.plan.pack step is in plan_stages: fpipe groups encoded samples, not "
                    "packs; use one of the two"
                )
        # generator batch hooks and the like: refused now, not ignored later
        check_hook_forms(task_encoder, unbatched=unbatched, packing=packing_buffer_size is not None)
        #: Energon's hook path: each recipe is one packing buffer and yields packs, not a batch.
        self.packing = check_packing_hooks(task_encoder, packing_buffer_size)
        self.image_decode = (
            image_decode if image_decode is not None else image_options(task_encoder)
        )
        #: ``batch_size=None`` (Energon): each recipe is one sample, returned without batch().
        self.unbatched = unbatched
        #: samples per recipe of the plan (None: each recipe's length), which numbers samples
        #: for the task encoder's ``current_sample_index``
        self.recipe_size = packing_buffer_size if self.packing else batch_size
        if self.grouping:
            self.recipe_size = batch_size or GROUP_CHUNK
        self.error_policy = ErrorPolicy(error_policy)
        #: Energon's error handler: called with each sample that fails to read, decode, cook or
        #: encode, which is then skipped and counted (unless the handler raises)
        self.error_handler = error_handler
        #: fpipe.decode.DecodeLimits: every decoding limit, handed to every decoder this runs
        #: (the argument, else the task encoder's, else the defaults)
        self.decode_limits = (
            decode_limits if decode_limits is not None else decode_limits_of(task_encoder)
        )
        #: Energon's whole-sample ``decoder`` callable of the task encoder, or None
        self.sample_decoder = sample_decoder_of(task_encoder)
        self._datasets: dict[int, Any] = {}
        self._field_maps: dict[int, Any] = {}
        #: per opened dataset (by id): what cooking its samples takes (see _cook.py)
        self._cooking: dict[int, Any] = {}
        self.joins: dict[Any, Any] = {}  #: per-process state of joins (fpipe.materialize.join)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_datasets"] = {}  # reopen in the worker
        state["_field_maps"] = {}
        state["_cooking"] = {}
        state["joins"] = {}
        return state

    def copy(self) -> Materializer:
        """A copy that opens its own datasets (what a worker process gets, for a thread)."""
        other = object.__new__(type(self))
        other.__dict__.update(self.__getstate__())
        return other

    def dataset(self, i: int):
        """The opened dataset ``i`` of :attr:`sources`, opened when this process first reads
        it; at most :data:`MAX_OPEN_DATASETS` stay open (the least recently used is closed)."""
        ds = self._datasets.pop(i, None)
        if ds is None:
            while len(self._datasets) >= MAX_OPEN_DATASETS:
                self._close(next(iter(self._datasets)))
            ds = open_source(self.sources[i])
        self._datasets[i] = ds  # last in the dict: the most recently used
        return ds

    def _close(self, i: int) -> None:
        """Forget opened dataset ``i``: its shard files are closed and its index arrays
        unmapped once nothing else holds it (each mapped array holds a file descriptor)."""
        ds = self._datasets.pop(i)
        self._cooking.pop(id(ds), None)
        close = getattr(ds, "close", None)
        if close is not None:
            close()

    def field_map(self, i: int | DatasetSource):
        """The compiled field map of dataset ``i`` (or of a source; once per process)."""
        src = self.sources[i] if isinstance(i, int) else i
        fm = self._field_maps.get(id(src))
        if fm is None:
            fm = compile_field_map(sample_type_from_name(src.sample_type), src.field_map)
            self._field_maps[id(src)] = fm
        return fm

    def wanted(self, src: DatasetSource) -> frozenset[str] | None:
        """Member extensions samples of ``src`` are cooked from (None: all, for crude
        samples, whose cooker sees every member)."""
        if is_crude(src.sample_type):
            return None
        return self.field_map(src).extensions

    def sample(
        self, dataset: int, index: int, epoch: int, skey: int, read: tuple | None = None
    ) -> Any:
        """Read and cook one sample whose key is ``skey = fold_in(recipe.key, dataset, index,
        epoch)``; returns it with its encode rng (BadSampleError on bad input). Both rngs are
        lazy: building a generator costs more than most samples. A joined dataset's sample
        is joined with its parts' samples of the same key (:mod:`fpipe.materialize.join`).
        ``read``: the sample's ``(key, members)`` from :meth:`reads` (members may be the
        exception reading raised), or the sample :meth:`reads` cooked already
        (:class:`~fpipe.materialize._cook_many.Cooked`); None: read here."""
        restore_key = (dataset, index, epoch)
        src = self.sources[dataset]
        if src.join:
            sample = joined_sample(self, dataset, index, restore_key, skey, read)
        else:
            ds = self._datasets.get(dataset) or self.dataset(dataset)  # once per process
            key = None
            if read is None:
                raw = ds.read(index, self.wanted(src), limits=self.decode_limits)
            elif type(read) is Cooked:  # cooked with the recipe's other samples
                return read.sample, LazyGenerator(skey, ENCODE)
            else:
                key, raw = read
                if isinstance(raw, Exception):
                    raise raw
            rng = LazyGenerator(skey, COOK)
            sample = cook(self, src, ds, index, raw, restore_key, rng, key)  # = self.cook(...)
        return sample, LazyGenerator(skey, ENCODE)

    def cook(
        self, src: DatasetSource, ds, index: int, raw, restore_key, rng, key: str | None = None
    ) -> Any:
        """Sample ``index`` of ``ds`` (read and cooked as ``src`` says) from its raw members
        (``key``: its key when known, else ``ds.key(index)``)."""
        return cook(self, src, ds, index, raw, restore_key, rng, key)

    def reads(self, refs, parts_found: dict[int, np.ndarray] | None = None) -> Iterator[Any]:
        """``(key, members)`` of each ref in order (:meth:`Dataset.read_many`, up to
        ``_READ_CHUNK`` samples per call); a sample that cannot be read holds the exception
        in place of its members; a joined dataset's sample also holds its parts' reads
        (:func:`fpipe.materialize.join.read_joined`); a sample that cooks with the others
        of its dataset is cooked here (a :class:`~fpipe.materialize._cook_many.Cooked`).
        ``parts_found``: from :meth:`_prefetch`, the part indices of each joined dataset's
        refs in recipe order (not looked up again)."""
        parts_found = parts_found or {}
        taken = dict.fromkeys(parts_found, 0)  # refs of each joined dataset read so far
        for c in range(0, len(refs), _READ_CHUNK):
            datasets = refs.dataset[c : c + _READ_CHUNK]
            indices = refs.index[c : c + _READ_CHUNK]
            epochs = refs.epoch[c : c + _READ_CHUNK]
            out: list[tuple] = [()] * len(indices)
            for d in dataset_ids(datasets):
                pos = np.flatnonzero(datasets == d)
                if self.sources[d].join:  # joined samples: with their parts' samples
                    found = parts_found.get(d)
                    if found is not None:
                        found = found[:, taken[d] : taken[d] + len(pos)]
                        taken[d] += len(pos)
                    got = read_joined(self, d, indices[pos], found)
                else:
                    got = self._read_many(d, indices[pos])
                    got = self._cook_many(d, indices[pos], epochs[pos], got)
                for p, r in zip(pos.tolist(), got):
                    out[p] = r
            yield from out

    def _read_many(self, d: int, indices: np.ndarray) -> list:
        return read_many_held(
            self.dataset(d), indices, self.wanted(self.sources[d]), self.decode_limits
        )

    def _cook_many(self, d: int, indices: np.ndarray, epochs: np.ndarray, got: list) -> list:
        """``got`` (the reads of samples ``indices`` of dataset ``d``) with the samples that
        cook in one pass cooked (:mod:`fpipe.materialize._cook_many`); the shard ids of all of
        them are looked up at once first (``ShardNames.remember``), for either way of cooking."""
        ds = self._datasets.get(d) or self.dataset(d)
        how = self._cooking.get(id(ds))
        src = self.sources[d]
        if how is None or how.ds is not ds or how.src is not src:
            how = new_cooking(self, src, ds)
        how.names.remember(indices)
        if how.plain is None:  # cooked one by one (Materializer.sample), in the read's order
            return got
        return cook_many(self, how, how.plain, d, indices, epochs, got)

    def _prefetch(self, refs) -> dict[int, np.ndarray]:
        """Let each dataset start fetching this recipe's samples (concurrent ranged GETs on
        object storage; nothing on local disks), opening them first: a dataset that cannot be
        opened raises here, an fpipe error naming it (:func:`open_source`). Returns the part
        indices of each joined dataset's refs (:func:`fpipe.materialize.join.part_indices`), for
        :meth:`reads`."""
        datasets = refs.dataset
        parts_found = {}
        for d in dataset_ids(datasets):
            indices = refs.index[datasets == d]
            src = self.sources[d]
            self.dataset(d).prefetch(indices, self.wanted(src))
            if src.join:
                parts_found[d] = prefetch_parts(self, d, indices)
        return parts_found

    def key(self, dataset: int, index: int) -> str:
        """The sample key of ``index`` in dataset ``dataset`` (for messages; never raises)."""
        try:
            return str(self.dataset(dataset).key(index))
        except Exception:  # noqa: BLE001 - only used to name a sample in an error
            return f"{self.sources[dataset].path}#{index}"

    def leaf(self, recipe: Recipe) -> Materializer:
        """The materializer that builds ``recipe`` and knows its refs' datasets: this one (a
        blend of datasets has one per dataset, :mod:`fpipe.materialize.parts`)."""
        return self

    def recipe_keys(self, recipe: Recipe) -> tuple[str, ...]:
        """The sample keys of a recipe, in order."""
        refs = recipe.refs
        return tuple(self.key(d, i) for d, i in zip(refs.dataset.tolist(), refs.index.tolist()))

    def encode_at(self, recipe: Recipe, positions: list[int]) -> tuple[list, list[int]]:
        """The encoded samples of ``recipe``'s refs, each encoded as the sample at
        ``positions[i]`` of recipe ``recipe.step`` is (the same rng and sample index): samples
        a grouped-batching snapshot names, materialized again. Returns them and, for each, its
        position."""
        refs = recipe.refs
        skeys = fold_in_array(recipe.key, refs.dataset, refs.index, refs.epoch).tolist()
        samples, kept, _ = encode_samples(
            self, self.task_encoder, recipe, skeys, positions=positions
        )
        return samples, kept

    def __call__(
        self,
        recipe: Recipe,
        *,
        exclude: frozenset[int] = frozenset(),
        mark: Callable[[int], None] | None = None,
    ) -> MaterializedBatch:
        """The batch (or the packs of a packing buffer) of ``recipe``, in two phases: encode
        each sample, then assemble them.

        ``exclude``: positions in the recipe left out and counted as skipped (samples that
        killed their worker, see :mod:`fpipe.loader._recovery`). ``mark(position)`` is called
        as each sample's reading, cooking and encoding starts, and ``mark(-1)`` when it ends
        (how a worker tells which sample it was on when it dies)."""
        enc = self.task_encoder
        if recipe.shape:  # a bucket's batch: every sample gets the bucket's shape
            enc = enc.for_bucket(recipe.shape)
        refs = recipe.refs
        # Each sample's key, for the whole recipe at once: fold_in(recipe.key, dataset, index,
        # epoch).
        skeys = fold_in_array(recipe.key, refs.dataset, refs.index, refs.epoch).tolist()
        samples, kept, skipped_keys = encode_samples(self, enc, recipe, skeys, exclude, mark)
        if self.grouping:  # the loader groups the encoded samples into batches
            return MaterializedBatch(
                step=recipe.step,
                batch=None,
                num_samples=len(refs) - len(skipped_keys),
                skipped=len(skipped_keys),
                skipped_keys=skipped_keys,
                samples=samples,
                positions=kept,
            )
        out = assemble(self, enc, recipe, samples, kept, skeys)
        skipped_keys += out.skipped_keys
        return MaterializedBatch(
            step=recipe.step,
            batch=out.batch,
            num_samples=len(refs) - len(skipped_keys),
            skipped=len(skipped_keys),
            skipped_keys=skipped_keys,
            packs=out.packs,
            pack_sizes=out.sizes,
            batches=out.batches,
        )
