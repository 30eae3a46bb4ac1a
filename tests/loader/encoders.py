"""Task encoders used by loader tests (importable from a fresh process)."""

import numpy as np
import torch

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
