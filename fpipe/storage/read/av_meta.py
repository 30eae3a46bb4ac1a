"""Per-video stream metadata in the index: scalar columns plus keyframe times, all mmappable.

``fpipe prepare`` probes every audio/video member (``mp4``, ``webm``, ``mkv``, ``wav``...) of a
field (or every audio/video media column of a table) with :func:`fpipe.decode.av.probe_av`:
one demux pass, no frame decoded. It stores, for field ``F``:

- metadata columns ``F.duration_s``, ``F.fps``, ``F.video_start_s``, ``F.video_duration_s``,
  ``F.audio_start_s``, ``F.audio_duration_s`` (float64, NaN where absent) and ``F.frames``,
  ``F.width``, ``F.height``, ``F.audio_rate``, ``F.audio_channels`` (int64, -1 where absent),
  usable by plan stages like any column (``filter_refs("video.duration_s", ">=", 2.0)``);
- the keyframes, ragged, as three arrays: ``av/F.keyframes.npy`` (float64, all samples'
  keyframe times in seconds, concatenated), ``av/F.keyframe_frames.npy`` (int64, the frame
  number of each of those keyframes in presentation order, for frame-accurate seeks) and
  ``av/F.keyframes.offsets.npy`` (int64, ``n + 1``): sample ``i`` has
  ``values[off[i]:off[i + 1]]`` of both;
- ``info.yaml`` gets ``av: {fields: {F: [member extensions of F, in lookup order]}}``.

At load time :class:`AVIndex` rebuilds one :class:`fpipe.decode.av.AVMetadata` per sample from
these arrays (a few memory-mapped reads), so the lazy decoder seeks to keyframes without
probing the file. A file that cannot be probed is left out at prepare and reported. An index
written before keyframe frame numbers were stored has no ``keyframe_frames`` file: its metadata
gets none, and the decoder probes the file once when a frame-accurate seek needs them.

In memory, one sample's keyframes are a structured array of :data:`KEYFRAME_DTYPE` (time and
frame number per keyframe), passed through prepare unchanged until :func:`keyframe_files`
splits it into the files above.

This module does not import PyAV at import time (``fpipe prepare`` of image datasets never
loads it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fpipe.decode.extensions import ext_kind

if TYPE_CHECKING:
    from fpipe.storage.read.record import ArrayStore

__all__ = [
    "AVIndex",
    "AV_DIR",
    "FLOAT_STATS",
    "INT_STATS",
    "KEYFRAME_DTYPE",
    "KeyframeBuilder",
    "concat_keyframes",
    "is_av_ext",
    "is_float_column",
    "keyframe_files",
    "probe_stats",
    "read_keyframes",
]

#: folder of the keyframe arrays inside an index folder.
AV_DIR = "av"
#: float64 statistics (NaN where absent): column ``<field>.<stat>``.
FLOAT_STATS = (
    "duration_s",
    "fps",
    "video_start_s",
    "video_duration_s",
    "audio_start_s",
    "audio_duration_s",
)
#: int64 statistics (-1 where absent): column ``<field>.<stat>``.
INT_STATS = ("frames", "width", "height", "audio_rate", "audio_channels")
#: one keyframe: its presentation time (seconds) and its frame number in presentation order.
KEYFRAME_DTYPE = np.dtype([("time_s", "<f8"), ("frame", "<i8")])


def is_av_ext(ext: str) -> bool:
    """True for member extensions decoded as audio/video (last part, ``.gz`` ignored)."""
    return ext_kind(ext) == "av"


def is_float_column(name: str) -> bool:
    """Whether a column named ``<field>.<stat>`` holds a float statistic of this module."""
    return "." in name and name.rsplit(".", 1)[1] in FLOAT_STATS


def probe_stats(data: Any, field: str, *, path: str = "", key: str = "") -> tuple[dict, np.ndarray]:
    """Probe one file (bytes or path): ``({"<field>.<stat>": value}, keyframes)``, the
    keyframes as a :data:`KEYFRAME_DTYPE` array.

    Raises:
      BadSampleError: the file cannot be opened or demuxed (see :func:`probe_av`).
    """
    from fpipe.decode.av.decoder import probe_av  # lazy: PyAV is loaded only for AV datasets

    m = probe_av(data, path=path, key=key)
    values = {
        "duration_s": m.duration_s,
        "fps": m.video_fps,
        "video_start_s": m.video_start_s,
        "video_duration_s": m.video_duration_s,
        "audio_start_s": m.audio_start_s,
        "audio_duration_s": m.audio_duration_s,
        "frames": m.video_num_frames,
        "width": m.width,
        "height": m.height,
        "audio_rate": m.audio_sample_rate,
        "audio_channels": m.audio_channels,
    }
    row = {}
    for stat, v in values.items():
        if stat in FLOAT_STATS:
            row[f"{field}.{stat}"] = math.nan if v is None else float(v)
        else:
            row[f"{field}.{stat}"] = -1 if v is None else int(v)
    keys = np.zeros(len(m.keyframes_s), KEYFRAME_DTYPE)
    keys["time_s"] = m.keyframes_s
    keys["frame"] = m.keyframe_frames or -1
    return row, keys


def _keys(arr: Any) -> np.ndarray:
    """One sample's keyframes as a :data:`KEYFRAME_DTYPE` array (plain times: frame -1)."""
    arr = np.asarray(arr)
    if arr.dtype == KEYFRAME_DTYPE:
        return arr
    out = np.zeros(len(arr), KEYFRAME_DTYPE)
    out["time_s"] = arr
    out["frame"] = -1
    return out


class KeyframeBuilder:
    """Collects per-sample keyframe arrays of each field, in sample order.

    Only the samples that have a field are stored, with their index: memory grows with the
    keyframe lists added, not with samples x fields (a dataset with many audio/video
    extensions and no field map has many fields, each in few samples).
    """

    def __init__(self) -> None:
        self._n = 0
        self._fields: dict[str, tuple[list[int], list[np.ndarray]]] = {}

    def add(self, per_field: Mapping[str, np.ndarray]) -> None:
        """Keyframes of the next sample (fields it lacks get none)."""
        for f, arr in per_field.items():
            samples, arrays = self._fields.setdefault(f, ([], []))
            samples.append(self._n)
            arrays.append(_keys(arr))
        self._n += 1

    def build(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """``{field: (values, offsets)}``: ``offsets`` has one entry per sample added, plus one."""
        out = {}
        for f, (samples, arrays) in self._fields.items():
            counts = np.zeros(self._n, np.int64)
            counts[samples] = [len(a) for a in arrays]
            off = np.zeros(self._n + 1, np.int64)
            np.cumsum(counts, out=off[1:])
            out[f] = (np.concatenate(arrays), off)
        return out


def concat_keyframes(
    parts: list[tuple[int, Mapping[str, tuple[np.ndarray, np.ndarray]]]],
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Concatenate ``(num_samples, {field: (values, offsets)})`` parts in order; a part
    without a field gets no keyframes for its samples."""
    names = list(dict.fromkeys(f for _, d in parts for f in d))
    out = {}
    for f in names:
        vals, offs, base = [], [np.zeros(1, np.int64)], 0
        for n, d in parts:
            if f in d:
                v, o = d[f]
                vals.append(_keys(v))
                offs.append(np.asarray(o[1:], np.int64) - int(o[0]) + base)
                base += int(o[-1] - o[0])
            else:
                offs.append(np.full(n, base, np.int64))
        out[f] = (
            np.concatenate(vals) if vals else np.zeros(0, KEYFRAME_DTYPE),
            np.concatenate(offs),
        )
    return out


def keyframe_files(kf: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
    """Relative file names -> arrays, to write into an index folder."""
    files = {}
    for f, (vals, off) in kf.items():
        keys = _keys(vals)
        files[f"{AV_DIR}/{f}.keyframes.npy"] = np.ascontiguousarray(keys["time_s"])
        files[f"{AV_DIR}/{f}.keyframe_frames.npy"] = np.ascontiguousarray(keys["frame"])
        files[f"{AV_DIR}/{f}.keyframes.offsets.npy"] = np.asarray(off, np.int64)
    return files


def write_keyframes(index_dir: str | Path, kf: Mapping[str, tuple[np.ndarray, np.ndarray]]) -> None:
    """Write the keyframe arrays into an existing index folder."""
    d = Path(index_dir)
    for rel, arr in keyframe_files(kf).items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        np.save(d / rel, arr, allow_pickle=False)


def read_keyframes(
    index_dir: str | Path, fields: Mapping[str, Any] | None
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Load the keyframe arrays of ``fields`` from an index folder (into memory), as
    ``{field: (KEYFRAME_DTYPE values, offsets)}``; frame numbers are -1 in an index written
    before they were stored."""
    from fpipe.storage.read.tar.index import load_array

    d = Path(index_dir)
    out = {}
    for f in fields or {}:
        keys = _keys(load_array(d / AV_DIR / f"{f}.keyframes.npy", mmap=False))
        frames = d / AV_DIR / f"{f}.keyframe_frames.npy"
        if frames.exists():
            keys["frame"] = load_array(frames, mmap=False)
        out[f] = (keys, load_array(d / AV_DIR / f"{f}.keyframes.offsets.npy", mmap=False))
    return out


class AVIndex:
    """Rebuilds :class:`fpipe.decode.av.AVMetadata` of a sample from the stored arrays.

    Args:
      fields: ``info["av"]["fields"]``: field -> member extensions.
      arrays: the dataset's arrays by relative path (memory-mapped, cached).
      column: the dataset's column by name (``Dataset.column``: whatever the index layout);
        None: ``columns/<name>.npy`` of ``arrays``.
    """

    def __init__(
        self,
        fields: Mapping[str, list[str]],
        arrays: ArrayStore,
        column: Callable[[str], Any] | None = None,
    ):
        self.fields = {str(f): list(e) for f, e in fields.items()}
        self._arrays = arrays
        self._column = column or (lambda name: arrays(f"columns/{name}.npy"))
        self._no_frames: set[str] = set()  # fields of an index without keyframe frame numbers

    def _keyframe_frames(self, field: str, lo: int, hi: int) -> tuple[int, ...]:
        if field not in self._no_frames:
            frames = self._arrays.optional(f"{AV_DIR}/{field}.keyframe_frames.npy")
            if frames is None:
                self._no_frames.add(field)
            else:
                frames = frames[lo:hi]
                if len(frames) == hi - lo and (hi == lo or int(frames.min()) >= 0):
                    return tuple(int(k) for k in frames)
        return ()

    def metadata(self, field: str, i: int) -> Any:
        """The ``AVMetadata`` of field ``field`` of sample ``i``, or None if it has none."""
        from fpipe.decode.av.records import AVMetadata  # no PyAV needed to read the index

        col, arrays = self._column, self._arrays
        dur = float(col(f"{field}.duration_s")[i])
        if math.isnan(dur):
            return None
        f = {s: float(col(f"{field}.{s}")[i]) for s in FLOAT_STATS}
        n = {s: int(col(f"{field}.{s}")[i]) for s in INT_STATS}
        off = arrays(f"{AV_DIR}/{field}.keyframes.offsets.npy")
        lo, hi = int(off[i]), int(off[i + 1])
        keys = arrays(f"{AV_DIR}/{field}.keyframes.npy")[lo:hi]

        def fl(s):
            return None if math.isnan(f[s]) else f[s]

        def it(s):
            return None if n[s] < 0 else n[s]

        return AVMetadata(
            duration_s=dur,
            video_start_s=fl("video_start_s"),
            video_duration_s=fl("video_duration_s"),
            video_fps=fl("fps"),
            video_num_frames=it("frames"),
            width=it("width"),
            height=it("height"),
            keyframes_s=tuple(float(k) for k in keys),
            keyframe_frames=self._keyframe_frames(field, lo, hi),
            audio_sample_rate=it("audio_rate"),
            audio_channels=it("audio_channels"),
            audio_start_s=fl("audio_start_s"),
            audio_duration_s=fl("audio_duration_s"),
        )
