"""Batches from Ray actors handed to the training process where Ray's object store holds them.

Torch pickles a tensor's storage by saving it into a bytes object (``torch.save``), so a batch
sent through Ray the default way had its bytes copied four times: saved in the actor (10 ms
for 4.8 MB, see docs/ray.md), copied into the object store with the pickle, copied out of it
and loaded again here; Ray added about 18 ms per batch. Here, as with worker processes' slots
(:mod:`fpipe.encode.batch_slots`), pickling a tensor sends only where it lies: its storage,
once however many tensors view it (pickle's memo, so the views stay views), and the tensor's
offset, dtype, shape and strides. The storage goes
as a numpy array of its bytes, which Ray's serializer (pickle protocol 5) writes out of band:
the actor copies those bytes into the object store once, and this process reads them where
they lie, a read-only numpy array over the store's shared memory that pins the object for as
long as it lives. The tensors are made over that memory, holding the array, so a batch the
consumer keeps stays valid after its ObjectRef is dropped, and unchanged: the object is this
process's alone (nothing else reads or writes it), and Ray evicts or spills no object a live
array pins.

A batch kept by the consumer keeps its bytes in the object store, which has a fixed capacity
shared with the results in flight. Pinned bytes are counted here, and once they would exceed
:data:`PINNED_SHARE` of this node's store (divided among the ranks of the node), a batch's
storages are copied out of the store instead: one memory copy, and the object is freed when
its ObjectRef is dropped. Small storages (under :data:`COPY_BELOW` bytes) are always copied.
The count is by storage: Ray pins a whole object while any of its buffers is in use, so a
consumer that keeps one tensor of a batch and drops the rest pins more than is counted.

An actor on the training process's node collates a batch into a shared-memory slot instead
(:mod:`fpipe.encode.batch_slots`, as worker processes do): its tensors pickle as where they lie
in the slot, so nothing but that header goes through Ray, and the slot is this process's until
the consumer drops the batch. Only batches that find no free slot come through the store.

:func:`register` is called in each actor; :func:`set_capacity` by the loader in the training
process. Tensors that are not plain CPU tensors (autograd, quantized, sparse, conjugate views,
subclasses) travel as torch pickles them.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

from fpipe.core.fork_locks import fork_safe_lock
from fpipe.core.raw_memory import array_at
from fpipe.encode import batch_slots

__all__ = ["pinned_bytes", "reduce_tensor", "register", "set_capacity"]

#: Share of this node's object store that batches kept by this node's ranks may pin in all.
PINNED_SHARE = 0.25
#: Storages smaller than this are copied (pinning them would save next to nothing; and Ray
#: returns a result under 100 kB in its reply, not through the store).
COPY_BELOW = 128 << 10
#: Bytes of each out-of-band buffer a storage is sent as. Ray copies a buffer of more than
#: 1 MiB into the object store with a pool of 6 threads, which on a node whose cores are busy
#: decoding costs more than it saves (each copy waits until every thread has had its turn);
#: buffers up to 1 MiB are one plain memcpy. The chunks of a storage are 64-byte multiples,
#: which Ray lays out back to back (it aligns buffers to 64 bytes), so the training process
#: still reads the storage as one piece of the store's memory.
CHUNK = 1 << 20
#: The pickle protocol of Ray's serializer (out-of-band buffers).
_PROTOCOL = 5

# -- in an actor --------------------------------------------------------------------------------


class _Stored:
    """A storage being sent: pickled once per result (pickle's memo), however many tensors
    view it; its bytes travel as numpy arrays of at most :data:`CHUNK` bytes, out of band."""

    __slots__ = ("__weakref__", "array")

    def __init__(self, array: Any):
        self.array = array

    def __reduce__(self):
        array = self.array
        return _storage, tuple(array[i : i + CHUNK] for i in range(0, max(array.nbytes, 1), CHUNK))


#: storages being pickled, by (address, bytes): alive while a pickling holds them (each holds
#: its storage, so no other storage can take its address meanwhile)
_stored: weakref.WeakValueDictionary[tuple[int, int], _Stored] = weakref.WeakValueDictionary()


def reduce_tensor(t: Any) -> tuple:
    """``(rebuild, args)`` of tensor ``t``: where it lies in the actor's shared-memory slot
    (:func:`fpipe.encode.batch_slots.slot_reduction`), else its storage as an out-of-band
    array and where the tensor lies in it, or torch's own reduction for tensors that are not
    plain CPU tensors."""
    import torch

    in_slot = batch_slots.slot_reduction(t)  # an actor on the loader's node: where it lies
    if in_slot is not None:
        return in_slot
    if (
        type(t) is not torch.Tensor
        or t.device.type != "cpu"
        or t.layout != torch.strided
        or t.requires_grad
        or t.is_quantized
        or t.is_conj()
        or t.is_neg()
        or t.__dict__
    ):
        return t.__reduce_ex__(_PROTOCOL)
    storage = t.untyped_storage()
    key = (storage.data_ptr(), storage.nbytes())
    stored = _stored.get(key)
    if stored is None:
        flat = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),))
        stored = _stored[key] = _Stored(flat.numpy())
    return _tensor, (stored, t.storage_offset(), t.dtype, tuple(t.shape), tuple(t.stride()))


def _rebuild(reduced: tuple) -> Any:
    rebuild, args = reduced
    return rebuild(*args)


def register() -> None:
    """In a Ray actor: send tensors by :func:`reduce_tensor` (this process's serializer)."""
    import ray.util
    import torch

    ray.util.register_serializer(torch.Tensor, serializer=reduce_tensor, deserializer=_rebuild)


# -- in the training process --------------------------------------------------------------------

# reentrant: a _Pin may be collected while this thread holds it
_lock = fork_safe_lock(globals(), "_lock", reentrant=True)
_pinned = 0
_bound = 256 << 20  # until set_capacity


class _Pin:
    """Holds a storage's read-only arrays in the object store (which pin the object) and
    counts their bytes as pinned until the last tensor over them is gone."""

    __slots__ = ("chunks", "nbytes")

    def __init__(self, chunks: tuple, nbytes: int):
        self.chunks, self.nbytes = chunks, nbytes

    def __del__(self):
        global _pinned
        with _lock:
            _pinned -= self.nbytes


def _storage(*chunks: Any) -> Any:
    """The storage of the bytes an actor sent (``chunks``, see :data:`CHUNK`): over the
    object store's memory while pinned bytes stay within the bound, else a copy."""
    import numpy as np
    import torch

    global _pinned
    array = chunks[0] if len(chunks) == 1 else _joined(chunks)
    if array is None:  # not laid out back to back: one copy of them all
        return torch.from_numpy(np.concatenate(chunks)).untyped_storage()
    nbytes = array.nbytes
    if all(c.flags.writeable for c in chunks):  # bytes Ray handed over as this process's own
        return torch.from_numpy(array).untyped_storage()
    with _lock:
        pin = nbytes >= COPY_BELOW and _pinned + nbytes <= _bound
        if pin:
            _pinned += nbytes
    if not pin:
        return torch.from_numpy(array.copy()).untyped_storage()
    # Writable for torch (which warns on read-only arrays): the store maps its memory
    # writable, and this object is this process's alone.
    over = array_at(array.ctypes.data, (nbytes,), _Pin(chunks, nbytes))
    return torch.from_numpy(over).untyped_storage()


def _joined(chunks: tuple) -> Any:
    """One array over ``chunks`` where each begins where the one before ends (holding them
    all), else None."""
    start = end = chunks[0].ctypes.data
    for chunk in chunks:
        if chunk.ctypes.data != end:
            return None
        end += chunk.nbytes
    writable = all(c.flags.writeable for c in chunks)
    return array_at(start, (end - start,), chunks, writable=writable)


def _tensor(storage: Any, offset: int, dtype: Any, shape: tuple, stride: tuple) -> Any:
    import torch

    return torch.empty(0, dtype=dtype).set_(storage, offset, shape, stride)


def set_capacity(store_bytes: int, ranks_on_node: int | None = None) -> None:
    """Bound the bytes kept batches pin to :data:`PINNED_SHARE` of ``store_bytes`` (this
    node's object store) over the ranks on the node (``LOCAL_WORLD_SIZE``, as torchrun sets
    it, else 1)."""
    global _bound
    if ranks_on_node is None:
        ranks_on_node = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    _bound = int(store_bytes * PINNED_SHARE) // max(1, ranks_on_node)


def pinned_bytes() -> tuple[int, int]:
    """(bytes of the object store that batches held here pin now, the bound)."""
    with _lock:
        return _pinned, _bound
