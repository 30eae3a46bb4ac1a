"""``contained`` resolves a shard's real path with an ``lstat`` per part of the shard's name,
not per folder of the whole path (a 1,000-shard dataset checks every shard at each open), and
gives the real path ``os.path.realpath`` gives, symbolic links included."""

from __future__ import annotations

import os

import pytest

from fpipe.storage import paths
from fpipe.storage.paths import PathEscapeError, contained, escape_reason


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "a" / "b" / "root"
    (root / "sub").mkdir(parents=True)
    (tmp_path / "out").mkdir()
    (root / "s.tar").write_bytes(b"")
    (root / "link").symlink_to(tmp_path / "out")
    (root / "fl.tar").symlink_to(tmp_path / "out" / "x.tar")
    (tmp_path / "rootlink").symlink_to(root)
    return tmp_path, root


def test_a_flat_shard_costs_one_lstat(tree, monkeypatch):
    _, root = tree
    contained(root, "s.tar")  # the root's own real path, once per process
    calls = []
    real_lstat = os.lstat
    monkeypatch.setattr(os, "lstat", lambda p, *a, **k: calls.append(p) or real_lstat(p, *a, **k))
    assert contained(root, "s.tar") == os.path.join(root, "s.tar")
    assert len(calls) == 1, calls


@pytest.mark.parametrize(
    "name", ["s.tar", "sub/t.tar", "./s.tar", "sub//t", "missing/x", "a\\b", "sub/", "."]
)
def test_the_real_path_is_realpaths(tree, name):
    tmp, root = tree
    for r in (root, tmp / "rootlink"):
        base = os.path.realpath(r)
        assert paths._real_path(r, base, name, False) == os.path.realpath(os.path.join(r, name))


def test_a_link_out_is_still_refused(tree):
    _, root = tree
    assert "symbolic link" in escape_reason(root, "fl.tar")
    with pytest.raises(PathEscapeError):
        contained(root, "link/x.tar")
