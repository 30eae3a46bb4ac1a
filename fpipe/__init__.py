"""fpipe: multimodal, data-parallel, exactly resumable data loading built from pure stages.

The plan tier (:mod:`fpipe.plan`) decides the order of sample references; the materialize tier
turns each batch recipe into tensors in DataLoader workers. The whole loader state is one small
value that serializes to bytes.

Example::

    import fpipe
    ds = fpipe.get_train_dataset("data/coco", batch_size=32, shuffle_buffer_size=1000,
                                 max_samples_per_sequence=100, seed=1234)
    loader = fpipe.get_loader(ds, num_workers=4)
    for batch in loader:
        ...
    ckpt = loader.state_dict()
"""

from fpipe import _moved
from fpipe._lazy import lazy_exports
from fpipe._version import __version__

_moved.install()  # documented former module paths stay importable

# Torch-facing names load on first use, so `import fpipe` stays fast; so do the subpackages
# (`fpipe.encode.DefaultTaskEncoder` works after `import fpipe` alone).
_SAMPLES = (
    "Batch",
    "CaptionedVideoSample",
    "CaptioningSample",
    "Cooker",
    "CrudeSample",
    "ImageClassificationSample",
    "ImageSample",
    "InterleavedSample",
    "Sample",
    "TextSample",
    "VQASample",
    "VidQASample",
    "VideoTextSample",
    "basic_sample_keys",
)
# Energon's hook helpers and task encoders, re-exported from fpipe.encode.
_ENCODE = (
    "DefaultTaskEncoder",
    "IgnoreSample",
    "SkipSample",
    "TaskEncoder",
    "batch_list",
    "batch_pad_stack",
    "batch_stack",
    "generic_batch",
    "sample_rng",
    "stateless",
)
_LOADER = (
    "Loader",
    "Topology",
    "WorkerConfig",
    "get_loader",
    "get_savable_loader",
)
_DATASETS = ("get_train_dataset", "get_val_dataset")
# Torch-facing names load on first use, so `import fpipe` stays fast. Energon's names are here
# so that porting Energon code is one import line (see docs/energon_migration.md).
_LAZY = {
    **dict.fromkeys(_SAMPLES, "fpipe.samples"),
    **dict.fromkeys(_ENCODE, "fpipe.encode"),
    **dict.fromkeys(_LOADER, "fpipe.loader"),
    **dict.fromkeys(_DATASETS, "fpipe.datasets"),
    "SampleDecoder": "fpipe.decode",
    "prepare_dataset": "fpipe.storage",
    "open_dataset": "fpipe.storage",
}

__all__ = ["__version__", *sorted(_LAZY)]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
