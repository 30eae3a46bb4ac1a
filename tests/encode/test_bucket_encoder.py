"""VideoTaskEncoder per bucket: each batch is resized and cropped to its bucket's shape;
images are 1-frame clips."""

from __future__ import annotations

import numpy as np
import torch

from fpipe.encode.task_encoder import DefaultTaskEncoder
from fpipe.encode.video import VideoTransformConfig
from fpipe.encode.video_task import VideoTaskEncoder
from fpipe.samples import CaptioningSample, VideoTextSample


def test_for_bucket_sets_the_shape_of_videos_and_images():
    enc = VideoTaskEncoder(VideoTransformConfig(num_frames=4, height=16, width=16))
    video = torch.randint(0, 256, (12, 3, 30, 50), dtype=torch.uint8)
    image = torch.randint(0, 256, (3, 40, 30), dtype=torch.uint8)
    vs = VideoTextSample(__key__="v", video=video, caption="a video")
    im = CaptioningSample(__key__="i", image=image, caption="an image")

    wide = enc.for_bucket((5, 12, 20))
    assert wide is enc.for_bucket((5, 12, 20))  # one encoder per shape
    assert enc.for_bucket((4, 16, 16)) is enc
    out = wide.batch([wide.encode_sample(vs, np.random.default_rng(0)) for _ in range(2)])
    assert out.video.shape == (2, 3, 5, 12, 20) and out.video.dtype == torch.float32
    assert out.video.min() >= -1 and out.video.max() <= 1

    square = enc.for_bucket((1, 16, 16))
    x = square.encode_sample(im, np.random.default_rng(0))
    assert x.video.shape == (3, 1, 16, 16) and x.caption == "an image"
    # the image is resized (short side 30 -> 16) and center-cropped: values from the image
    expected = torch.nn.functional.interpolate(
        image[None].float(), size=(21, 16), mode="bilinear", antialias=True, align_corners=False
    )[0, :, 2:18, :]
    assert torch.allclose(x.video[:, 0], expected.clamp(0, 255) / 127.5 - 1, atol=1e-5)


def test_default_encoder_ignores_buckets():
    enc = DefaultTaskEncoder()
    assert enc.for_bucket((1, 8, 8)) is enc
