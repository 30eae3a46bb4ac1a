"""Every public name of Megatron-Energon 7.4 imports from ``fpipe.energon`` (its module path on
fpipe) or is listed as refused, with its reason, in docs/energon_migration.md."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fpipe.core.errors import ConfigError
from fpipe.energon._refused import REFUSED

# megatron-energon 7.4.0: ``megatron.energon.__all__`` (src/megatron/energon/__init__.py of the
# 7.4.0 release) and ``megatron.energon.av.__all__`` (src/megatron/energon/av/__init__.py).
ENERGON_ALL = [
    "__version__",
    "AugmentTaskEncoder",
    "BaseCoreDatasetFactory",
    "BaseWebdatasetFactory",
    "basic_sample_keys",
    "batch_list",
    "batch_pad_stack",
    "batch_stack",
    "Batch",
    "BatchDataset",
    "BlendDataset",
    "CachePool",
    "CaptioningSample",
    "CaptioningWebdataset",
    "concat_pad",
    "ConcatDataset",
    "cooker",
    "Cooker",
    "CrudeJsonlDatasetFactory",
    "CrudeSample",
    "CrudeWebdataset",
    "DatasetLoader",
    "DatasetLoaderInterface",
    "DecodeFileStore",
    "DefaultCrudeJsonlDatasetFactory",
    "DefaultDecoderWebdatasetFactory",
    "DefaultGenericWebdatasetFactory",
    "DefaultTaskEncoder",
    "DirectLazy",
    "edataclass",
    "EpochizeDataset",
    "FileCacheLazy",
    "FileStore",
    "FileStoreCachePool",
    "FileStoreDecoder",
    "FilterDataset",
    "GcDataset",
    "generic_batch",
    "generic_concat",
    "get_loader",
    "get_savable_loader",
    "get_train_dataset",
    "get_val_dataset",
    "get_val_datasets",
    "GroupBatchDataset",
    "homogeneous_concat_mix",
    "ImageClassificationSample",
    "ImageClassificationWebdataset",
    "ImageSample",
    "ImageWebdataset",
    "InterleavedSample",
    "InterleavedWebdataset",
    "IterMapDataset",
    "JoinedWebdatasetFactory",
    "Lazy",
    "LimitDataset",
    "load_dataset",
    "log_exception",
    "LogSampleDataset",
    "MapDataset",
    "Metadataset",
    "MetadatasetV2",
    "MixBatchDataset",
    "MockLazy",
    "MultiChoiceVQASample",
    "MultiChoiceVQAWebdataset",
    "NoCachePool",
    "OCRSample",
    "OCRWebdataset",
    "PackingDataset",
    "PrimaryFileStore",
    "prepare_metadataset",
    "RepeatDataset",
    "reraise_exception",
    "Sample",
    "SampleDecoder",
    "SavableDataLoader",
    "SavableDataset",
    "traverse_metadataset",
    "ShuffleBufferDataset",
    "SimilarityInterleavedSample",
    "SimilarityInterleavedWebdataset",
    "SkipSample",
    "SourceInfo",
    "StandardWebdatasetFactory",
    "stateless",
    "SystemFileStore",
    "TaskEncoder",
    "TextSample",
    "TextWebdataset",
    "VidQASample",
    "VidQAWebdataset",
    "VQAOCRWebdataset",
    "VQASample",
    "VQAWebdataset",
    "WorkerConfig",
]
ENERGON_AV_ALL = (
    "AVDecoder",
    "AVWebdatasetDecoder",
    "AVData",
    "get_clips_uniform",
    "get_single_frames_uniform",
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "energon_migration.md"


def _table() -> dict[str, str]:
    """``{name: status}`` from the rows of the name table: ``| `name` | status | ... |``."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Energon 7.4's names", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for m in re.finditer(r"^\| `([\w.]+)` \| ([^|]+) \|", section, re.M):
        rows[m.group(1)] = m.group(2).strip()
    return rows


def test_energon_lists_are_complete():
    assert len(ENERGON_ALL) == len(set(ENERGON_ALL)) == 96


@pytest.mark.parametrize(
    ("module", "names", "prefix"),
    [("fpipe.energon", ENERGON_ALL, ""), ("fpipe.energon.av", ENERGON_AV_ALL, "av.")],
)
def test_every_name_imports_or_is_refused_in_the_docs(module, names, prefix):
    table = _table()
    mod = importlib.import_module(module)
    missing, undocumented, working = [], [], []
    for name in names:
        status = table.get(prefix + name)
        if status is None:
            undocumented.append(prefix + name)
        elif status.startswith("refused"):
            if prefix + name not in REFUSED and hasattr(mod, name):
                working.append(prefix + name)  # a working name the docs call refused
        elif not hasattr(mod, name):
            missing.append(f"{prefix}{name} ({status})")
    assert not undocumented, f"not in the docs' name table: {undocumented}"
    assert not missing, f"documented as supported but not importable: {missing}"
    assert not working, f"documented as refused but provided: {working}"


def test_refused_names_raise_the_documented_reason():
    import fpipe.energon as energon

    table = _table()
    for name in ENERGON_ALL:
        if table[name].startswith("refused") and hasattr(energon, name):
            with pytest.raises(ConfigError, match=rf"megatron\.energon\.{name} is not supported"):
                getattr(energon, name)()


def test_supported_names_are_in_all_and_import_no_torch():
    import fpipe.energon as energon

    table = _table()
    supported = {n for n in ENERGON_ALL if not table[n].startswith("refused")}
    assert supported <= set(energon.__all__)
    code = "import sys, fpipe.energon, fpipe.energon.av, fpipe.energon.transforms; "
    code += "print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# Energon module paths that user code imports names from (Megatron-LM's multimodal example and
# Energon 7.4's own tests): (path below megatron.energon, a name imported from it).
ENERGON_PATHS = [
    ("task_encoder.base", "stateless"),
    ("task_encoder.base", "DefaultTaskEncoder"),
    ("task_encoder.cooking", "cooker"),
    ("flavors", "BaseWebdatasetFactory"),
    ("flavors.base_dataset", "Sample"),
    ("flavors.webdataset.sample_decoder", "SampleDecoder"),
    ("flavors.webdataset.config", "MAIN_FOLDER_NAME"),
    ("edataclass", "edataclass"),
    ("source_info", "SourceInfo"),
    ("errors", "reraise_exception"),
    ("loader", "get_savable_loader"),
    ("dataset_config", "get_dataset_from_config"),
    ("metadataset.loader", "traverse_metadataset"),
    ("metadataset.loader_interface", "DatasetBlendMode"),
    ("wrappers.blend_dataset", "BlendDataset"),
    ("wrappers.watchdog_dataset", "WatchdogDataset"),
]


@pytest.mark.parametrize(("path", "name"), ENERGON_PATHS)
def test_energon_submodule_paths_hold_the_same_objects(path, name):
    import fpipe.energon as energon

    module = importlib.import_module(f"fpipe.energon.{path}")
    assert getattr(module, name) is getattr(energon, name)
    assert name in module.__all__ and name in dir(module)


def test_every_submodule_path_resolves_and_imports_no_torch():
    from fpipe.energon._paths import PATHS

    code = (
        "import importlib, sys, fpipe.energon\n"
        "from fpipe.energon._paths import PATHS\n"
        "mods = [importlib.import_module('fpipe.energon.' + p) for p in PATHS]\n"
        "from fpipe.energon.task_encoder.base import stateless\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    import fpipe.energon as energon

    for path, names in PATHS.items():
        module = importlib.import_module(f"fpipe.energon.{path}")
        for name in names:
            assert getattr(module, name) is getattr(energon, name), f"{path}.{name}"
    import fpipe.energon.av as av
    from fpipe.energon._paths import AV_PATHS

    for path, names in AV_PATHS.items():  # megatron.energon.av's modules: fpipe.energon.av's names
        module = importlib.import_module(f"fpipe.energon.{path}")
        assert all(getattr(module, name) is getattr(av, name) for name in names), path
    # a path that is also a name (edataclass) leaves the name bound to the object, as Energon
    assert energon.edataclass is importlib.import_module("fpipe.energon.edataclass").edataclass
    assert not isinstance(energon.edataclass, type(energon))
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("fpipe.energon.task_encoder.nothing_here")
