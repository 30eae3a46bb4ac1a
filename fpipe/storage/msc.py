"""Energon's object-storage paths: ``msc://PROFILE/path`` and ``dss://NAME@VERSION/path``.

**msc://** names a profile of `multi-storage-client <https://github.com/NVIDIA/multi-storage-client>`_
(MSC): its configuration file (``$MSC_CONFIG``, else ``~/.msc_config.yaml``,
``~/.config/msc/config.yaml``, ... and the rclone configuration MSC also reads) says where the
profile's files are. MSC's own loader reads that file (search order, validation, ``include``,
rclone profiles), so a path means to fpipe what it means to Energon. fpipe then reads the data
itself, as it reads an ``s3://`` URL (one ranged GET per sample, read-ahead, hedging):

- a profile of an S3-compatible store (``type: s3`` or ``s8k``) becomes the bucket and prefix
  of its ``base_path``, its ``endpoint_url`` and ``region_name``, and the credentials of its
  ``credentials_provider`` (none: the usual ``AWS_*`` variables);
- a profile of a local folder (``type: file``) becomes that folder;
- any other provider (GCS, Azure, OCI, AIStore...) is refused when the dataset is opened, with
  what to give instead (the bucket's own ``gs://`` / ``az://`` URL, or a local copy).

**dss://** names a version of a dataset in NVIDIA's dataset-service cache layout, as Energon
resolves it: ``dss://NAME@VERSION/inner`` is ``$NVDATASET_CACHE_DIR/NAME/VERSION/inner``
(``NVDATASET_CACHE_DIR`` a local folder or an ``msc://`` URL). The version is required.

multi-storage-client is imported only when an ``msc://`` path is opened (``pip install
'fpipe[msc]'``).
"""

from __future__ import annotations

import os
import posixpath
from typing import Any

import msgspec

from fpipe.core.errors import ConfigError
from fpipe.core.fork_locks import fork_safe_lock

__all__ = ["MscTarget", "resolve_dss", "resolve_location", "resolve_msc"]

#: MSC provider types that speak the S3 protocol (read through fpipe's S3 reads)
S3_TYPES = ("s3", "s8k")
#: MSC provider types of local folders
FILE_TYPES = ("file",)
_OTHER = {
    "gcs": "gs://BUCKET/PATH",
    "gcs_s3": "gs://BUCKET/PATH",
    "azure": "az://CONTAINER/PATH",
}


class MscTarget(msgspec.Struct, frozen=True):
    """Where an ``msc://`` path leads: ``url`` (``s3://bucket/prefix/path``) with the obstore
    ``config`` and ``client`` options of its profile, or a local ``path`` (a ``file`` profile)."""

    url: str = ""
    path: str = ""
    config: dict[str, str] = msgspec.field(default_factory=dict)
    client: dict[str, Any] = msgspec.field(default_factory=dict)


def _split(url: str, scheme: str) -> tuple[str, str]:
    """``(first part, rest)`` of ``scheme://first/rest``; the rest normalized, never above
    the first part."""
    rest = url[len(scheme) + 3 :]
    head, _, inner = rest.partition("/")
    inner = posixpath.normpath("/" + inner).lstrip("/")
    return head, "" if inner == "." else inner


# Profiles read per process, keyed by the variables that choose the configuration files and
# checked against their modification times (a test or a user may rewrite them).
_PROFILES: dict[tuple, tuple[Any, dict[str, Any], str, tuple]] = {}
_LOCK = fork_safe_lock(globals(), "_LOCK")


def _msc_config():
    try:
        from multistorageclient.config import StorageClientConfig
        from multistorageclient.rclone import read_rclone_config
    except ImportError:
        raise ConfigError(
            "msc:// paths are resolved through multi-storage-client's profiles: "
            "pip install 'fpipe[msc]' (or give the bucket's s3:// URL)"
        ) from None
    return StorageClientConfig, read_rclone_config


def _mtime(path: str | None) -> int:
    try:
        return os.stat(path).st_mtime_ns if path else 0
    except OSError:
        return 0


def _profiles() -> tuple[dict[str, Any], str]:
    """Every MSC profile (MSC's configuration file merged with rclone's, as MSC merges them)
    and where they were looked for, in words."""
    key = tuple(os.environ.get(k) for k in ("MSC_CONFIG", "HOME", "XDG_CONFIG_HOME"))
    with _LOCK:
        got = _PROFILES.get(key)
        if got is not None and got[0] == tuple(_mtime(f) for f in got[3]):
            return got[1], got[2]
    config_cls, read_rclone = _msc_config()
    clear = getattr(read_rclone, "cache_clear", None)  # MSC keeps it per process; it changed
    if clear is not None:
        clear()
    try:
        msc_dict, msc_file = config_cls.read_msc_config()
        rclone_dict, rclone_file = read_rclone()
    except Exception as e:  # MSC raises ValueError (malformed) and jsonschema's errors
        raise ConfigError(f"msc://: cannot read the MSC configuration: {e}") from None
    profiles = dict((rclone_dict or {}).get("profiles") or {})
    profiles.update((msc_dict or {}).get("profiles") or {})
    named = os.environ.get("MSC_CONFIG")
    where = msc_file or (
        f"no MSC configuration file (MSC_CONFIG names {named}, which does not exist)"
        if named
        else "no MSC configuration file (MSC_CONFIG unset, none in the default places)"
    )
    files = (msc_file or named, rclone_file)  # a file made later counts
    with _LOCK:
        _PROFILES[key] = (tuple(_mtime(f) for f in files), profiles, where, files)
        _CREDS.clear()  # asked per reading: this one asks again
    return profiles, where


# Credentials asked of an MSC provider, per profile and reading of the configuration (building
# MSC's provider takes about a second; a dataset's every shard resolves its URL). A reading is
# its profiles mapping: an entry holds that mapping, so the id in its key names no other while
# the entry lasts (a freed mapping's id is soon another's), and is checked to be that mapping.
_CREDS: dict[tuple[int, str], tuple[dict, dict[str, str]]] = {}


def _credentials(profile: str, spec: dict[str, Any], profiles: dict) -> dict[str, str]:
    """obstore's credential keys from a profile's ``credentials_provider`` (none: the
    environment's)."""
    key = (id(profiles), profile)
    with _LOCK:
        got = _CREDS.get(key)
    if got is not None and got[0] is profiles:
        return got[1]
    creds = _ask_credentials(profile, spec)  # not holding the lock: it may take a second
    with _LOCK:
        _CREDS[key] = (profiles, creds)
    return creds


def _ask_credentials(profile: str, spec: dict[str, Any]) -> dict[str, str]:
    creds = spec.get("credentials_provider")
    if not creds:
        return {}
    opts = creds.get("options") or {}
    if creds.get("type") == "S3Credentials":
        got = {"access_key": opts.get("access_key"), "secret_key": opts.get("secret_key")}
        token = opts.get("session_token")
    else:  # any other provider: MSC builds it and says what it holds now
        config_cls, _ = _msc_config()
        try:
            built = config_cls.from_dict({"profiles": {profile: spec}}, profile=profile)
            c = built.credentials_provider.get_credentials()
        except Exception as e:
            raise ConfigError(
                f"msc://{profile}: cannot get the profile's credentials: {e}"
            ) from None
        got, token = {"access_key": c.access_key, "secret_key": c.secret_key}, c.token
    out = {}
    if got["access_key"]:
        out["access_key_id"] = str(got["access_key"])
    if got["secret_key"]:
        out["secret_access_key"] = str(got["secret_key"])
    if token:
        out["token"] = str(token)
    return out


def resolve_msc(url: str) -> MscTarget:
    """Where ``msc://PROFILE/path`` leads (see the module docstring).

    Raises:
      ConfigError: multi-storage-client missing, an unknown profile (naming where profiles
        were looked for), or a provider fpipe does not read (naming it and the alternative).
    """
    profile, inner = _split(url, "msc")
    if not profile:
        raise ConfigError(f"{url}: no profile in the msc:// URL (msc://PROFILE/path)")
    profiles, where = _profiles()
    spec = profiles.get(profile)
    if not isinstance(spec, dict):
        known = ", ".join(sorted(profiles)) or "none"
        raise ConfigError(
            f"{url}: msc:// profile {profile!r} is not defined (profiles read from {where}: "
            f"{known}); add it to the MSC configuration file (MSC_CONFIG names it), or give "
            "the dataset's s3:// URL or local folder instead"
        )
    provider = spec.get("storage_provider") or {}
    kind = str(provider.get("type", "")).lower()
    opts = provider.get("options") or {}
    base = str(opts.get("base_path", "")).strip("/")
    if kind in FILE_TYPES:
        return MscTarget(path=os.path.join("/" + base, inner))
    if kind not in S3_TYPES:
        instead = _OTHER.get(kind, "the store's own URL")
        raise ConfigError(
            f"{url}: msc:// profile {profile!r} uses storage provider {kind or 'none'!r}, which "
            f"fpipe does not read through MSC; give the dataset as {instead} (read by fpipe "
            "through obstore, see docs/remote.md) or copy it to a local folder"
        )
    if not base and not inner:  # no base_path (rclone's profiles): the bucket comes first
        raise ConfigError(
            f"{url}: msc:// profile {profile!r} has no base_path, so the path must begin with "
            "the bucket (msc://PROFILE/BUCKET/path)"
        )
    config: dict[str, str] = {}
    client: dict[str, Any] = {}
    endpoint = opts.get("endpoint_url")
    if endpoint:
        config["endpoint"] = str(endpoint)
        if str(endpoint).startswith("http://"):
            client["allow_http"] = True
    if opts.get("region_name"):
        config["region"] = str(opts["region_name"])
    config.update(_credentials(profile, spec, profiles))
    target = "s3://" + "/".join(p for p in (base, inner) if p)
    return MscTarget(url=target, config=config, client=client)


def resolve_dss(url: str) -> str:
    """The local path or ``msc://`` URL of ``dss://NAME@VERSION/inner``:
    ``$NVDATASET_CACHE_DIR/NAME/VERSION/inner`` (Energon's resolution).

    Raises:
      ConfigError: no ``@VERSION``, or ``NVDATASET_CACHE_DIR`` unset.
    """
    dataset, inner = _split(url, "dss")
    name, at, version = dataset.rpartition("@")
    if not at or not name or not version:
        raise ConfigError(
            f"{url}: a dss:// path names a dataset and its version: dss://NAME@VERSION/path"
        )
    cache = os.environ.get("NVDATASET_CACHE_DIR")
    if not cache:
        raise ConfigError(
            f"{url}: dss:// paths are read from the dataset-service cache folder "
            "$NVDATASET_CACHE_DIR (NAME/VERSION below it), which is not set; set it, or give "
            "the dataset's local folder or msc:// / s3:// URL instead"
        )
    parts = [p for p in (name, version, inner) if p]
    if cache.startswith("msc://"):
        return cache.rstrip("/") + "/" + "/".join(parts)
    return os.path.join(os.path.abspath(cache), *parts)


def resolve_location(path: Any) -> Any:
    """``path`` as fpipe opens it: a ``dss://`` path resolved (:func:`resolve_dss`), an
    ``msc://`` URL of a local-folder profile as that folder; anything else as given (an
    ``msc://`` URL of an S3 profile stays: :func:`~fpipe.storage.read.remote.open_store`
    resolves it)."""
    if not isinstance(path, str):
        return path
    if path.startswith("dss://"):
        path = resolve_dss(path)
    if path.startswith("msc://"):
        target = resolve_msc(path)
        if target.path:
            return target.path
    return path
