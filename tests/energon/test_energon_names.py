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
