"""Progress bars for long operations (prepare, check, conversion): tqdm on stderr.

A bar is drawn only when it is enabled *and* stderr is a terminal, so logs and pipes get no
carriage-return lines.
"""

from __future__ import annotations

import sys

from tqdm import tqdm

__all__ = ["progress_bar"]


def progress_bar(
    total: int | None, label: str, *, unit: str = "shard", enabled: bool = True
) -> tqdm:
    """A tqdm bar of ``total`` units on stderr; quiet when disabled or not on a terminal.

    Use it as tqdm: ``bar.update(n)``, ``bar.set_postfix_str(...)``, ``bar.close()`` (or a
    ``with`` block).
    """
    out = sys.stderr
    quiet = not enabled or not (hasattr(out, "isatty") and out.isatty())
    return tqdm(total=total, desc=label, unit=unit, file=out, disable=quiet, dynamic_ncols=True)
