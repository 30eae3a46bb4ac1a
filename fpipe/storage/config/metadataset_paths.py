"""Where a metadataset's entries point: a ``path:`` or ``aux:`` as written, made the path or
URL to open.

Energon's schemes are resolved (``dss://``, ``msc://`` profiles: :func:`user_path`); a
relative path is relative to the file that names it, in its bucket for a metadataset file on
object storage (:func:`beside`), else in its folder (:func:`local_path`). A path that leads
above its bucket, or a scheme fpipe does not read, is refused naming the file and the entry.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

from fpipe.core.errors import ConfigError
from fpipe.storage.config.metadataset_records import AuxRef
from fpipe.storage.msc import resolve_location
from fpipe.storage.paths import SCHEMES, is_url

__all__ = [
    "aux_refs",
    "beside",
    "dataset_exists",
    "is_metadataset",
    "local_path",
    "names_metadataset",
    "user_path",
]


def aux_refs(
    node: dict, base: Path, where: str, entry: str, *, check: bool = True
) -> tuple[AuxRef, ...]:
    """The ``aux:`` mapping of a reference as records (``()`` without one): a plain path is a
    prepared dataset, ``filesystem://path`` a folder (``filesystem+msc://PROFILE/path``,
    ``filesystem+s3://...``: a folder on object storage); relative paths are relative to the
    file that names them (in its bucket, for a metadataset file on object storage). Paths
    take Energon's schemes as a ``path:`` does (:func:`user_path`). Raises ConfigError naming
    the file, the entry and the name (``check``: also when a local folder does not exist; one
    on object storage is read when a cooker asks for a file)."""
    raw = node.get("aux")
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: {entry}: 'aux' must map names to paths, got {raw!r}")
    out = []
    for name, ref in raw.items():
        at = f"{where}: {entry}: aux {name!r}"
        if not isinstance(name, str) or not name.isidentifier() or name in ("primary", "cache"):
            raise ConfigError(
                f"{at}: the name must be a Python identifier other than "
                "'primary' and 'cache' (cookers get it as a keyword)"
            )
        if not isinstance(ref, str) or not ref:
            raise ConfigError(f"{at}: must be a non-empty path string, got {ref!r}")
        kind, target = "dataset", ref
        if ref.startswith("filesystem://"):
            kind, target = "filesystem", ref[len("filesystem://") :]
        elif ref.startswith("filesystem+"):  # Energon's folder on object storage
            kind, target = "filesystem", ref[len("filesystem+") :]
            if not is_url(target):
                raise ConfigError(
                    f"{at}: {ref!r}: filesystem+ is followed by a URL (filesystem+msc://"
                    "PROFILE/path); a local folder is filesystem://path"
                )
        target = user_path(beside(base, target, at), at)
        if is_url(target):
            out.append(AuxRef(name=name, path=target, kind=kind))
            continue
        path = local_path(base, target)
        if check and not path.is_dir():
            raise ConfigError(f"{at}: {ref!r} is not a folder ({path})")
        out.append(AuxRef(name=name, path=str(path), kind=kind))
    return tuple(out)


def local_path(base: Path | str, raw: str) -> Path:
    """The absolute local path of entry ``raw`` (not a URL) of the file ``base`` (a relative
    one of a file on object storage was made a URL by :func:`beside`)."""
    if os.path.isabs(raw):
        return Path(raw).resolve()
    return (Path(base).parent / raw).resolve()


def dataset_exists(path: Path) -> bool:
    """Whether a dataset is at ``path``: a file or folder, or a Megatron corpus prefix (whose
    files are ``path.idx`` and ``path.bin``)."""
    return path.exists() or Path(f"{path}.idx").is_file()


def is_metadataset(path: str | os.PathLike) -> bool:
    """True when ``path`` names a metadataset file (``.yaml`` / ``.yml``)."""
    p = Path(path)
    return p.suffix.lower() in (".yaml", ".yml") and not p.is_dir()


def user_path(raw: str, at: str) -> str:
    """A ``path:`` as written, with Energon's schemes resolved (``dss://``, ``msc://``
    profiles: :func:`~fpipe.storage.msc.resolve_location`, which refuses an unknown profile
    here, when the metadataset is read); a scheme fpipe does not read is refused, rather than
    taken for a relative folder. ``at``: where it is written (``"<file>: <entry>"``), for the
    messages."""
    if "://" not in raw:
        return raw
    scheme = raw.split("://", 1)[0].lower()
    if scheme != "dss" and scheme not in SCHEMES:
        raise ConfigError(
            f"{at}: path {raw!r}: fpipe does not read {scheme}:// paths; give a local folder, "
            f"an msc://PROFILE/path or dss://NAME@VERSION path, or a URL of "
            f"{', '.join(s + '://' for s in SCHEMES if s != 'msc')}"
        )
    try:
        return resolve_location(raw)
    except ConfigError as e:
        raise ConfigError(f"{at}: {e}") from None


def beside(base: Path | str, raw: str, at: str) -> str:
    """Path entry ``raw`` of the metadataset file ``base`` as it is to be opened: a relative
    path named by a file on object storage (``base`` a URL) becomes the URL of that path in
    the file's folder (``..`` climbs folders, but not above the bucket or ``msc://`` profile:
    refused naming the entry); anything else stays as written (local relative paths are
    resolved against ``base``'s folder by the caller)."""
    if not is_url(base) or "://" in raw or os.path.isabs(raw):
        return raw
    scheme, rest = str(base).split("://", 1)
    root, _, inner = rest.partition("/")
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(inner), raw))
    if joined == ".." or joined.startswith("../"):
        raise ConfigError(
            f"{at}: path {raw!r} leads above {scheme}://{root}, the top of the store the "
            "metadataset file is in; name the dataset by its full URL"
        )
    return f"{scheme}://{root}" if joined == "." else f"{scheme}://{root}/{joined}"


def names_metadataset(path: str) -> bool:
    """True when the local path or URL ``path`` ends in ``.yaml`` / ``.yml``."""
    return posixpath.splitext(path)[1].lower() in (".yaml", ".yml")
