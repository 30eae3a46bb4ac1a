"""Energon's public API as thin aliases over fpipe: ``megatron.energon`` becomes ``fpipe.energon``.

Every name here is fpipe's own implementation under Energon's name (there is no second loader);
``fpipe.energon.av`` and ``fpipe.energon.transforms`` mirror Energon's module paths. Porting
Energon code is changing ``megatron.energon`` to ``fpipe.energon`` in its imports. Names load on
first use, so ``import fpipe.energon`` imports no torch. Energon names that fpipe refuses are
listed, with the reason and the fpipe way, in ``docs/energon_migration.md``.

Example::

    from fpipe.energon import WorkerConfig, get_savable_loader, get_train_dataset
"""

from __future__ import annotations

import sys

from fpipe._lazy import lazy_exports
from fpipe._version import __version__
from fpipe.energon import _paths

_SAMPLES = (
    "Batch",
    "CaptioningSample",
    "Cooker",
    "CrudeSample",
    "ImageClassificationSample",
    "ImageSample",
    "InterleavedSample",
    "MultiChoiceVQASample",
    "OCRSample",
    "Sample",
    "SimilarityInterleavedSample",
    "TextSample",
    "VQASample",
    "VidQASample",
    "basic_sample_keys",
)
_ENCODE = (
    "DefaultTaskEncoder",
    "SkipSample",
    "TaskEncoder",
    "batch_list",
    "batch_pad_stack",
    "batch_stack",
    "generic_batch",
    "stateless",
)
_CACHE = (
    "CachePool",
    "DecodeFileStore",
    "DirectLazy",
    "FileStore",
    "FileStoreDecoder",
    "Lazy",
    "MockLazy",
    "NoCachePool",
    "PrimaryFileStore",
    "SystemFileStore",
)
#: Names of Energon's submodules (``megatron.energon.media``, ``.epathlib``) that ported code
#: imports, offered here too.
_MEDIA = (
    "AVMetadata",
    "ImageMetadata",
    "MediaFilterConfig",
    "MediaFilterStrategy",
    "MediaMetadataBase",
    "MediaMetadataType",
    "deserialize_media_metadata",
    "serialize_media_metadata",
)
_LOADER = ("WorkerConfig", "get_loader", "get_savable_loader")
_WRAPPERS = (
    "BatchDataset",
    "BlendDataset",
    "ConcatDataset",
    "LimitDataset",
    "MapDataset",
    "MixBatchDataset",
    "RepeatDataset",
    "edataclass",
    "get_val_datasets",
)
_DATASETS = ("get_train_dataset", "get_val_dataset")
_METADATASET = (
    "DatasetLoader",
    "DatasetLoaderInterface",
    "load_dataset",
    "prepare_metadataset",
    "traverse_metadataset",
)
_CONSTANTS = (
    "DatasetBlendMode",
    "INDEX_SQLITE_FILENAME",
    "INFO_JSON_FILENAME",
    "INFO_YAML_FILENAME",
    "MAIN_FOLDER_NAME",
    "SPLIT_YAML_FILENAME",
)

#: Energon name -> the fpipe module that defines it (loaded on first use).
_LAZY = {
    **dict.fromkeys(_SAMPLES, "fpipe.samples"),
    **dict.fromkeys(_ENCODE, "fpipe.encode"),
    **dict.fromkeys(_LOADER, "fpipe.loader"),
    **dict.fromkeys(_DATASETS, "fpipe.datasets"),
    # Energon's split of the data to ranks, its auto_decode keyword
    **dict.fromkeys(_DATASETS, "fpipe.energon._datasets"),
    **dict.fromkeys(_WRAPPERS, "fpipe.energon._wrappers"),
    **dict.fromkeys(
        ("concat_pad", "generic_concat", "homogeneous_concat_mix"), "fpipe.energon._mix"
    ),
    **dict.fromkeys(_CACHE, "fpipe.materialize.lazy"),
    "FileCacheLazy": "fpipe.materialize.file_cache_pool",
    "FileStoreCachePool": "fpipe.materialize.file_cache_pool",
    **dict.fromkeys(_MEDIA, "fpipe.decode.media_metadata"),
    "prepare_filesystem_dataset": "fpipe.energon._media",
    "EPath": "fpipe.energon.epath",
    "AugmentTaskEncoder": "fpipe.energon._augment",
    "SampleDecoder": "fpipe.decode",
    "SourceInfo": "fpipe.samples",
    "BaseWebdatasetFactory": "fpipe.energon._prepare",
    "get_dataset_from_config": "fpipe.energon._factory",
    "log_exception": "fpipe.energon._errors",
    "reraise_exception": "fpipe.energon._errors",
    "SavableDataLoader": "fpipe.energon._aliases",
    "WatchdogDataset": "fpipe.loader.watchdog",
    "cooker": "fpipe.energon._aliases",
    **dict.fromkeys(_METADATASET, "fpipe.energon._metadataset"),
    **dict.fromkeys(_CONSTANTS, "fpipe.energon._constants"),
}
#: Energon names that fpipe refuses (see docs/energon_migration.md): importable, and raising a
#: ConfigError with the reason and the fpipe way where ported code uses them.
_REFUSED = dict.fromkeys(
    (
        "EpochizeDataset",
        "FilterDataset",
        "GcDataset",
        "GroupBatchDataset",
        "IterMapDataset",
        "LogSampleDataset",
        "PackingDataset",
        "SavableDataset",
        "ShuffleBufferDataset",
        "BaseCoreDatasetFactory",
        "CrudeJsonlDatasetFactory",
        "DefaultCrudeJsonlDatasetFactory",
        "DefaultDecoderWebdatasetFactory",
        "DefaultGenericWebdatasetFactory",
        "JoinedWebdatasetFactory",
        "StandardWebdatasetFactory",
        *_paths.TYPED_WEBDATASETS,  # the deprecated per-type dataset classes
        "Metadataset",
        "MetadatasetV2",
    ),
    "fpipe.energon._refused",
)

__all__ = ["__version__", *sorted(_LAZY)]

__getattr__, __dir__ = lazy_exports(__name__, {**_REFUSED, **_LAZY})

# Energon's submodule paths: fpipe.energon.task_encoder.base, ...
_paths.install(sys.modules[__name__])
