"""Checks ``fpipe prepare`` runs before indexing: a wrong setting fails at once, not per sample.

- every field of the field map must match a member extension seen in the first samples of the
  first shard (the message lists the extensions that are there);
- the sample type must be one fpipe knows (the allow-list of :mod:`fpipe.samples`, with the
  user's type named ``package.module:Class`` registered by ``prepare``; a dotted
  ``module.Class`` name not registered yet is checked when the dataset is loaded);
- the field map must fit the sample type: no field the type lacks, every required field set.

Each failure is a :class:`~fpipe.core.errors.ConfigError` (``fpipe prepare`` exits with 2).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from fpipe.core.errors import ConfigError
from fpipe.decode.extensions import GZ
from fpipe.samples.field_spec import parse_field_spec
from fpipe.storage.config.dataset_yaml import CRUDE
from fpipe.storage.read.webdataset import peek_extensions

__all__ = ["PEEK_SAMPLES", "check_fields_present", "check_sample_type"]

#: samples of the first shard whose member extensions are compared with the field map.
PEEK_SAMPLES = 50


def check_fields_present(
    root: Path, shards: Sequence[str], field_map: Mapping[str, str | list[str]]
) -> None:
    """Raise if a field's extensions match no member of the first samples of ``shards[0]``."""
    if not field_map or not shards:
        return
    present = peek_extensions(root, shards[0], PEEK_SAMPLES)
    if not present:  # unreadable shard: reported per sample by the scan
        return
    have = set(present)
    for field, spec in field_map.items():
        alts = parse_field_spec(spec)
        if not any(a.ext in have or a.ext + GZ in have for a in alts):
            wanted = ", ".join(dict.fromkeys(a.ext for a in alts))
            raise ConfigError(
                f"{root / shards[0]}: field {field!r} wants a member with extension {wanted}, "
                f"but the first {PEEK_SAMPLES} samples have only: {', '.join(present)}; "
                f"fix it with e.g. --field {field}={present[0]}"
            )


def check_sample_type(
    sample_type: str, field_map: Mapping[str, str | list[str]], sample_loader: str | None = None
) -> None:
    """Raise for an unknown sample type, or a field map that does not fit it."""
    if sample_type == CRUDE:
        return
    from fpipe.samples import compile_field_map, sample_type_from_name

    try:
        cls = sample_type_from_name(sample_type)
    except ConfigError:
        if "." in sample_type:  # a user type the user's code registers at load time
            return
        raise
    if not field_map and sample_loader:
        raise ConfigError(
            f"{sample_type} fields come from an Energon sample_loader ({sample_loader}), which "
            "fpipe does not run: set the fields, e.g. --field image=jpg --field caption=txt"
        )
    try:
        compile_field_map(cls, dict(field_map))
    except ConfigError as e:
        raise ConfigError(f"--sample-type {sample_type} with this field map: {e}") from None
