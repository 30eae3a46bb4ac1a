"""The prepare-time keyframe builder: sparse storage, the same index as a dense one."""

from __future__ import annotations

import tracemalloc

import numpy as np

from fpipe.storage.read.av_meta import KEYFRAME_DTYPE, KeyframeBuilder


def _dense(per_sample: list[dict[str, np.ndarray]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Reference: every field's keyframe list for every sample (empty where it lacks one)."""
    fields = list(dict.fromkeys(f for d in per_sample for f in d))
    out = {}
    for f in fields:
        arrays = [np.asarray(d.get(f, np.zeros(0)), np.float64) for d in per_sample]
        off = np.concatenate([[0], np.cumsum([len(a) for a in arrays])]).astype(np.int64)
        out[f] = (np.concatenate(arrays), off)
    return out


def test_sparse_fields_give_the_dense_index():
    rng = np.random.default_rng(0)
    per_sample = []
    for _ in range(200):  # fields first seen late, fields in few samples, empty lists
        d = {}
        for f in ("mp4", "wav", "flac", "mkv"):
            if rng.random() < {"mp4": 0.9, "wav": 0.3, "flac": 0.02, "mkv": 0.1}[f]:
                d[f] = np.sort(rng.random(int(rng.integers(0, 5))) * 10)
        per_sample.append(d)
    b = KeyframeBuilder()
    for d in per_sample:
        b.add(d)
    built, dense = b.build(), _dense(per_sample)
    assert list(built) == list(dense)
    for f, (values, offsets) in built.items():
        assert values.dtype == KEYFRAME_DTYPE and (values["frame"] == -1).all()
        np.testing.assert_array_equal(values["time_s"], dense[f][0])
        np.testing.assert_array_equal(offsets, dense[f][1])


def test_memory_grows_with_lists_added_not_samples_times_fields():
    # 20 fields, each in one of the first 20 samples, then 5,000 samples without any: a dense
    # builder holds 20 x 5,020 lists (~12 MB), this one 20
    b = KeyframeBuilder()
    tracemalloc.start()
    try:
        for i in range(5_020):
            b.add({f"ext{i}": np.array([0.0, 1.0])} if i < 20 else {})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, peak
    values, offsets = b.build()["ext3"]
    assert len(offsets) == 5_021 and len(values) == 2
    assert offsets[3] == 0 and offsets[4] == 2 and offsets[-1] == 2
