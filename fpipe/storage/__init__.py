"""Bytes on disk: tar shard indexes, `fpipe prepare`, dataset.yaml / split.yaml, tables and
random-access readers. Storage never decides order.

Example::

    from fpipe.storage import open_dataset, prepare_dataset
    prepare_dataset("data/coco", fields={"image": "jpg", "caption": "txt"}, split="8,1,1")
    ds = open_dataset("data/coco")
    ds.read(ds.split_indices("train")[0])["jpg"][:2]   # b'\xff\xd8'
"""

from typing import TYPE_CHECKING

from fpipe._lazy import lazy_exports
from fpipe.samples.field_spec import FieldSpec, parse_field_spec
from fpipe.storage.config.dataset_yaml import DatasetConfig, SplitConfig
from fpipe.storage.config.metadataset import Leaf, Metadataset, Mix, load_metadataset, resolve_mix
from fpipe.storage.prepare.run import PrepareOptions, PrepareReport, Problem, prepare_dataset
from fpipe.storage.read.dataset import Dataset
from fpipe.storage.read.layouts import open_dataset
from fpipe.storage.read.reader import FileCache
from fpipe.storage.read.record import IndexRecord, read_record

__all__ = [
    "Dataset",
    "DatasetConfig",
    "FieldSpec",
    "FileCache",
    "IndexRecord",
    "Leaf",
    "Metadataset",
    "Mix",
    "PrepareOptions",
    "PrepareReport",
    "Problem",
    "SplitConfig",
    "load_metadataset",
    "open_dataset",
    "parse_field_spec",
    "prepare_dataset",
    "read_record",
    "resolve_mix",
]

# Submodules load on first use: `import fpipe` then `fpipe.storage.<module>` works. Hidden from
# type checkers, which would otherwise take any misspelt name of this package for Any.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, {})
