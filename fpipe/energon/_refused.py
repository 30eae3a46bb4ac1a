"""Energon names that fpipe refuses: importable, so ported code fails where it uses one, with a
:class:`~fpipe.core.errors.ConfigError` naming it, why, and the fpipe way.

The same reasons are in the name table of ``docs/energon_migration.md``.
"""

from __future__ import annotations

from typing import Any, NoReturn

from fpipe.core.errors import ConfigError

__all__ = ["REFUSED", "refused"]

_WRAPPER = (
    "fpipe builds a dataset's whole order as one plan (exact resume, the same batches for any "
    "num_workers); Energon's iterable wrappers are replaced by options and plan stages"
)
_FACTORY = (
    "fpipe reads the dataset's .nv-meta files itself and builds no dataset factories; use "
    "fpipe.energon.get_train_dataset / get_val_dataset on the folder (fpipe.open_dataset for "
    "random access)"
)
_SUBCLASS = (
    "the deprecated per-type dataset classes are named in dataset.yaml files, which fpipe "
    "reads as data (the sample_type); no class named in a data file is constructed"
)

#: Energon name -> why fpipe refuses it, and the fpipe way.
REFUSED: dict[str, str] = {
    "EpochizeDataset": f"{_WRAPPER}: num_epochs= / repeat= of get_train_dataset",
    "FilterDataset": f"{_WRAPPER}: plan_stages=[fpipe.plan.filter_refs(...)] on index "
    "columns, or raise SkipSample in encode_sample",
    "GcDataset": "fpipe workers hold no sample references between batches; nothing to collect",
    "GroupBatchDataset": f"{_WRAPPER}: the task encoder's batch_group_criterion (grouped in "
    "the loader), or bucket_config= / fpipe.plan.group_batches on index metadata",
    "IterMapDataset": f"{_WRAPPER}: a generator encode_sample (yield) in the task encoder",
    "LogSampleDataset": f"{_WRAPPER}: loader.stats() and fpipe plan --step N list the samples",
    "PackingDataset": f"{_WRAPPER}: packing_buffer_size= with the task encoder's packing hooks",
    "SavableDataset": f"{_WRAPPER}: every dataset of fpipe is savable (loader.state_dict())",
    "ShuffleBufferDataset": f"{_WRAPPER}: shuffle_buffer_size= of get_train_dataset",
    "BaseCoreDatasetFactory": _FACTORY,
    "CrudeJsonlDatasetFactory": _FACTORY,
    "DefaultCrudeJsonlDatasetFactory": _FACTORY,
    "DefaultDecoderWebdatasetFactory": _FACTORY,
    "DefaultGenericWebdatasetFactory": _FACTORY,
    "JoinedWebdatasetFactory": f"{_FACTORY}; joins are a metadataset's join:",
    "StandardWebdatasetFactory": _FACTORY,
    "CaptioningWebdataset": _SUBCLASS,
    "CrudeWebdataset": _SUBCLASS,
    "ImageClassificationWebdataset": _SUBCLASS,
    "ImageWebdataset": _SUBCLASS,
    "InterleavedWebdataset": _SUBCLASS,
    "MultiChoiceVQAWebdataset": _SUBCLASS,
    "OCRWebdataset": _SUBCLASS,
    "SimilarityInterleavedWebdataset": _SUBCLASS,
    "TextWebdataset": _SUBCLASS,
    "VidQAWebdataset": _SUBCLASS,
    "VQAOCRWebdataset": _SUBCLASS,
    "VQAWebdataset": _SUBCLASS,
    "Metadataset": (
        "metadataset files are read as data: pass the metadataset.yaml path to "
        "get_train_dataset / get_val_dataset; the Python classes are not built"
    ),
    "MetadatasetV2": (
        "metadataset files are read as data: pass the metadataset.yaml path to "
        "get_train_dataset / get_val_dataset; the Python classes are not built"
    ),
}


def refused(name: str) -> Any:
    """A stand-in for Energon's ``name`` that raises a ConfigError when called or subclassed."""
    why = REFUSED[name]
    message = f"megatron.energon.{name} is not supported by fpipe: {why}"

    def fail(*_args: Any, **_kwargs: Any) -> NoReturn:
        raise ConfigError(message)

    def init_subclass(cls: type, **_kwargs: Any) -> NoReturn:
        raise ConfigError(message)

    return type(
        name,
        (),
        {
            "__new__": fail,
            "__init_subclass__": classmethod(init_subclass),
            "__doc__": message,
            "__module__": "fpipe.energon",
        },
    )


for _name in REFUSED:
    globals()[_name] = refused(_name)
