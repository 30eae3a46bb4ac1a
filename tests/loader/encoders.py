"""Task encoders used by loader tests (importable from a fresh process)."""

import os
import signal
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


class FaultEncoder(RandomCropEncoder):
    """RandomCropEncoder that, in a DataLoader worker (process or thread) and while the file
    ``trigger`` exists, raises, kills its own process or hangs on the sample ``key`` (``mode``:
    until the trigger is removed, so an abandoned thread ends); otherwise its output is
    RandomCropEncoder's, so a resume after the fault can be compared with it."""

    def __init__(self, mode: str, trigger: str, key: str):
        self.mode, self.trigger, self.key = mode, str(trigger), key

    def encode_sample(self, sample, rng):
        in_worker = torch.utils.data.get_worker_info() is not None or (
            threading.current_thread().name.startswith("fpipe-materialize")
        )
        if in_worker and sample.__key__ == self.key and os.path.exists(self.trigger):
            if self.mode == "raise":
                raise ValueError(f"hook failed on purpose on {sample.__key__}")
            if self.mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            while os.path.exists(self.trigger):  # "hang"
                time.sleep(0.05)
        return super().encode_sample(sample, rng)
