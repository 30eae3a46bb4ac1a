"""Task encoders used by loader tests (importable from a fresh process)."""

import dataclasses
import os
import signal
import sys
import threading
import time

import numpy as np
import torch
import torch.utils.data

from fpipe.encode import DefaultTaskEncoder


class RandomCropEncoder(DefaultTaskEncoder):
    """Random 8x8 crop and a random noise vector, both from the sample's rng."""

    def encode_sample(self, sample, rng: np.random.Generator):
        img = sample.image
        h, w = img.shape[-2:]
        y = int(rng.integers(0, h - 8 + 1))
        x = int(rng.integers(0, w - 8 + 1))
        noise = torch.from_numpy(rng.standard_normal(4))
        return sample.replace(image=img[:, y : y + 8, x : x + 8], caption=(sample.caption, noise))

    def batch(self, samples):
        out = super().batch(samples)
        return {
            "keys": out.__key__,
            "image": out.image,
            "caption": [c for c, _ in out.caption],
            "noise": torch.stack([n for _, n in out.caption]),
        }


def _in_worker() -> bool:
    return (
        torch.utils.data.get_worker_info() is not None
        or threading.current_thread().name.startswith("fpipe-materialize")
        or _in_ray_actor()
    )


def _in_ray_actor() -> bool:
    ray = sys.modules.get("ray")
    return bool(ray and ray.is_initialized() and ray.get_runtime_context().get_actor_id())


class FaultEncoder(RandomCropEncoder):
    """RandomCropEncoder that, in a DataLoader worker (process or thread) and while the file
    ``trigger`` exists, raises, kills its own process or hangs on the sample ``key`` (``mode``:
    until the trigger is removed, so an abandoned thread ends); otherwise its output is
    RandomCropEncoder's, so a resume after the fault can be compared with it.

    More modes: ``"oom"`` sets an address-space limit on its process (``RLIMIT_AS``) and
    allocates past it, as a decode of a huge image would (a MemoryError); ``"memory"`` raises
    MemoryError (for threads, whose process must keep its limits); ``"kill-batch"`` kills its
    process in ``batch`` (no sample to name). A mode ending in ``"-once"`` faults the first
    time only (``trigger + ".fired"`` marks it), so materializing again succeeds."""

    def __init__(self, mode: str, trigger: str, key: str):
        self.mode, self.trigger, self.key = mode, str(trigger), key

    def _fires(self) -> bool:
        if not (_in_worker() and os.path.exists(self.trigger)):
            return False
        if self.mode.endswith("-once"):
            fired = self.trigger + ".fired"
            if os.path.exists(fired):
                return False
            with open(fired, "w") as f:
                f.write("fired")
        return True

    def encode_sample(self, sample, rng):
        mode = self.mode.removesuffix("-once")
        if sample.__key__ == self.key and mode != "kill-batch" and self._fires():
            if mode == "raise":
                raise ValueError(f"hook failed on purpose on {sample.__key__}")
            if mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if mode == "oom":
                _allocate_past_a_limit()
            if mode == "memory":
                raise MemoryError("no memory on purpose")
            while os.path.exists(self.trigger):  # "hang"
                time.sleep(0.05)
        return super().encode_sample(sample, rng)

    def batch(self, samples):
        mine = any(s.__key__ == self.key for s in samples)
        if self.mode.startswith("kill-batch") and mine and self._fires():
            os.kill(os.getpid(), signal.SIGKILL)
        return super().batch(samples)


def _allocate_past_a_limit() -> None:
    """Limit this process's address space to 64 MiB over what it uses, then decode a huge
    image into it (numpy raises MemoryError, as a decoder's allocation would fail)."""
    import resource

    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize"))
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm + (64 << 20), hard))
    np.zeros((16384, 16384, 3), dtype=np.uint8)  # 768 MiB of pixels


@dataclasses.dataclass
class BatchWithHook:
    """A batch type defined at module level; a lambda in ``post`` makes it unpicklable."""

    keys: list
    post: object = None


class UnpicklableBatchEncoder(RandomCropEncoder):
    """Batches that cannot be pickled back from a worker process: an instance of a class defined
    inside ``batch`` (``kind="local"``), or a module-level dataclass holding a lambda
    (``kind="lambda"``)."""

    def __init__(self, kind: str):
        self.kind = kind

    def batch(self, samples):
        keys = [s.__key__ for s in samples]
        if self.kind == "lambda":
            return BatchWithHook(keys, post=lambda x: x)

        @dataclasses.dataclass
        class LocalBatch:
            keys: list

        return LocalBatch(keys)


class JitterEncoder(RandomCropEncoder):
    """A worker sleeps 0-``max_s`` seconds (drawn from the OS, not the sample's rng) before it
    hands a batch back, so batches finish out of plan order; the batch says when it was done
    (``"built_at"``). What training sees is otherwise :class:`RandomCropEncoder`'s."""

    def __init__(self, max_s: float):
        self.max_s = max_s

    def batch(self, samples):
        out = super().batch(samples)
        time.sleep(self.max_s * int.from_bytes(os.urandom(2), "little") / 65535)
        out["built_at"] = time.time()
        return out
