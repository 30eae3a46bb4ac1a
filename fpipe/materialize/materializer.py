"""The materialize tier: a pure function from a batch recipe to a batch.

``Materializer(recipe) -> MaterializedBatch``: read each ref's bytes by random access, cook a
typed sample, ``encode_sample(sample, rng)`` with an rng keyed by (dataset, index, epoch),
``batch``, ``encode_batch``; with a packing buffer (Energon's hook path) a recipe is one buffer
and the result is its packs (see :mod:`fpipe.encode.packing`). Any worker can compute any
recipe and gets the same tensors. Recipes travel to workers as msgpack bytes (no pickle of our
objects; :mod:`fpipe.materialize.recipe_codec`). How each dataset is opened and read is in
:mod:`fpipe.materialize.sources`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from fpipe.core.errors import (
    BadSampleError,
    ConfigError,
    ErrorPolicy,
    FpipeError,
    MaterializeError,
)
from fpipe.core.records import Recipe
from fpipe.core.rng import LazyGenerator, fold_in_array
from fpipe.encode.batch_memory import sent_as_collated
from fpipe.encode.hook_forms import check_hook_forms, outputs
from fpipe.encode.hooks import SkipSample, using_position, using_sample_rng
from fpipe.encode.packing import (
    check_packing_hooks,
    pack_buffer,
    pack_planned,
    pre_pack_encoder,
)
from fpipe.encode.task_encoder import (
    decode_limits_of,
    image_options,
    keeps_collated_tensors,
    sample_decoder_of,
)
from fpipe.materialize._error_handler import call_error_handler
from fpipe.materialize._source_info import failed_sources, sample_sources
from fpipe.materialize.join import joined_sample, prefetch_parts, read_joined
from fpipe.materialize.sources import DatasetSource, open_source, read_many_held
from fpipe.samples import (
    compile_field_map,
    cook_sample,
    decode_members,
    decode_whole_sample,
    make_crude_sample,
    sample_type_from_name,
)
from fpipe.storage.config.dataset_yaml import is_crude
from fpipe.storage.read.keys import energon_keys

__all__ = ["MaterializedBatch", "Materializer"]

_COOK, _ENCODE = 0, 1  # fold_in tags: the cooking rng and the encoding rng of a sample
_MAX_KEYS = 8  # sample keys named in a MaterializeError of a batch hook
_READ_CHUNK = 256  # samples read ahead at once (their raw bytes are held together)


def _no_mark(position: int) -> None:
    pass


def show_keys(keys) -> str:
    """The first few sample keys, quoted, for a message."""
    more = ", ..." if len(keys) > _MAX_KEYS else ""
    return ", ".join(repr(k) for k in keys[:_MAX_KEYS]) + more


def wrap_error(
    err: Exception, hook: str, keys, step: int, position: int | None = None
) -> MaterializeError:
    """``err`` as a :class:`MaterializeError` naming the hook, sample key(s), recipe step and
    position, with the original traceback."""
    keys = tuple(str(k) for k in keys)
    shown = show_keys(keys)
    where = f"step {step}" + (f", position {position} in the batch" if position is not None else "")
    return MaterializeError(
        f"{hook} raised {type(err).__name__}: {err} (sample {shown}; {where})",
        hook=hook,
        keys=keys,
        step=step,
        position=position,
        original=type(err).__name__,
        traceback="".join(traceback.format_exception(err)),
    )


@contextlib.contextmanager
def naming_failures(
    hook: str, keys: Callable[[], Sequence], step: int, position: int | None = None
) -> Iterator[None]:
    """A task encoder hook's own failure inside the block leaves as a :class:`MaterializeError`
    naming ``hook``, the sample keys (``keys()``, looked up only on failure), the recipe step
    and the position in the batch. fpipe's errors (BadSampleError...) and SkipSample pass
    unchanged: the error policy and the skip counting decide about them."""
    try:
        yield
    except (FpipeError, SkipSample):
        raise
    except Exception as err:  # a hook's own failure: wrapped with where it happened
        raise wrap_error(err, hook, keys(), step, position) from err


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


@dataclasses.dataclass
class _Assembled:
    """What the second phase of a recipe makes of its encoded samples."""

    batch: Any = None
    packs: list | None = None
    sizes: list | None = None
    skipped_keys: list[str] = dataclasses.field(default_factory=list)


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
    ):
        self.sources = list(sources)
        self.task_encoder = task_encoder
        # batch_group_criterion, generator batch hooks...: refused now, not ignored later
        check_hook_forms(task_encoder, unbatched=unbatched)
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
        self.joins: dict[Any, Any] = {}  #: per-process state of joins (fpipe.materialize.join)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_datasets"] = {}  # reopen in the worker
        state["_field_maps"] = {}
        state["joins"] = {}
        return state

    def copy(self) -> Materializer:
        """A copy that opens its own datasets (what a worker process gets, for a thread)."""
        other = object.__new__(type(self))
        other.__dict__.update(self.__getstate__())
        return other

    def dataset(self, i: int):
        """The opened dataset ``i`` of :attr:`sources` (opened once per process)."""
        ds = self._datasets.get(i)
        if ds is None:
            ds = self._datasets[i] = open_source(self.sources[i])
        return ds

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
        exception reading raised); None: read here."""
        restore_key = (dataset, index, epoch)
        if self.sources[dataset].join:
            sample = joined_sample(self, dataset, index, restore_key, skey, read)
        else:
            ds = self.dataset(dataset)
            key = None
            if read is None:
                raw = ds.read(index, self.wanted(self.sources[dataset]), limits=self.decode_limits)
            else:
                key, raw = read
                if isinstance(raw, Exception):
                    raise raw
            sample = self.cook(
                self.sources[dataset], ds, index, raw, restore_key, LazyGenerator(skey, _COOK), key
            )
        return sample, LazyGenerator(skey, _ENCODE)

    def cook(
        self, src: DatasetSource, ds, index: int, raw, restore_key, rng, key: str | None = None
    ) -> Any:
        """Sample ``index`` of ``ds`` (read and cooked as ``src`` says) from its raw members
        (``key``: its key when known, else ``ds.key(index)``)."""
        sample_key = ds.key(index) if key is None else key
        path = getattr(ds, "path", src.path)
        # An Energon folder's samples carry Energon's key (inside the shard); fpipe's key
        # (shard/key) still names them in errors, lineage and `fpipe plan --find`.
        own_key, shard = energon_keys(ds, index, sample_key) or (None, "")
        decode_exts = ds.decode_exts(index) if hasattr(ds, "decode_exts") else None
        # before decoding; a typed sample is made of its field map's members
        sources = sample_sources(ds, str(path), index, sample_key, raw, self.wanted(src))
        if is_crude(src.sample_type):
            # Energon: a cooker sees the members decoded (its task encoder's `decoder`, by
            # default by extension); `decoder = None` keeps the raw bytes.
            if self.sample_decoder is not None:
                raw = decode_whole_sample(
                    self.sample_decoder, raw, str(path), sample_key, own_key
                )
            else:
                raw = decode_members(
                    raw,
                    path=str(path),
                    key=sample_key,
                    image_options=self.image_decode,
                    limits=self.decode_limits,
                    decode_exts=decode_exts,
                )
            crude = make_crude_sample(
                raw,
                key=sample_key if own_key is None else own_key,
                restore_key=restore_key,
                subflavors=src.subflavors,
                path=str(path),
                decode_limits=self.decode_limits,
                decode_exts=decode_exts,
                shard=shard,
                sources=sources,
            )
            return self.task_encoder.cook_crude_sample(crude)
        # Audio/video: stream metadata + keyframes stored by `fpipe prepare` (empty when none)
        # let the lazy AVDecoder seek without probing the file; a task encoder with
        # `probe_av = True` (the video/audio ones) has the others probed while cooking.
        fmap = self.field_map(src)
        av_metadata = ds.av_metadata(index) if hasattr(ds, "av_metadata") else None
        return cook_sample(
            raw,
            sample_type=fmap.sample_type,
            field_map=fmap,
            key=sample_key,
            restore_key=restore_key,
            subflavors=src.subflavors,
            path=str(path),
            image_decode_options=self.image_decode,
            rng=rng,
            av_metadata=av_metadata,
            decode_limits=self.decode_limits,
            probe_av=bool(getattr(self.task_encoder, "probe_av", False)),
            decode_exts=decode_exts,
            decoder=self.sample_decoder,
            sample_key=own_key,
            sources=sources,
        )

    def reads(self, refs, parts_found: dict[int, np.ndarray] | None = None) -> Iterator[tuple]:
        """``(key, members)`` of each ref in order (:meth:`Dataset.read_many`, up to
        ``_READ_CHUNK`` samples per call); a sample that cannot be read holds the exception
        in place of its members; a joined dataset's sample also holds its parts' reads
        (:func:`fpipe.materialize.join.read_joined`).
        ``parts_found``: from :meth:`_prefetch`, the part indices of each joined dataset's
        refs in recipe order (not looked up again)."""
        parts_found = parts_found or {}
        taken = dict.fromkeys(parts_found, 0)  # refs of each joined dataset read so far
        for c in range(0, len(refs), _READ_CHUNK):
            datasets = refs.dataset[c : c + _READ_CHUNK]
            indices = refs.index[c : c + _READ_CHUNK]
            out: list[tuple] = [()] * len(indices)
            for d in np.unique(datasets).tolist():
                pos = np.flatnonzero(datasets == d)
                if self.sources[d].join:  # joined samples: with their parts' samples
                    found = parts_found.get(d)
                    if found is not None:
                        found = found[:, taken[d] : taken[d] + len(pos)]
                        taken[d] += len(pos)
                    got = read_joined(self, d, indices[pos], found)
                else:
                    got = self._read_many(d, indices[pos])
                for p, r in zip(pos.tolist(), got):
                    out[p] = r
            yield from out

    def _read_many(self, d: int, indices: np.ndarray) -> list:
        return read_many_held(
            self.dataset(d), indices, self.wanted(self.sources[d]), self.decode_limits
        )

    def _prefetch(self, refs) -> dict[int, np.ndarray]:
        """Let each dataset start fetching this recipe's samples (concurrent ranged GETs on
        object storage; nothing on local disks), opening them first: a dataset that cannot be
        opened raises here, an fpipe error naming it (:func:`open_source`). Returns the part
        indices of each joined dataset's refs (:func:`fpipe.materialize.join.part_indices`), for
        :meth:`reads`."""
        datasets = refs.dataset
        parts_found = {}
        for d in np.unique(datasets).tolist():
            indices = refs.index[datasets == d]
            src = self.sources[d]
            self.dataset(d).prefetch(indices.tolist(), self.wanted(src))
            if src.join:
                parts_found[d] = prefetch_parts(self, d, indices)
        return parts_found

    def key(self, dataset: int, index: int) -> str:
        """The sample key of ``index`` in dataset ``dataset`` (for messages; never raises)."""
        try:
            return str(self.dataset(dataset).key(index))
        except Exception:  # noqa: BLE001 - only used to name a sample in an error
            return f"{self.sources[dataset].path}#{index}"

    def recipe_keys(self, recipe: Recipe) -> tuple[str, ...]:
        """The sample keys of a recipe, in order."""
        refs = recipe.refs
        return tuple(self.key(d, i) for d, i in zip(refs.dataset.tolist(), refs.index.tolist()))

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
        samples, kept, skipped_keys = self._encode_samples(
            enc, recipe, skeys, exclude, mark or _no_mark
        )
        out = self._assemble(enc, recipe, samples, kept, skeys)
        skipped_keys += out.skipped_keys
        return MaterializedBatch(
            step=recipe.step,
            batch=out.batch,
            num_samples=len(refs) - len(skipped_keys),
            skipped=len(skipped_keys),
            skipped_keys=skipped_keys,
            packs=out.packs,
            pack_sizes=out.sizes,
        )

    def _encode_samples(
        self,
        enc,
        recipe: Recipe,
        skeys: list[int],
        exclude: frozenset[int] = frozenset(),
        mark: Callable[[int], None] = _no_mark,
    ) -> tuple[list, list[int], list[str]]:
        """Phase one: read, cook and encode each sample of ``recipe`` (``encode_sample``, or
        the hooks before selection with a packing buffer). Returns the encoded samples, the
        position in the recipe of the sample each one comes from (a generator hook may yield
        several, or none), and what names each sample that a SkipSample or the error policy
        skipped."""
        if self.packing:
            encode = pre_pack_encoder(enc)
            encode_hook = getattr(encode, "__name__", "preencode_sample")
        else:
            encode, encode_hook = enc.encode_sample, "encode_sample"
        refs, step = recipe.refs, recipe.step
        parts_found = self._prefetch(refs)
        ids = zip(
            refs.dataset.tolist(),
            refs.index.tolist(),
            refs.epoch.tolist(),
            skeys,
            self.reads(refs, parts_found),
        )
        samples: list = []
        kept: list[int] = []  # per encoded sample: the recipe position it was encoded from
        skipped_keys: list[str] = []
        for pos, (d, i, e, skey, read) in enumerate(ids):
            src = self.sources[d]
            read_hook = "cook_crude_sample" if is_crude(src.sample_type) else "read/cook"

            def keys(d=d, i=i) -> tuple[str, ...]:
                return (self.key(d, i),)

            if pos in exclude:
                skipped_keys.append(f"{src.path}:{self.key(d, i)}: killed its worker")
                continue
            mark(pos)
            try:
                with (
                    using_sample_rng(LazyGenerator(skey, _ENCODE)),  # fpipe.sample_rng()
                    using_position(step, step * (self.recipe_size or len(refs)) + pos),
                ):
                    with naming_failures(read_hook, keys, step, pos):
                        sample, rng = self.sample(d, i, e, skey, read)
                    # Lazy fields (video frames) are decoded inside the encoder: their failures
                    # are bad input too, and go through the same policy.
                    with naming_failures(encode_hook, keys, step, pos):
                        encoded = outputs(encode(sample, rng))  # a generator: all it yields
                samples.extend(encoded)
                kept.extend([pos] * len(encoded))
            except SkipSample as err:  # the task encoder's (or a join's): skipped, counted
                skipped_keys.append(getattr(err, "where", "") or f"{src.path}:#{i}: SkipSample")
            except BadSampleError as err:
                if self.error_policy is ErrorPolicy.RAISE:
                    raise
                if self.error_handler is not None:
                    call_error_handler(
                        self.error_handler, err, self.key(d, i), failed_sources(self, d, i)
                    )
                skipped_keys.append(f"{err.path}:{err.key}")
            except MaterializeError as err:  # a hook's own failure: Energon's handler skips it
                if self.error_handler is None:
                    raise
                call_error_handler(
                    self.error_handler,
                    err.__cause__ or err,
                    self.key(d, i),
                    failed_sources(self, d, i),
                )
                skipped_keys.append(f"{src.path}:{self.key(d, i)}: {err.hook} failed")
            mark(-1)
        return samples, kept, skipped_keys

    def _assemble(
        self, enc, recipe: Recipe, samples: list, kept: list[int], skeys: list[int]
    ) -> _Assembled:
        """Phase two: the encoded samples as a packing buffer's packs, the one sample of an
        unbatched recipe, or a batch (``batch`` then ``encode_batch``; packs chosen in the plan
        tier are packed first). A SkipSample here skips what was handed to the hook."""
        step = recipe.step

        def keys() -> tuple[str, ...]:
            return self.recipe_keys(recipe)

        with using_position(step, step * (self.recipe_size or len(recipe.refs))):
            return self._assemble_at(enc, recipe, samples, kept, skeys, keys)

    def _assemble_at(self, enc, recipe: Recipe, samples, kept, skeys, keys) -> _Assembled:
        step = recipe.step
        try:
            if self.packing:  # the loader batches the packs (a batch may take packs of two buffers)
                # The buffer is identified by its first sample's key (the recipe's when empty).
                with naming_failures("packing hooks", keys, step):
                    packs, sizes = pack_buffer(enc, samples, skeys[0] if skeys else recipe.key)
                return _Assembled(packs=packs, sizes=sizes)
            if not samples:
                return _Assembled()
            if self.unbatched:
                if len(samples) > 1:  # a hook returned a generator: several samples, one step
                    raise ConfigError(
                        f"encode_sample yielded {len(samples)} samples (sample "
                        f"{show_keys(keys())}), but batch_size=None delivers one sample per "
                        "step; set batch_size=N (the samples a step yields are batched together)"
                    )
                return _Assembled(batch=samples[0])
            if "pack" in recipe.refs.columns:  # packs chosen in the plan tier
                with naming_failures("packing hooks", keys, step):
                    samples = pack_planned(enc, samples, recipe.refs.column("pack"), kept)
            # fpipe's own hooks send collate's tensors as they are: in a worker, collate then
            # builds them in shared memory (fpipe.encode.batch_memory)
            with (
                naming_failures("batch", keys, step),
                sent_as_collated(keeps_collated_tensors(enc)),
            ):
                out = enc.batch(samples)
            with naming_failures("encode_batch", keys, step):
                return _Assembled(batch=enc.encode_batch(out))
        except SkipSample:
            return _Assembled(skipped_keys=[f"batch {step}: SkipSample" for _ in samples])
