"""Video datasets end to end: prepare (metadata + keyframes in the index), get_train_dataset
with VideoTaskEncoder into [B, 3, T, H, W] batches, worker independence, exact resume, fast
seeks from stored keyframes, limits and corrupt files under the error policy.

Videos are tiny (32x24 px, 2-3.5 s at 12 fps) and written at test time by av_helpers.
"""

from __future__ import annotations

import csv
import itertools
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import fpipe
from fpipe.core.errors import BadSampleError, ConfigError
from fpipe.decode import DecodeLimits
from fpipe.decode.av.decoder import AVDecoder, probe_av
from fpipe.encode.video import VideoTransformConfig, video_transform
from fpipe.encode.video_task import VideoBatch, VideoTaskEncoder
from fpipe.storage import open_dataset, prepare_dataset
from tests.decode.av_helpers import frame_index, write_video
from tests.storage.helpers import write_tar

W, H, FPS, GOP = 32, 24, 12, 6
T, OUT = 4, 16
CFG = VideoTransformConfig(
    num_frames=T, height=OUT, width=OUT, stride=2, temporal="random", crop="random"
)


def _video(i: int) -> bytes:
    # 24..42 frames (2.0..3.5 s), a keyframe every 0.5 s
    return write_video(None, num_frames=24 + 6 * (i % 4), fps=FPS, width=W, height=H, gop=GOP)


@pytest.fixture(scope="module")
def videos() -> list[bytes]:
    return [_video(i) for i in range(4)]


@pytest.fixture(scope="module")
def shard_ds(tmp_path_factory, videos) -> Path:
    d = tmp_path_factory.mktemp("video_shards")
    for s in range(2):
        samples = [
            (f"{s}{j:03d}", {"mp4": videos[j], "txt": f"clip {s}-{j}".encode()}) for j in range(4)
        ]
        write_tar(d / f"shard-{s}.tar", samples)
    rep = prepare_dataset(
        d, fields={"video": "mp4", "caption": "txt"}, sample_type="CaptionedVideoSample"
    )
    assert rep.num_samples == 8 and not rep.problems
    return d


@pytest.fixture(scope="module")
def csv_ds(tmp_path_factory, videos) -> Path:
    d = tmp_path_factory.mktemp("opensora")
    media = d / "media"
    (media / "clips").mkdir(parents=True)
    table = d / "meta"
    table.mkdir()
    with open(table / "train.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "text", "num_frames", "height", "width"])
        for i in range(6):
            (media / "clips" / f"{i}.mp4").write_bytes(videos[i % 4])
            w.writerow([f"clips/{i}.mp4", f"a clip number {i}", 24 + 6 * (i % 4), H, W])
    rep = prepare_dataset(
        table / "train.csv",
        root=media,
        fields={"video": "mp4", "caption": "text"},
        sample_type="CaptionedVideoSample",
    )
    assert rep.num_samples == 6 and not rep.problems
    return table


def _media(csv_ds: Path) -> dict:
    """Opening options of the prepared CSV, whose media folder is beside the table's."""
    return {"media_root": csv_ds.parent / "media"}


def _build(path, **kw):
    kw.setdefault("task_encoder", VideoTaskEncoder(CFG))
    return fpipe.get_train_dataset(path, batch_size=2, max_samples_per_sequence=2, seed=11, **kw)


def _take(loader, n):
    return list(itertools.islice(loader, n))


def _check_batch(b: VideoBatch):
    assert isinstance(b, VideoBatch)
    assert b.video.shape == (2, 3, T, OUT, OUT) and b.video.dtype == torch.float32
    assert b.video.min() >= -1.0 and b.video.max() <= 1.0
    assert all(isinstance(c, str) and c for c in b.caption)
    # the decoded frames are the ones the temporal sampling chose (pixels encode the index)
    pixels = ((b.video + 1) * 127.5).round().clamp(0, 255).to(torch.uint8)
    for j in range(2):
        idx = b.frame_indices[j].tolist()
        assert [frame_index(pixels[j, :, t]) for t in range(T)] == idx
        assert all(q - p == CFG.stride for p, q in itertools.pairwise(idx))


@pytest.mark.parametrize("which", ["shards", "csv"])
def test_batches_workers_and_exact_resume(which, shard_ds, csv_ds):
    path = shard_ds if which == "shards" else csv_ds
    opened = {} if which == "shards" else {"open_kwargs": _media(csv_ds)}
    n, k = 9, 4  # more than one epoch (4 or 3 batches per epoch)

    def build(p):  # the full shuffle: slices of 2, then a window of 3 (across epochs)
        return _build(p, shuffle_buffer_size=3, **opened)

    ref = _take(fpipe.get_loader(build(path), num_workers=0), n)
    for b in ref:
        _check_batch(b)
    starts = {b.frame_indices[j, 0].item() for b in ref for j in range(2)}
    assert len(starts) > 1  # random temporal starts really vary
    assert len({b.__key__[0] for b in ref}) > 1

    two = _take(fpipe.get_loader(build(path), num_workers=2), n)
    for a, b in zip(ref, two):
        assert torch.equal(a.video, b.video) and a.caption == b.caption

    loader = fpipe.get_loader(build(path), num_workers=2)
    _take(loader, k)
    snap = loader.snapshot()
    for workers in (0, 2):
        fresh = fpipe.get_loader(build(path), num_workers=workers)
        fresh.restore(snap)
        rest = _take(fresh, n - k)
        for a, b in zip(ref[k:], rest):
            assert torch.equal(a.video, b.video)
            assert torch.equal(a.frame_indices, b.frame_indices)
            assert a.__key__ == b.__key__ and a.caption == b.caption


def test_index_stores_metadata_and_keyframes(shard_ds, csv_ds, videos):
    ds = open_dataset(shard_ds)
    for name in (
        "video.duration_s",
        "video.fps",
        "video.frames",
        "video.width",
        "video.height",
        "video.audio_rate",
        "width",
    ):
        assert name in ds.column_names
    assert ds.column("video.duration_s").dtype == np.float64
    assert (shard_ds / ".fpipe" / "av" / "video.keyframes.npy").exists()
    assert (shard_ds / ".fpipe" / "av" / "video.keyframes.offsets.npy").exists()
    for i in range(len(ds)):
        j = int(ds.key(i)[-3:])
        probed = probe_av(videos[j])
        stored = ds.av_metadata(i)["mp4"]
        assert stored.keyframes_s == probed.keyframes_s
        assert stored.keyframe_frames == probed.keyframe_frames != ()
        assert stored.video_num_frames == probed.video_num_frames == 24 + 6 * j
        assert ds.column("video.frames")[i] == 24 + 6 * j
        assert math.isclose(stored.duration_s, probed.duration_s)
        assert (stored.width, stored.height, stored.video_fps) == (W, H, FPS)
        assert stored.audio_sample_rate is None and ds.column("video.audio_rate")[i] == -1
    with pytest.raises(ConfigError, match=r"the media folder '\.\./media' leads out"):
        open_dataset(csv_ds)  # a media folder outside the table's: only where the user says
    t = open_dataset(csv_ds, **_media(csv_ds))
    assert "path.keyframes" not in t.column_names
    meta = t.av_metadata(1)
    assert set(meta) == {"path", "mp4"} and meta["mp4"].video_num_frames == 30
    assert meta["mp4"].keyframe_frames == probe_av(videos[1]).keyframe_frames
    assert t.column("path.frames").tolist() == t.column("num_frames").tolist()


def test_index_without_keyframe_frame_numbers(tmp_path, shard_ds, videos):
    """An index written before keyframe frame numbers were stored still loads; frame-accurate
    requests then probe the file once."""
    old = tmp_path / "old"
    shutil.copytree(shard_ds, old)
    (old / ".fpipe" / "av" / "video.keyframe_frames.npy").unlink()
    ds = open_dataset(old)
    stored = ds.av_metadata(0)["mp4"]
    assert stored.keyframe_frames == () and stored.keyframes_s
    j = int(ds.key(0)[-3:])
    dec = AVDecoder(videos[j], metadata=stored)
    out = dec.get_clips([(13, 15)], video_unit="frames")
    assert [frame_index(f) for f in out.video_clips[0]] == [13, 14]
    assert dec.metadata.keyframe_frames == probe_av(videos[j]).keyframe_frames


def test_late_clip_decodes_from_stored_keyframe(tmp_path, monkeypatch):
    n = 96  # 8 s at 12 fps, keyframe every 0.5 s
    write_tar(
        tmp_path / "long.tar",
        [
            (
                "000",
                {
                    "mp4": write_video(None, num_frames=n, fps=FPS, width=W, height=H, gop=GOP),
                    "txt": b"long",
                },
            ),
        ],
    )
    prepare_dataset(
        tmp_path, fields={"video": "mp4", "caption": "txt"}, sample_type="CaptionedVideoSample"
    )
    ds = fpipe.get_train_dataset(tmp_path, batch_size=1, task_encoder=VideoTaskEncoder(CFG))

    def no_probe(*a, **k):
        raise AssertionError("probed at load time")

    monkeypatch.setattr("fpipe.decode.av.probe.probe_container", no_probe)
    sample, _ = ds.materializer.sample(0, 0, 0, 123)
    dec = sample.video
    assert isinstance(dec, AVDecoder) and dec.metadata.keyframes_s[-1] == pytest.approx(7.5)
    out = dec.get_clips([(88, 92)], video_unit="frames")
    assert [frame_index(f) for f in out.video_clips[0]] == [88, 89, 90, 91]
    assert dec.frames_decoded <= GOP + 4 + 1  # from the keyframe at frame 84, not from 0
    # the encoder decodes its clip the same way
    enc = VideoTaskEncoder(
        VideoTransformConfig(num_frames=2, height=OUT, width=OUT, temporal="random")
    )
    sample, rng = ds.materializer.sample(0, 0, 0, 5)
    x = enc.encode_sample(sample, rng)
    assert sample.video.frames_decoded <= GOP + 2 + 1
    assert x.video.shape == (3, 2, OUT, OUT)


def test_limits_follow_error_policy(shard_ds):
    limits = DecodeLimits(max_av_duration_s=2.6)  # the 3.0 and 3.5 s videos fail
    enc = VideoTaskEncoder(CFG, decode_limits=limits)
    with pytest.raises(BadSampleError) as e:
        _take(fpipe.get_loader(_build(shard_ds, task_encoder=enc), num_workers=0), 4)
    assert "max_av_duration_s" in str(e.value) and e.value.key.startswith("shard-")
    assert e.value.key in str(e.value) and str(shard_ds) in str(e.value)

    # the loader's limits reach the decoders in the workers (the encoder has none of its own)
    ds = _build(shard_ds, decode_limits=limits, error_policy="skip", num_epochs=1)
    loader = fpipe.get_loader(ds, num_workers=2)
    seen = list(loader)  # one epoch: 8 samples, 4 over the limit
    assert (loader.stats().skipped, loader.stats().samples) == (4, 4)
    for b in seen:
        assert b.video.shape[1:] == (3, T, OUT, OUT)
    durations = open_dataset(shard_ds).column("video.duration_s")
    assert sorted(durations.tolist()) == [2.0, 2.0, 2.5, 2.5, 3.0, 3.0, 3.5, 3.5]


def test_corrupt_video(tmp_path, videos):
    bad = videos[0][: len(videos[0]) // 3]  # truncated: moov atom missing
    samples = [
        ("000", {"mp4": videos[0], "txt": b"ok"}),
        ("001", {"mp4": b"not a video at all", "txt": b"garbage"}),
        ("002", {"mp4": bad, "txt": b"truncated"}),
        ("003", {"mp4": videos[1], "txt": b"ok too"}),
    ]
    write_tar(tmp_path / "shard-0.tar", samples)
    fields = {"video": "mp4", "caption": "txt"}
    # prepare probes the files: corrupt ones are left out and reported with their key
    rep = prepare_dataset(tmp_path, fields=fields, sample_type="CaptionedVideoSample")
    assert rep.num_samples == 2
    assert sorted(p.key for p in rep.problems) == ["shard-0/001", "shard-0/002"]
    assert all("mp4" in p.reason for p in rep.problems)

    # indexed without probing: the loader meets them; raise names file and key, skip counts
    prepare_dataset(tmp_path, fields=fields, sample_type="CaptionedVideoSample", probe_av=False)
    assert "video.frames" not in open_dataset(tmp_path).column_names
    with pytest.raises(BadSampleError) as e:
        _take(fpipe.get_loader(_build(tmp_path), num_workers=0), 2)
    assert e.value.key in ("shard-0/001", "shard-0/002") and e.value.key in str(e.value)
    assert str(tmp_path) in str(e.value)
    loader = fpipe.get_loader(_build(tmp_path, error_policy="skip", num_epochs=1), num_workers=2)
    out = list(loader)  # one epoch: 4 samples, 2 bad
    assert loader.stats().skipped == 2 and loader.stats().samples == 2
    assert sorted(c for b in out for c in b.caption) == ["ok", "ok too"]


def test_corrupt_row_of_opensora_csv(tmp_path, videos):
    (tmp_path / "good.mp4").write_bytes(videos[0])
    (tmp_path / "bad.mp4").write_bytes(b"\x00" * 100)
    (tmp_path / "t.csv").write_text(
        "path,text,num_frames,height,width\ngood.mp4,fine,24,24,32\nbad.mp4,broken,24,24,32\n"
    )
    rep = prepare_dataset(
        tmp_path / "t.csv",
        fields={"video": "mp4", "caption": "text"},
        sample_type="CaptionedVideoSample",
    )
    assert rep.num_samples == 1
    (p,) = rep.problems
    assert p.key == "t/1" and "bad.mp4" in p.path


def test_unprepared_table_and_tensor_input(tmp_path, videos):
    (tmp_path / "a.mp4").write_bytes(videos[2])
    (tmp_path / "b.mp4").write_bytes(videos[3])
    (tmp_path / "t.csv").write_text(
        "path,text,num_frames,height,width\na.mp4,first,36,24,32\nb.mp4,second,42,24,32\n"
    )
    ds = fpipe.get_train_dataset(
        tmp_path / "t.csv",
        batch_size=2,
        seed=1,
        task_encoder=VideoTaskEncoder(CFG),
        sample_type="CaptionedVideoSample",
        field_map={"video": "mp4", "caption": "text"},
    )
    (b,) = _take(fpipe.get_loader(ds, num_workers=0), 1)
    _check_batch(b)
    # decoded frames in the sample give the same tensor as the lazy decoder
    enc = VideoTaskEncoder(CFG)
    sample, rng = ds.materializer.sample(0, 0, 0, 9)
    lazy = enc.encode_sample(sample, rng)
    sample2, rng2 = ds.materializer.sample(0, 0, 0, 9)
    frames = sample2.video.get_video().video_clips[0]
    eager = enc.encode_sample(sample2.replace(video=frames), rng2)
    assert torch.equal(lazy.video, eager.video)
    assert torch.equal(lazy.frame_indices, eager.frame_indices)
    _, rng3 = ds.materializer.sample(0, 0, 0, 9)
    assert torch.equal(lazy.video, video_transform(CFG, frames, rng3))


def test_table_media_column_as_field(csv_ds):
    """A prepared table's media column (``path``) works as the video field: the stored
    metadata marks it as a video."""
    ds = _build(csv_ds, field_map={"video": "path", "caption": "text"}, open_kwargs=_media(csv_ds))
    sample, _ = ds.materializer.sample(0, 2, 0, 1)
    assert isinstance(sample.video, AVDecoder)
    assert sample.video.metadata.video_num_frames == 36  # stored, not probed
    (b,) = _take(fpipe.get_loader(ds, num_workers=0), 1)
    _check_batch(b)


def test_crude_dataset_and_parts_merge(tmp_path, videos):
    for s in range(3):
        write_tar(
            tmp_path / f"shard-{s}.tar",
            [(f"{s}{j}", {"mp4": videos[(s + j) % 4], "txt": b"x"}) for j in range(2)],
        )
    prepare_dataset(tmp_path)  # crude: one field per extension
    ds = open_dataset(tmp_path)
    whole = [ds.av_metadata(i) for i in range(len(ds))]
    assert all(set(m) == {"mp4"} for m in whole)
    assert ds.column("mp4.frames").tolist() == [m["mp4"].video_num_frames for m in whole]
    for i in range(2):
        prepare_dataset(tmp_path, part=(i, 2))
    prepare_dataset(tmp_path, merge=True)
    merged = open_dataset(tmp_path)
    assert [merged.av_metadata(i) for i in range(len(merged))] == whole


OPENSORA_TENSORS = ["video", "num_frames", "height", "width", "ar", "fps"]


def test_whole_clip_sampling_and_opensora_dict_batches(shard_ds):
    """temporal="whole" spreads T frames over each whole clip; batch_format="opensora" gives the
    dict OpenSora's training loop reads, with the same tensors as the default VideoBatch."""
    cfg = VideoTransformConfig(num_frames=T, height=OUT, width=OUT, temporal="whole")
    enc = VideoTaskEncoder(cfg, batch_format="opensora")
    dicts = list(fpipe.get_loader(_build(shard_ds, task_encoder=enc, num_epochs=1)))
    plain_ds = _build(shard_ds, task_encoder=VideoTaskEncoder(cfg), num_epochs=1)
    plain = list(fpipe.get_loader(plain_ds))
    assert len(dicts) == len(plain) == 4
    for d, b in zip(dicts, plain):
        assert isinstance(d, dict) and isinstance(b, VideoBatch)
        assert list(d) == [*OPENSORA_TENSORS[:1], "text", *OPENSORA_TENSORS[1:],
                           "__key__", "__restore_key__", "__subflavors__"]  # fmt: skip
        # only OpenSora's keys are tensors (its loop hands every tensor to the model)
        assert [k for k, v in d.items() if isinstance(v, torch.Tensor)] == OPENSORA_TENSORS
        assert torch.equal(d["video"], b.video) and d["text"] == b.caption
        assert d["__key__"] == b.__key__ and d["__restore_key__"] == b.__restore_key__
        assert d["num_frames"].tolist() == [T, T] and d["num_frames"].dtype == torch.int64
        assert d["height"].tolist() == d["width"].tolist() == [OUT, OUT]
        assert d["ar"].tolist() == [1.0, 1.0] and d["ar"].dtype == torch.float64
        pixels = ((d["video"] + 1) * 127.5).round().clamp(0, 255).to(torch.uint8)
        for j, key in enumerate(d["__key__"]):
            n = 24 + 6 * int(key[-3:])  # the clip's frames
            want = [(n - 1) * i // (T - 1) for i in range(T)]  # first to last frame
            assert [frame_index(pixels[j, :, t]) for t in range(T)] == want
            assert b.frame_indices[j].tolist() == want
            assert d["fps"][j].item() == FPS // (n / T)  # OpenSora's fps // stride
    # the fixed stride: fps // stride; an image is a 1-frame clip at OpenSora's 120 fps
    enc = VideoTaskEncoder(CFG, batch_format="opensora")
    sample, rng = _build(shard_ds, task_encoder=enc).materializer.sample(0, 0, 0, 1)
    assert enc.encode_sample(sample, rng).fps == FPS // CFG.stride
    image = VideoTaskEncoder(CFG).encode_sample(
        type(sample)(video=torch.zeros(3, 20, 20, dtype=torch.uint8), caption="i"), rng
    )
    assert image.fps == 120.0 and image.video.shape == (3, T, OUT, OUT)


def test_opensora_options_are_checked_and_kept_by_buckets():
    with pytest.raises(ConfigError, match="batch_format.*'opensora'"):
        VideoTaskEncoder(CFG, batch_format="dict")
    with pytest.raises(ConfigError, match="stride=2 would be ignored"):
        VideoTransformConfig(num_frames=T, height=OUT, width=OUT, stride=2, temporal="whole")
    from fpipe.encode.audio import AudioConfig

    enc = VideoTaskEncoder(CFG, batch_format="opensora", audio=AudioConfig(sample_rate=8000))
    bucket = enc.for_bucket((1, 8, 8))
    assert bucket.batch_format == "opensora" and bucket.audio == enc.audio
    assert bucket.config.num_frames == 1 and bucket.config.temporal == CFG.temporal
