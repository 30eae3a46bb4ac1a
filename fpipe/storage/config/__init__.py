"""Configuration files of datasets: dataset.yaml, split.yaml, metadatasets and field specs."""

from fpipe.storage.config.dataset_yaml import (
    DatasetConfig,
    SplitConfig,
    dump_yaml,
    is_crude,
    load_dataset_config,
    load_split_config,
    parse_split_ratios,
    split_config_from_obj,
)

__all__ = [
    "DatasetConfig",
    "SplitConfig",
    "dump_yaml",
    "is_crude",
    "load_dataset_config",
    "load_split_config",
    "parse_split_ratios",
    "split_config_from_obj",
]
