"""Energon's error handlers, for ``handler=`` of ``get_train_dataset`` / ``get_val_dataset``
and ``WorkerConfig(global_error_handler=...)``.

fpipe calls a handler with the exception of a sample that failed to read, decode, cook or
encode, the sample the failing hook got (the cooked sample when ``encode_sample`` failed;
``{"__key__": key}`` when reading or cooking failed) and the sample's ``__sources__``
(:class:`fpipe.samples.SourceInfo`: dataset, index, shard). When the handler returns, the
sample is skipped and counted (``loader.stats()``); what it raises stops the loader as an error
of that sample.
"""

from __future__ import annotations

import traceback
from typing import Any

__all__ = ["log_exception", "reraise_exception"]


def log_exception(e: Exception, sample: Any, sources: list[Any] | None = None) -> None:
    """Energon's ``log_exception``: print the exception's traceback, where the sample came from
    (``- <dataset>[<index>] <shard>(<file names>)``) and the sample, then go on (the
    sample is skipped and counted)."""
    traceback.print_exception(e)
    print("-" * 10)
    if sources:
        print("Sources:")
        for source in sources:
            if hasattr(source, "dataset_path"):
                print(
                    f" - {source.dataset_path}[{source.index}] "
                    f"{source.shard_name}{source.file_names!r}"
                )
        print("-" * 10)
    print(f"Failed sample: {sample!r}")
    print("-" * 10)


def reraise_exception(e: Exception, _sample: Any, _sources: list[Any] | None = None) -> None:
    """Energon's ``reraise_exception``: raise ``e``, which stops the loader (fpipe's
    ``error_policy="raise"``, the default, does the same without a handler)."""
    raise e
