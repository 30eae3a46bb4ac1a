"""The ``.npy`` arrays of an index, mapped without numpy's general header parser.

A worker that reads its first sample from a dataset maps about seven index arrays and, on
open, checks six headers: ``np.load(mmap_mode="r")`` costs ~70 us an array (the header is
parsed by ``ast.literal_eval``, the file opened twice), so the first recipe of a blend of 100
datasets (28 of them) spent ~20 ms there. Every index array fpipe writes is one-dimensional,
C-ordered and of a plain numeric dtype, and ``np.save`` writes such a header in one fixed
form: that form is recognised by the parse fpipe decodes ``.npy`` members with
(:func:`fpipe.decode.fields.npy_layout`) and the file mapped once (~15 us). Any other header
(another version, a structured dtype, 2-D, Fortran order, an empty array) returns None: the caller
then reads it with numpy, which says what is wrong with a bad one. A file shorter than its
header says raises ValueError, as numpy's mapping does.
"""

from __future__ import annotations

import mmap

import numpy as np

from fpipe.decode.fields import npy_layout

__all__ = ["map_plain_npy", "plain_npy_header"]

_MAGIC = b"\x93NUMPY\x01\x00"  #: format version 1.0 (what np.save writes for these arrays)


def plain_npy_header(f) -> tuple[int, np.dtype, int] | None:
    """(length, dtype, data offset) of the ``.npy`` file open in ``f`` (binary, at its start)
    in the plain form (see the module's docstring), else None."""
    head = f.read(10)
    if len(head) < 10 or head[:8] != _MAGIC:
        return None
    # the header parsed as a member's .npy is (one parser of np.save's form), 1-D C order only
    layout = npy_layout(head + f.read(int.from_bytes(head[8:10], "little")))
    if layout is None or layout[1] is not None or layout[2] != "C":
        return None
    dtype, _, _, length, offset = layout
    return length, dtype, offset


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
