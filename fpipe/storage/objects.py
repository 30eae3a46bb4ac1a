"""Objects on object storage, whole: the store of a bucket URL (one per process, guarded against
use after ``fork``), and reading, writing and listing whole objects (index files, metadataset
files; never a shard: :mod:`fpipe.storage.read.remote` reads those by range).

Below the readers and the config readers alike: a metadataset file in a bucket is read here by
:mod:`fpipe.storage.config.metadataset`, a dataset's shards by :mod:`fpipe.storage.read.remote`.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import msgspec

from fpipe.core.errors import ConfigError
from fpipe.storage.paths import split_url

__all__ = [
    "StorageOptions",
    "import_obstore",
    "list_objects",
    "open_store",
    "read_object",
    "write_object",
]

#: URL schemes read through obstore. ``file://`` is accepted too (handy for tests and for
#: checking a remote setup against a local copy).


class StorageOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How to reach a bucket; every field has a default that works with environment variables.

    Attributes:
      config: obstore store configuration (``{"endpoint": ..., "region": ...}``); overrides
        the environment.
      client: obstore client options (``{"allow_http": True, "timeout": "30s"}``).
      concurrency: ranged GETs in flight per worker process while prefetching a recipe.
      max_retries: retries of a transient error (5xx, timeout, reset connection) per request.
      backoff_s: first retry delay; doubles up to ``max_backoff_s``.
      max_backoff_s: longest delay between two retries.
      retry_timeout_s: give up retrying a request after this long.
      hedge: send a second, identical ranged GET when one takes longer than ``hedge_quantile``
        of the recent ones (at least ``hedge_min_delay_s``) and use whichever answers first.
        The bytes read are the same either way; False sends one request per read.
      hedge_quantile: which quantile of the last 200 latencies a read must exceed to be hedged.
      hedge_min_delay_s: never hedge a read before this many seconds.
      hedge_max_fraction: at most this share of the reads is hedged (and one hedge per read).

    None of these can change the bytes read, so none is part of a dataset's fingerprint.
    """

    config: dict[str, str] = msgspec.field(default_factory=dict)
    client: dict[str, Any] = msgspec.field(default_factory=dict)
    concurrency: int = 16
    max_retries: int = 5
    backoff_s: float = 0.1
    max_backoff_s: float = 2.0
    retry_timeout_s: float = 30.0
    hedge: bool = True
    hedge_quantile: float = 0.95
    hedge_min_delay_s: float = 0.05
    hedge_max_fraction: float = 0.1

    def __post_init__(self):
        if self.concurrency < 1:
            raise ConfigError(f"storage concurrency must be >= 1, got {self.concurrency}")
        if self.max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {self.max_retries}")
        if not 0.0 < self.hedge_quantile <= 1.0:
            raise ConfigError(f"hedge_quantile must be in (0, 1], got {self.hedge_quantile}")
        if not 0.0 <= self.hedge_max_fraction <= 1.0:
            raise ConfigError(
                f"hedge_max_fraction must be in [0, 1], got {self.hedge_max_fraction}"
            )
        if self.hedge_min_delay_s < 0:
            raise ConfigError(f"hedge_min_delay_s must be >= 0, got {self.hedge_min_delay_s}")


def import_obstore():
    """The obstore module, or a ConfigError with the install hint."""
    try:
        import obstore
    except ImportError:
        raise ConfigError(
            "reading s3://, gs:// or az:// datasets needs obstore: pip install 'fpipe[remote]'"
        ) from None
    return obstore


# One store per (bucket URL, options) per process; the pid guards against use after fork.
_STORES: dict[tuple[str, bytes], Any] = {}
_STORES_PID = os.getpid()
_USED = False  # whether this process has started obstore's runtime


def _check_fork() -> None:
    global _STORES_PID
    if os.getpid() == _STORES_PID:
        return
    if _USED:
        raise ConfigError(
            "object storage was used before this process was forked; obstore's runtime does not "
            "survive fork and would hang. Start DataLoader workers with "
            "multiprocessing_context='forkserver' or 'spawn' (fpipe.get_loader does this for "
            "remote datasets)"
        )
    _STORES.clear()
    _STORES_PID = os.getpid()


def open_store(url: str, options: StorageOptions | None = None) -> tuple[Any, str]:
    """``(store, prefix)`` for ``url``: the obstore store of its bucket (one per process) and
    the object-name prefix of ``url`` inside it."""
    global _USED
    _check_fork()
    options = options or StorageOptions()
    if url.startswith("msc://"):  # an MSC profile: its bucket, endpoint and credentials
        from fpipe.storage.msc import resolve_msc

        target = resolve_msc(url)
        merged = msgspec.structs.replace(
            options,
            config={**target.config, **options.config},
            client={**target.client, **options.client},
        )
        return open_store(target.url or "file://" + target.path, merged)
    base, prefix = split_url(url)
    cache_key = (base, msgspec.json.encode(options))
    store = _STORES.get(cache_key)
    if store is None:
        import_obstore()  # first: without obstore, the install hint rather than an ImportError
        from obstore.store import from_url

        retry = {
            "max_retries": options.max_retries,
            "backoff": {
                "init_backoff": timedelta(seconds=options.backoff_s),
                "max_backoff": timedelta(seconds=options.max_backoff_s),
                "base": 2.0,
            },
            "retry_timeout": timedelta(seconds=options.retry_timeout_s),
        }
        kwargs: dict[str, Any] = {}
        if base != "file:///":
            kwargs = {"retry_config": retry, "client_options": dict(options.client) or None}
            if options.config:
                kwargs["config"] = dict(options.config)
        try:
            store = from_url(base, **kwargs)
        except Exception as e:  # obstore raises its own config errors (and panics as such)
            raise ConfigError(f"{url}: cannot open the store: {e}") from None
        _STORES[cache_key] = store
        _USED = True
    return store, prefix


def _name(prefix: str, rel: str) -> str:
    return f"{prefix}/{rel}" if prefix else rel


def read_object(url: str, options: StorageOptions | None = None) -> bytes:
    """The whole object at ``url`` (index files; never a shard)."""
    store, name = open_store(url, options)
    return bytes(import_obstore().get(store, name).bytes())


def write_object(url: str, data: bytes, options: StorageOptions | None = None) -> None:
    """Write ``data`` to ``url`` (one PUT)."""
    store, name = open_store(url, options)
    import_obstore().put(store, name, data)


def list_objects(url: str, options: StorageOptions | None = None) -> list[tuple[str, int]]:
    """``(name relative to url, size)`` of every object under ``url``, sorted by name."""
    store, prefix = open_store(url, options)
    out = []
    for chunk in import_obstore().list(store, prefix=prefix or None):
        for meta in chunk:
            path = meta["path"]
            rel = path[len(prefix) :].lstrip("/") if prefix else path
            out.append((rel, int(meta["size"])))
    return sorted(out)
