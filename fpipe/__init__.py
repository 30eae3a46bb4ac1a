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

from fpipe._version import __version__

# Torch-facing names load on first use, so `import fpipe` stays fast.
_LAZY = {
    "DefaultTaskEncoder": "fpipe.encode",
    "TaskEncoder": "fpipe.encode",
    "Batch": "fpipe.samples",
    "Sample": "fpipe.samples",
    "Loader": "fpipe.loader",
    "Topology": "fpipe.loader",
    "WorkerConfig": "fpipe.loader",
    "get_loader": "fpipe.loader",
    "get_savable_loader": "fpipe.loader",
    "get_train_dataset": "fpipe.loader",
    "get_val_dataset": "fpipe.loader",
    "prepare_dataset": "fpipe.storage",
    "open_dataset": "fpipe.storage",
}

__all__ = ["__version__", *sorted(_LAZY)]


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fpipe' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
