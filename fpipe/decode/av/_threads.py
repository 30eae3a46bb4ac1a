"""How many FFmpeg threads decode a video stream: ``codec_threads`` of ``AVDecoder.get_clips``.

FFmpeg's frame threading decodes several frames at once on separate cores and returns the very
frames single-threaded decoding returns (the codecs' frame threading is bit-exact by design; the
tests check it on fpipe's clips). It shortens a decode only when cores would otherwise idle
(fewer DataLoader workers than cores); it always costs CPU (about 30% more per sample with two
threads, ``bench/video_encode.py``), so when every core already has a worker the threads only
add overhead, and ``"auto"`` uses them only where there are spare cores:

* in a DataLoader worker process: ``cores // num_workers`` threads (1 when there are no
  spare cores), where ``cores`` is the number of cores this process may run on;
* anywhere else (the main process, thread workers, user threads): 1, as before, since fpipe
  cannot tell how many other decoders share the cores.

The threads live only while a ``get_clips`` call has its container open: none survive the
call, so a process never forks with FFmpeg threads running.
"""

from __future__ import annotations

import os
import sys
from typing import Literal, Union

__all__ = ["CodecThreads", "resolve_codec_threads"]

#: ``codec_threads``: a thread count (1: no codec threads), or "auto" (see the module docstring).
CodecThreads = Union[int, Literal["auto"]]


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _dataloader_workers() -> int | None:
    """``num_workers`` of the torch DataLoader this process is a worker of, else None."""
    data = sys.modules.get("torch.utils.data")
    info = data.get_worker_info() if data is not None else None
    return None if info is None else int(info.num_workers)


def resolve_codec_threads(setting: CodecThreads) -> int:
    """The thread count ``setting`` means here and now (an int >= 1).

    Raises:
      ValueError: ``setting`` is neither "auto" nor an int >= 1.
    """
    if setting == "auto":
        workers = _dataloader_workers()
        return 1 if workers is None else max(1, _cores() // max(workers, 1))
    if isinstance(setting, bool) or not isinstance(setting, int) or setting < 1:
        raise ValueError(f"codec_threads must be 'auto' or an int >= 1, got {setting!r}")
    return setting
