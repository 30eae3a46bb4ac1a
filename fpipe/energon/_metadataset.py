"""Energon's ``prepare_metadataset`` on fpipe: a check of the file, nothing written."""

from __future__ import annotations

from typing import Any

__all__ = ["prepare_metadataset"]


def prepare_metadataset(path: Any) -> None:
    """Energon's ``prepare_metadataset(path)``: Energon writes a join index for each ``join:``
    of the metadataset; fpipe needs none (it matches sample keys in the workers), so this only
    parses and checks the file (nested files included) and writes nothing. Joiners are not
    resolved here, as in Energon's preparation: a joiner of code that is not imported yet is
    resolved when the dataset is built. Raises a ConfigError naming the file and the entry for
    a bad metadataset."""
    from fpipe.storage.config.metadataset import load_metadataset

    load_metadataset(str(path))
