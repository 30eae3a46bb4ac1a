"""fpipe: multimodal, data-parallel, exactly resumable data loading built from pure stages.

The plan tier (:mod:`fpipe.plan`) decides the order of sample references; the materialize tier
turns each batch recipe into tensors in DataLoader workers. The whole loader state is one small
value that serializes to bytes (:func:`fpipe.core.snapshot`).
"""

from fpipe._version import __version__

__all__ = ["__version__"]
