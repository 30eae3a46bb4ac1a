"""Cooking: one sample's raw members -> a typed sample (or the task encoder's own, from a crude
sample), read and decoded as its dataset source says; the sample rngs' fold_in tags."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fpipe.materialize._aux import aux_stores, cache_pool, primary_store
from fpipe.materialize._cook_many import plain_fields
from fpipe.materialize._source_info import ShardNames
from fpipe.materialize.lazy import PrimaryFileStore
from fpipe.materialize.sources import DatasetSource
from fpipe.samples import (
    as_image_options,
    cook_fields,
    decode_members,
    decode_whole_sample,
    make_crude_sample,
)
from fpipe.storage.config.dataset_yaml import is_crude

if TYPE_CHECKING:  # the materializer calls these with itself
    from fpipe.materialize.materializer import Materializer

__all__ = ["COOK", "ENCODE", "cook", "new_cooking"]

COOK, ENCODE = 0, 1  # fold_in tags: the cooking rng and the encoding rng of a sample


@dataclasses.dataclass(frozen=True)
class _Cooking:
    """What cooking a sample of ``src`` (opened as ``ds``) takes that is the same for all its
    samples. Cooking runs for every sample, so this is worked out once per process
    (:func:`new_cooking`), not per sample."""

    src: DatasetSource
    ds: Any
    path: str  #: the dataset's path, named in errors and ``__sources__``
    names: ShardNames
    crude: bool
    wanted: frozenset[str] | None  #: the members a sample is made of (None: all)
    field_map: Any  #: the compiled field map (None for crude samples)
    image_options: Any  #: the materializer's image decode options, as a record (or None)
    #: ``ds.decode_exts`` where its samples may have members decoded by another name (a
    #: table's typed columns), else None: the others always give ``{}``
    decode_exts: Callable[[int], Any] | None
    #: ``ds.av_metadata`` where it holds stored audio/video metadata, else None (it would
    #: always give ``{}``)
    av_metadata: Callable[[int], Any] | None
    row_object: bool  #: whether crude samples carry the row's object as ``json`` (a JSONL table)
    #: the fields, where its samples cook in one pass (:func:`fpipe.materialize._cook_many.
    #: plain_fields`), else None
    plain: tuple | None = None


def new_cooking(mat: Materializer, src: DatasetSource, ds) -> _Cooking:
    """The :class:`_Cooking` of ``src`` opened as ``ds``, kept by the materializer under
    ``id(ds)`` (the materializer holds each opened dataset until it closes it, and drops the
    entry then; the entry holds it too, so that its id stays its own)."""
    path = str(getattr(ds, "path", src.path))
    names = ShardNames(ds, path)
    crude = is_crude(src.sample_type)
    how = _Cooking(
        src=src,
        ds=ds,
        path=path,
        names=names,
        crude=crude,
        wanted=mat.wanted(src),
        field_map=None if crude else mat.field_map(src),
        image_options=as_image_options(mat.image_decode),
        decode_exts=_per_sample(ds, "decode_exts", "reader", "decode_exts"),
        av_metadata=_per_sample(ds, "av_metadata", "record", "av_fields"),
        row_object=crude and _is_jsonl_table(ds),
    )
    # whether its samples cook in one pass depends on the rest of the record
    how = mat._cooking[id(ds)] = dataclasses.replace(how, plain=plain_fields(mat, how))
    return how


def _per_sample(ds, method: str, part: str, what: str) -> Callable[[int], Any] | None:
    """``ds.<method>`` (a per-sample lookup), or None where it would only ever give ``{}``:
    ``ds`` lacks it, or is a :class:`fpipe.storage.read.Dataset` whose ``part`` (its reader,
    its record) has no ``what`` (no typed columns, no stored audio/video fields)."""
    of = getattr(ds, part, None)
    if of is not None and not getattr(of, what, None):
        return None
    return getattr(ds, method, None)


def _is_jsonl_table(ds) -> bool:
    table = getattr(getattr(ds, "record", None), "table", None)
    return table is not None and str(table.path).endswith(".jsonl")


def cooker_needs(task_encoder, crude) -> tuple[bool, bool]:
    """Whether the cooker that will cook ``crude`` asks for its own dataset as ``primary``
    and for a cache pool as ``cache`` (Energon's ``@cooker(need_primary=True,
    need_cache=True)``)."""
    from fpipe.samples import Cooker

    for c in getattr(task_encoder, "cookers", None) or ():
        fn = c.cook if isinstance(c, Cooker) else c
        if not isinstance(c, Cooker) or c.is_match(crude):
            return (
                bool(getattr(fn, "__cooker_need_primary__", False)),
                bool(getattr(fn, "__cooker_need_cache__", False)),
            )
    return False, False


def cook(
    mat: Materializer,
    src: DatasetSource,
    ds,
    index: int,
    raw,
    restore_key,
    rng,
    key: str | None = None,
) -> Any:
    """Sample ``index`` of ``ds`` (read and cooked as ``src`` says) from its raw members
    (``key``: its key when known, else ``ds.key(index)``)."""
    sample_key = ds.key(index) if key is None else key
    how = mat._cooking.get(id(ds))
    if how is None or how.ds is not ds or how.src is not src:
        how = new_cooking(mat, src, ds)
    path = how.path
    # before decoding; a typed sample is made of its field map's members
    shard, inner, sources = how.names.locate(index, sample_key, raw, how.wanted)
    # An Energon folder's samples carry Energon's key (inside the shard); fpipe's key
    # (shard/key) still names them in errors, lineage and `fpipe plan --find`.
    own_key, energon_shard = (inner, shard) if how.names.energon else (None, "")
    decode_exts = None if how.decode_exts is None else how.decode_exts(index)
    if how.crude:
        # Energon: a cooker sees the members decoded (its task encoder's `decoder`, by
        # default by extension); `decoder = None` keeps the raw bytes.
        if mat.sample_decoder is not None:
            raw = decode_whole_sample(mat.sample_decoder, raw, path, sample_key, own_key)
        else:
            raw = decode_members(
                raw,
                path=path,
                key=sample_key,
                image_options=mat.image_decode,
                limits=mat.decode_limits,
                decode_exts=decode_exts,
            )
        crude = make_crude_sample(
            raw,
            key=sample_key if own_key is None else own_key,
            restore_key=restore_key,
            subflavors=src.subflavors,
            path=path,
            decode_limits=mat.decode_limits,
            decode_exts=decode_exts,
            shard=energon_shard,
            sources=sources,
        )
        if how.row_object and "json" not in crude:
            # Energon's JSONL datasets hand cookers the parsed line as sample["json"]
            crude["json"] = ds.row_object(index)
        aux = aux_stores(mat, src.aux) if src.aux else {}
        need_primary, need_cache = cooker_needs(mat.task_encoder, crude)
        if need_primary:  # `.member` names a member of this sample, as in Energon
            aux["primary"] = PrimaryFileStore(primary_store(mat, path), crude["__key__"])
        if need_cache:
            aux["cache"] = cache_pool(mat)
        if not aux:
            return mat.task_encoder.cook_crude_sample(crude)
        return mat.task_encoder.cook_crude_sample(crude, aux=aux)
    # Audio/video: stream metadata + keyframes stored by `fpipe prepare` (empty when none)
    # let the lazy AVDecoder seek without probing the file; a task encoder with
    # `probe_av = True` (the video/audio ones) has the others probed while cooking.
    return cook_fields(
        raw,
        how.field_map,
        sample_key,
        restore_key,
        src.subflavors,
        path,
        how.image_options,
        rng,
        None if how.av_metadata is None else how.av_metadata(index),
        mat.decode_limits,
        bool(getattr(mat.task_encoder, "probe_av", False)),
        decode_exts,
        mat.sample_decoder,
        own_key,
        sources,
    )
