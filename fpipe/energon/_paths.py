"""Energon's submodule paths under ``fpipe.energon``: ``megatron.energon.task_encoder.base``
becomes ``fpipe.energon.task_encoder.base``, and so on.

User code imports names from Energon's submodules too (Megatron-LM: ``from
megatron.energon.task_encoder.base import stateless``). Each path in :data:`PATHS` is a module
made on import by a finder that answers only for these names: its names are the same objects
as ``fpipe.energon``'s (re-exports, loaded on first use, so importing a path imports no torch).
Paths with their own file (``fpipe.energon.av``, ``fpipe.energon.transforms``) are not here;
the modules below ``megatron.energon.av`` (``av.utils``, ...) are, holding ``fpipe.energon.av``'s
names (that file declares itself a package for them), and so are ``epathlib`` and
``epathlib.epath``, holding ``fpipe.energon.epath``'s.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

from fpipe._lazy import lazy_exports

__all__ = ["AV_PATHS", "EPATH_PATHS", "PATHS", "TYPED_WEBDATASETS", "install"]

_PREFIX = "fpipe.energon."

_ENCODE = ("Batch", "DefaultTaskEncoder", "TaskEncoder", "AugmentTaskEncoder", "stateless")
_COLLATE = ("batch_list", "batch_pad_stack", "batch_stack", "generic_batch")
_COOKING = ("Cooker", "basic_sample_keys", "cooker")
_DATASETS = ("get_train_dataset", "get_val_dataset", "get_val_datasets")
_SAMPLE_TYPES = (
    "CaptioningSample",
    "CrudeSample",
    "ImageClassificationSample",
    "ImageSample",
    "InterleavedSample",
    "MultiChoiceVQASample",
    "OCRSample",
    "SimilarityInterleavedSample",
    "TextSample",
    "VQASample",
    "VidQASample",
)
_WEBDATASET = (
    "BaseWebdatasetFactory",
    "DefaultDecoderWebdatasetFactory",
    "DefaultGenericWebdatasetFactory",
    "JoinedWebdatasetFactory",
    "SampleDecoder",
    "StandardWebdatasetFactory",
)
#: Energon's deprecated per-type dataset classes (refused: fpipe.energon lists them too).
TYPED_WEBDATASETS = (
    "CaptioningWebdataset",
    "CrudeWebdataset",
    "ImageClassificationWebdataset",
    "ImageWebdataset",
    "InterleavedWebdataset",
    "MultiChoiceVQAWebdataset",
    "OCRWebdataset",
    "SimilarityInterleavedWebdataset",
    "TextWebdataset",
    "VidQAWebdataset",
    "VQAOCRWebdataset",
    "VQAWebdataset",
)
#: Energon's wrapper classes, each in ``wrappers.<snake_case name>`` as well.
_WRAPPERS = (
    "BatchDataset",
    "BlendDataset",
    "ConcatDataset",
    "EpochizeDataset",
    "FilterDataset",
    "GcDataset",
    "GroupBatchDataset",
    "IterMapDataset",
    "LimitDataset",
    "LogSampleDataset",
    "MapDataset",
    "MixBatchDataset",
    "PackingDataset",
    "RepeatDataset",
    "ShuffleBufferDataset",
    "WatchdogDataset",
)
_METADATASET = (
    "DatasetLoader",
    "DatasetLoaderInterface",
    "Metadataset",
    "MetadatasetV2",
    "load_dataset",
    "prepare_metadataset",
    "traverse_metadataset",
)
_CACHE = (
    "CachePool",
    "DecodeFileStore",
    "DirectLazy",
    "FileCacheLazy",
    "FileStore",
    "FileStoreCachePool",
    "FileStoreDecoder",
    "Lazy",
    "MockLazy",
    "NoCachePool",
    "PrimaryFileStore",
    "SystemFileStore",
)
_LAYOUT = (
    "MAIN_FOLDER_NAME",
    "INDEX_SQLITE_FILENAME",
    "INFO_JSON_FILENAME",
    "INFO_YAML_FILENAME",
    "SPLIT_YAML_FILENAME",
)


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() and i else c.lower() for i, c in enumerate(name))


#: Energon module path (below ``megatron.energon``) -> the ``fpipe.energon`` names it holds.
PATHS: dict[str, tuple[str, ...]] = {
    "task_encoder": (*_ENCODE, *_COLLATE, *_COOKING, *_DATASETS),
    "task_encoder.base": (*_ENCODE, *_COLLATE),
    "task_encoder.cooking": _COOKING,
    "task_encoder.loader": _DATASETS,
    "flavors": (
        "Sample",
        "SavableDataset",
        "BaseCoreDatasetFactory",
        "CrudeJsonlDatasetFactory",
        "DefaultCrudeJsonlDatasetFactory",
        *_SAMPLE_TYPES,
        *_WEBDATASET,
        *TYPED_WEBDATASETS,
    ),
    "flavors.base_dataset": ("Sample", "SavableDataset", "BaseCoreDatasetFactory"),
    "flavors.webdataset": _WEBDATASET,
    "flavors.webdataset.sample_decoder": ("SampleDecoder",),
    "flavors.webdataset.config": _LAYOUT,
    "wrappers": (
        *_WRAPPERS,
        "SkipSample",
        "concat_pad",
        "generic_concat",
        "homogeneous_concat_mix",
    ),
    **{f"wrappers.{_snake(name)}": (name,) for name in _WRAPPERS},
    "wrappers.mix_batch_dataset": (
        "MixBatchDataset",
        "concat_pad",
        "generic_concat",
        "homogeneous_concat_mix",
    ),
    "metadataset": _METADATASET,
    "metadataset.loader": ("load_dataset", "prepare_metadataset", "traverse_metadataset"),
    "metadataset.loader_interface": ("DatasetBlendMode", "DatasetLoaderInterface"),
    "metadataset.metadataset": ("Metadataset",),
    "metadataset.metadataset_v2": ("MetadatasetV2",),
    "cache": _CACHE,
    "edataclass": ("edataclass",),
    "source_info": ("SourceInfo",),
    "errors": ("SkipSample", "log_exception", "reraise_exception"),
    "loader": ("get_loader", "get_savable_loader"),
    "savable_loader": ("SavableDataLoader",),
    "dataset_config": ("get_dataset_from_config",),
    "worker": ("WorkerConfig",),
}

#: Energon's modules below ``megatron.energon.av`` (its guide and API pages import from them)
#: -> the ``fpipe.energon.av`` names each holds.
AV_PATHS: dict[str, tuple[str, ...]] = {
    "av.av_data": ("AVData",),
    "av.av_decoder": ("AVData", "AVDecoder", "AVWebdatasetDecoder"),
    "av.av_reader": ("AVProbeIndex",),
    "av.utils": ("AVData", "AVDecoder", "get_clips_uniform", "get_single_frames_uniform"),
}


#: Energon's ``epathlib`` package and its ``epath`` module (where Energon users import
#: ``EPath`` from) -> the ``fpipe.energon.epath`` names each holds.
EPATH_PATHS: dict[str, tuple[str, ...]] = {
    "epathlib": ("DEFAULT_PROFILE_NAME", "EPath"),
    "epathlib.epath": ("DEFAULT_PROFILE_NAME", "EPath", "NVDATASET_CACHE_DIR"),
}
#: The module each group of paths takes its names from.
_SOURCES = (
    (AV_PATHS, "fpipe.energon.av"),
    (EPATH_PATHS, "fpipe.energon.epath"),
    (PATHS, "fpipe.energon"),
)


def _paths_of(rel: str) -> tuple[dict[str, tuple[str, ...]], str] | None:
    """The group holding path ``rel`` and the module its names come from (None: no path)."""
    return next(((paths, src) for paths, src in _SOURCES if rel in paths), None)


class _EnergonPathFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes the modules of :data:`PATHS`; answers None for every other name."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        rel = fullname[len(_PREFIX) :] if fullname.startswith(_PREFIX) else None
        found = _paths_of(rel) if rel is not None else None
        if found is None:
            return None
        is_package = any(p.startswith(f"{rel}.") for p in found[0])
        return importlib.util.spec_from_loader(fullname, self, is_package=is_package)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # the default module

    def exec_module(self, module: ModuleType) -> None:
        rel = module.__name__[len(_PREFIX) :]
        paths, source = _paths_of(rel)  # type: ignore[misc]  # find_spec found it
        names = paths[rel]
        module.__doc__ = f"``megatron.energon.{rel}`` on fpipe."
        module.__all__ = list(names)  # type: ignore[attr-defined]
        get, listing = lazy_exports(module.__name__, dict.fromkeys(names, source))
        module.__getattr__ = get  # type: ignore[method-assign]
        module.__dir__ = listing  # type: ignore[method-assign]


class _EnergonPackage(ModuleType):
    """``fpipe.energon``'s module type: a path that is also a name of the package
    (``edataclass``) keeps the name bound to the object, not to the module, when the path is
    imported (as in Energon, whose ``__init__`` binds the name after importing the module)."""

    def __setattr__(self, name: str, value: object) -> None:
        if (
            isinstance(value, ModuleType)
            and isinstance(getattr(value, "__loader__", None), _EnergonPathFinder)
            and name in self.__dir__()
        ):
            return
        super().__setattr__(name, value)


def install(package: ModuleType) -> None:
    """Put the finder of Energon's paths on ``sys.meta_path`` (once; after the finders of real
    files, so a module with its own file is that file); ``package`` is ``fpipe.energon``."""
    package.__class__ = _EnergonPackage
    if not any(isinstance(f, _EnergonPathFinder) for f in sys.meta_path):
        sys.meta_path.append(_EnergonPathFinder())
