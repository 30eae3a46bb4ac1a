"""Energon's constants and enums that ported code names: the dataset layout's file names (as
``energon prepare`` writes them, which fpipe reads) and ``DatasetBlendMode``."""

from __future__ import annotations

from enum import Enum

__all__ = [
    "DatasetBlendMode",
    "INDEX_SQLITE_FILENAME",
    "INFO_JSON_FILENAME",
    "INFO_YAML_FILENAME",
    "MAIN_FOLDER_NAME",
    "SPLIT_YAML_FILENAME",
]

#: The folder of a prepared dataset's metadata.
MAIN_FOLDER_NAME = ".nv-meta"
#: Files in it: the sample index, the shard counts (JSON or YAML) and the split.
INDEX_SQLITE_FILENAME = "index.sqlite"
INFO_JSON_FILENAME = ".info.json"
INFO_YAML_FILENAME = ".info.yaml"
SPLIT_YAML_FILENAME = "split.yaml"


class DatasetBlendMode(Enum):
    """How the numbers of a blend are read: as the weight of each dataset (``blend:`` with
    ``weight``), as the repetitions of each dataset's samples per epoch (``blend_epochized:``
    with ``repetitions``), or no blend."""

    NONE = "none"
    DATASET_WEIGHT = "dataset_weight"
    SAMPLE_REPETITIONS = "sample_repetitions"
