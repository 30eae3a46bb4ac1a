"""Cooking: one sample's raw members -> a typed sample (or the task encoder's own, from a crude
sample), read and decoded as its dataset source says; the sample rngs' fold_in tags."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fpipe.materialize._aux import aux_stores, primary_store
from fpipe.materialize._source_info import sample_sources
from fpipe.materialize.sources import DatasetSource
from fpipe.samples import cook_sample, decode_members, decode_whole_sample, make_crude_sample
from fpipe.storage.config.dataset_yaml import is_crude
from fpipe.storage.read.keys import energon_keys

if TYPE_CHECKING:  # the materializer calls these with itself
    from fpipe.materialize.materializer import Materializer

__all__ = ["COOK", "ENCODE", "cook"]

COOK, ENCODE = 0, 1  # fold_in tags: the cooking rng and the encoding rng of a sample


def needs_primary(task_encoder, crude) -> bool:
    """Whether the cooker that will cook ``crude`` asks for its own dataset as ``primary``
    (Energon's ``@cooker(need_primary=True)``)."""
    from fpipe.samples import Cooker

    for c in getattr(task_encoder, "cookers", None) or ():
        if isinstance(c, Cooker):
            if c.is_match(crude):
                return bool(getattr(c.cook, "__cooker_need_primary__", False))
        else:
            return bool(getattr(c, "__cooker_need_primary__", False))
    return False


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
    path = getattr(ds, "path", src.path)
    # An Energon folder's samples carry Energon's key (inside the shard); fpipe's key
    # (shard/key) still names them in errors, lineage and `fpipe plan --find`.
    own_key, shard = energon_keys(ds, index, sample_key) or (None, "")
    decode_exts = ds.decode_exts(index) if hasattr(ds, "decode_exts") else None
    # before decoding; a typed sample is made of its field map's members
    sources = sample_sources(ds, str(path), index, sample_key, raw, mat.wanted(src))
    if is_crude(src.sample_type):
        # Energon: a cooker sees the members decoded (its task encoder's `decoder`, by
        # default by extension); `decoder = None` keeps the raw bytes.
        if mat.sample_decoder is not None:
            raw = decode_whole_sample(mat.sample_decoder, raw, str(path), sample_key, own_key)
        else:
            raw = decode_members(
                raw,
                path=str(path),
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
            path=str(path),
            decode_limits=mat.decode_limits,
            decode_exts=decode_exts,
            shard=shard,
            sources=sources,
        )
        aux = aux_stores(mat, src.aux) if src.aux else {}
        if needs_primary(mat.task_encoder, crude):
            aux["primary"] = primary_store(mat, str(path))
        if not aux:
            return mat.task_encoder.cook_crude_sample(crude)
        return mat.task_encoder.cook_crude_sample(crude, aux=aux)
    # Audio/video: stream metadata + keyframes stored by `fpipe prepare` (empty when none)
    # let the lazy AVDecoder seek without probing the file; a task encoder with
    # `probe_av = True` (the video/audio ones) has the others probed while cooking.
    fmap = mat.field_map(src)
    av_metadata = ds.av_metadata(index) if hasattr(ds, "av_metadata") else None
    return cook_sample(
        raw,
        sample_type=fmap.sample_type,
        field_map=fmap,
        key=sample_key,
        restore_key=restore_key,
        subflavors=src.subflavors,
        path=str(path),
        image_decode_options=mat.image_decode,
        rng=rng,
        av_metadata=av_metadata,
        decode_limits=mat.decode_limits,
        probe_av=bool(getattr(mat.task_encoder, "probe_av", False)),
        decode_exts=decode_exts,
        decoder=mat.sample_decoder,
        sample_key=own_key,
        sources=sources,
    )
