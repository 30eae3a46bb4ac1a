"""The ``.npy`` arrays of an index, mapped without numpy's general header parser.

A worker that reads its first sample from a dataset maps about seven index arrays and, on
open, checks six headers: ``np.load(mmap_mode="r")`` costs ~70 us an array (the header is
parsed by ``ast.literal_eval``, the file opened twice), so the first recipe of a blend of 100
datasets (28 of them) spent ~20 ms there. Every index array fpipe writes is one-dimensional,
C-ordered and of a plain numeric dtype, and ``np.save`` writes such a header in one fixed
form: that form is matched here and the file mapped once (~15 us). Any other header (another
version, a structured dtype, 2-D, Fortran order, an empty array) returns None: the caller
then reads it with numpy, which says what is wrong with a bad one. A file shorter than its
header says raises ValueError, as numpy's mapping does.
"""

from __future__ import annotations

import mmap
import re

import numpy as np

__all__ = ["map_plain_npy", "plain_npy_header"]

_MAGIC = b"\x93NUMPY\x01\x00"  #: format version 1.0 (what np.save writes for these arrays)
#: the header np.save writes for a 1-D C-order array of a plain numeric dtype, padded
_PLAIN = re.compile(
    rb"\{'descr': '([<>|][biuf][1248])', 'fortran_order': False, 'shape': \(([0-9]{1,18}),\), \}"
    rb" *\n\Z"
)


def plain_npy_header(f) -> tuple[int, np.dtype, int] | None:
    """(length, dtype, data offset) of the ``.npy`` file open in ``f`` (binary, at its start)
    in the plain form (see the module's docstring), else None."""
    head = f.read(10)
    if len(head) < 10 or head[:8] != _MAGIC:
        return None
    size = int.from_bytes(head[8:10], "little")
    m = _PLAIN.match(f.read(size))
    if m is None:
        return None
    return int(m[2]), np.dtype(m[1].decode("ascii")), 10 + size


def map_plain_npy(path: str) -> np.ndarray | None:
    """The array of the ``.npy`` file ``path`` mapped read-only, or None where its header is
    not in the plain form or it is empty (read it with numpy). Raises OSError when it cannot
    be opened, ValueError when it is shorter than its header says."""
    with open(path, "rb", buffering=0) as f:
        header = plain_npy_header(f)
        if header is None or header[0] == 0:
            return None
        length, dtype, offset = header
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return np.frombuffer(mapped, dtype, length, offset)
