"""Energon's packing hooks over one packing buffer, in Energon's order.

For a buffer of ``packing_buffer_size`` samples the materializer runs::

    preencode_sample(sample, rng)   # or encode_sample, when only that one is overridden
    select_samples_to_pack(samples) # -> groups; any objects may be returned
    postencode_sample(s, rng)       # on each selected sample, before packing
    pack_selected_samples(group)    # one packed sample per group

and the loader makes batches of ``batch_size`` packed samples (``batch``, ``encode_batch``),
taking packs across buffer boundaries. When the packs are chosen in the plan tier
(:func:`fpipe.plan.pack`), a recipe holds ``batch_size`` packs: each sample is encoded with
``encode_sample`` and :func:`pack_planned` calls ``pack_selected_samples`` per pack.

Nothing is looked up by object identity: the rng handed to ``postencode_sample`` is keyed by
the buffer and the sample's place in the selection (group, position), so selection may return
new objects, copies or slices.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from fpipe.core.errors import ConfigError
from fpipe.core.rng import LazyGenerator
from fpipe.encode.hook_forms import outputs

__all__ = [
    "PACK_KEY",
    "check_packing_hooks",
    "check_plan_packing",
    "pack_buffer",
    "pack_planned",
    "pre_pack_encoder",
    "with_pack_restore_key",
]

_POSTENCODE = 2  # fold_in tag of postencode_sample's rng (0 and 1: cook and encode)

#: First element of a packed sample's ``__restore_key__`` (Energon's names its wrapper there).
PACK_KEY = "PackingDataset"


def _overrides(enc: Any, name: str) -> bool:
    from fpipe.encode.task_encoder import DefaultTaskEncoder, TaskEncoder

    mine = getattr(type(enc), name, None)
    defaults = (getattr(TaskEncoder, name, None), getattr(DefaultTaskEncoder, name, None))
    return mine is not None and all(mine is not d for d in defaults)


def check_packing_hooks(enc: Any, packing_buffer_size: int | None) -> bool:
    """Whether the hook path is on; raises a ConfigError for a half-configured encoder.

    Packing is on when ``packing_buffer_size`` is set, and only then (as in Energon): without
    it, ``select_samples_to_pack`` and ``pack_selected_samples`` are not called and samples are
    batched one by one (an encoder written for both paths, such as Megatron-LM's, which packs
    only when asked).
    """
    selects = getattr(enc, "select_samples_to_pack", None) is not None
    name = type(enc).__name__
    if packing_buffer_size is None:
        return False
    if packing_buffer_size < 1:
        raise ConfigError(f"packing_buffer_size must be >= 1, got {packing_buffer_size}")
    if not selects or not _overrides(enc, "pack_selected_samples"):
        raise ConfigError(
            f"packing_buffer_size is set but {name} does not define both select_samples_to_pack "
            "and pack_selected_samples"
        )
    if _overrides(enc, "preencode_sample") and _overrides(enc, "encode_sample"):
        raise ConfigError(
            f"{name} overrides both encode_sample and preencode_sample; with packing, define "
            "preencode_sample/postencode_sample (before/after selection) or encode_sample alone"
        )
    return True


def check_plan_packing(enc: Any) -> None:
    """Refuse packs chosen in the plan tier (a :func:`fpipe.plan.pack` step) for an encoder
    that cannot merge them: each pack goes to ``pack_selected_samples``, which the encoder must
    define (``select_samples_to_pack`` is not used: the plan has selected)."""
    if not _overrides(enc, "pack_selected_samples"):
        raise ConfigError(
            "plan_stages has a fpipe.plan.pack step, and each pack it chooses goes to the task "
            f"encoder's pack_selected_samples, which {type(enc).__name__} does not define: pass "
            "task_encoder= an encoder that defines pack_selected_samples(samples) -> one packed "
            "sample (encode_sample runs on each sample first; see docs/packing.md)"
        )


def pre_pack_encoder(enc: Any) -> Callable[[Any, Any], Any]:
    """The hook run on each sample before selection: ``preencode_sample`` if the encoder
    overrides it, else ``encode_sample`` if it overrides that, else the identity (Energon's rule;
    ``postencode_sample`` then runs after selection, never twice)."""
    if _overrides(enc, "preencode_sample"):
        return enc.preencode_sample
    if _overrides(enc, "encode_sample"):
        return enc.encode_sample
    return _unchanged


def _unchanged(sample: Any, rng: Any) -> Any:
    return sample


def pack_buffer(enc: Any, samples: list, key: int, step: int = -1) -> tuple[list, list[int]]:
    """Select, post-encode and pack one buffer of pre-encoded samples.

    Returns the packed samples in selection order and, for each, the size of its group.
    ``key`` identifies the buffer (any key derived from its refs); ``step`` is the buffer's
    recipe step, which goes into each pack's restore key (:func:`with_pack_restore_key`).
    """
    groups = enc.select_samples_to_pack(list(samples))
    post = _overrides(enc, "postencode_sample")
    packs, sizes = [], []
    for g, group in enumerate(groups):
        group = list(group)
        if not group:
            continue
        if post:  # a generator postencode_sample puts all it yields into the group
            group = [
                out
                for j, s in enumerate(group)
                for out in outputs(enc.postencode_sample(s, LazyGenerator(key, _POSTENCODE, g, j)))
            ]
        pack = enc.pack_selected_samples(group)
        packs.append(with_pack_restore_key(pack, step, len(packs), group))
        sizes.append(len(group))
    return packs, sizes


def with_pack_restore_key(pack: Any, step: int, position: int, group: list) -> Any:
    """``pack`` with its ``__restore_key__`` filled as Energon fills it (whatever the hook put
    there): ``("PackingDataset", step, position, *the restore keys of its samples)``, where
    ``step`` is the buffer's recipe and ``position`` the pack's place among the buffer's packs
    (what ``loader.restore_sample`` rebuilds it from). A pack without a ``__restore_key__``
    (not a sample, nor a dict with one) is returned as it is."""
    members = tuple(_restore_key_of(s) for s in group)
    key = (PACK_KEY, step, position, *members)
    if isinstance(pack, dict):
        return {**pack, "__restore_key__": key} if "__restore_key__" in pack else pack
    fields = getattr(pack, "__dataclass_fields__", None)
    if fields is not None and "__restore_key__" in fields and fields["__restore_key__"].init:
        return dataclasses.replace(pack, __restore_key__=key)
    return pack


def _restore_key_of(sample: Any) -> Any:
    if isinstance(sample, dict):
        return sample.get("__restore_key__", ())
    return getattr(sample, "__restore_key__", ())


def pack_planned(enc: Any, samples: list, pack_of, kept: list[int]) -> list:
    """Packs chosen in the plan tier: ``pack_selected_samples`` on each group of encoded
    samples, in pack order. ``pack_of[pos]`` is the pack of recipe position ``pos`` and
    ``kept`` the positions of ``samples`` (a sample skipped by the error policy leaves its pack
    smaller; a pack left empty is left out)."""
    groups: dict[int, list] = {}
    for pos, sample in zip(kept, samples):
        groups.setdefault(int(pack_of[pos]), []).append(sample)
    return [enc.pack_selected_samples(groups[p]) for p in sorted(groups)]
