"""Names of the temporary files and folders fpipe writes next to their final place and then
renames into it (a decompressed shard, a copied index, an index folder, a parsed-YAML record),
so that a reader sees the whole file or none of it.

A name is this process's and this thread's own: two processes, or two thread workers of one
process, making the same file at once each write their own copy, and the last rename wins with
a whole one. A name shared by two writers lets one truncate the other's copy while it is being
written, and the copy renamed into place can then hold zeros.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

__all__ = ["beside"]


def beside(path: str | Path, tag: str = "tmp") -> Path:
    """``path``'s sibling ``<name>.<tag>-<process id>-<thread id>``.

    Examples:
      >>> import os, threading
      >>> beside("/data/x/shard.tar") == Path(
      ...     f"/data/x/shard.tar.tmp-{os.getpid()}-{threading.get_ident()}")
      True
    """
    path = Path(path)
    return path.with_name(f"{path.name}.{tag}-{os.getpid()}-{threading.get_ident()}")
