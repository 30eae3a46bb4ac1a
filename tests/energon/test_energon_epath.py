"""Energon's ``EPath`` on fpipe (``epathlib/epath.py`` and the local tests of Energon 7.4's
``tests/test_epathlib.py``): absolute and normalized when made, pathlib-like for local files,
equal to the string of the same path; object-storage URLs are kept, file operations on them
are refused naming fpipe's way."""

from __future__ import annotations

import os
import pickle

import pytest

from fpipe.core.errors import ConfigError
from fpipe.energon import EPath, SourceInfo


def test_local_paths_are_absolute_and_normalized(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert str(EPath("a.bin")) == str(tmp_path / "a.bin")
    assert str(EPath("nonexisting/../a.bin")) == str(tmp_path / "a.bin")
    assert str(EPath(f"../{tmp_path.name}/a.bin")) == str(tmp_path / "a.bin")
    assert EPath("/x") / "y/../z" == EPath("/x/z") and EPath("/x") / EPath("/q") == EPath("/q")
    assert EPath(tmp_path).is_dir() and not (EPath(tmp_path) / "a.bin").is_file()


def test_files_read_write_and_list(tmp_path):
    root = EPath(tmp_path)
    (root / "file.txt").write_text("dummy")
    (root / "sub" / "file2.txt").write_text("two")  # folders made on write
    (root / "sub" / "file3.blob").write_bytes(b"three")
    os.symlink(tmp_path / "sub", tmp_path / "link", target_is_directory=True)
    with (root / "file.txt").open("rb") as f:
        assert f.read() == b"dummy"
    assert (root / "sub" / "file3.blob").size() == 5
    names = sorted(str(p.relative_to(root)) for p in root.walk())
    assert names == [
        "file.txt",
        "link/file2.txt",
        "link/file3.blob",
        "sub/file2.txt",
        "sub/file3.blob",
    ]
    txt = sorted(str(p.relative_to(root)) for p in root.glob("**/*.txt"))
    assert txt == ["file.txt", "link/file2.txt", "sub/file2.txt"]
    assert [p.name for p in root.glob("sub/file[0-2].*")] == ["file2.txt"]
    (root / "file.txt").unlink()
    assert not (root / "file.txt").is_file()


def test_equality_hash_and_pickling():
    p = EPath("/data/ds1")
    assert p == "/data/ds1" and hash(p) == hash("/data/ds1") and p.name == "ds1"
    assert p.parent == EPath("/data") and p.with_suffix(".tar") == "/data/ds1.tar"
    assert pickle.loads(pickle.dumps(p)) == p
    # fpipe's SourceInfo holds a string path; Energon's tests compare it with an EPath
    info = SourceInfo(dataset_path="/data/ds1", index=2, shard_name="s.tar", file_names=("a",))
    assert info == SourceInfo(dataset_path=p, index=2, shard_name="s.tar", file_names=("a",))


def test_urls_are_kept_and_file_operations_refused(monkeypatch):
    p = EPath("msc://profile/bucket/ds") / "part.tar"
    assert str(p) == "msc://profile/bucket/ds/part.tar" and not p.is_local()
    assert p.profile == "profile" and not p.is_file()
    with pytest.raises(ConfigError, match="get_train_dataset"):
        p.read_bytes()
    monkeypatch.delenv("NVDATASET_CACHE_DIR", raising=False)
    with pytest.raises(ConfigError, match="dss://.*NVDATASET_CACHE_DIR"):
        EPath("dss://name@v1/x")


def test_dss_paths_resolve_under_the_dataset_cache(monkeypatch, tmp_path):
    # Energon's resolution: $NVDATASET_CACHE_DIR/NAME/VERSION/path
    monkeypatch.setenv("NVDATASET_CACHE_DIR", str(tmp_path))
    assert EPath("dss://name@v1/x/y.tar") == str(tmp_path / "name" / "v1" / "x" / "y.tar")
    monkeypatch.setenv("NVDATASET_CACHE_DIR", "msc://store/cache")
    assert str(EPath("dss://name@v1")) == "msc://store/cache/name/v1"
    with pytest.raises(ConfigError, match="NAME@VERSION"):
        EPath("dss://name/x")


def test_epath_imports_from_energons_module_paths():
    # Energon users write `from megatron.energon.epathlib import EPath` (or `.epathlib.epath`)
    import fpipe.energon.epathlib.epath as epath_mod
    from fpipe.energon.epathlib import DEFAULT_PROFILE_NAME
    from fpipe.energon.epathlib import EPath as FromPackage

    import fpipe.energon.epath as ours

    assert FromPackage is EPath and epath_mod.EPath is EPath
    assert DEFAULT_PROFILE_NAME == epath_mod.DEFAULT_PROFILE_NAME == "default"
    assert epath_mod.NVDATASET_CACHE_DIR == ours.NVDATASET_CACHE_DIR  # the variable at import
