"""A prepare stopped halfway resumes: shards indexed before the stop are not read again, and the
index equals the one of a prepare that never stopped, byte for byte."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fpipe.storage import prepare_dataset
from fpipe.storage.prepare import shards as shards_mod
from fpipe.storage.read.tar.index import INDEX_DIR
from tests.storage.helpers import make_image_caption_dataset

FIELDS = ["image=jpg", "caption=txt"]
SCAN_SHARD = shards_mod.scan_shard


class Killed(Exception):
    """Stands for the SIGKILL of a prepare: raised from inside the scan loop."""


def _files(index: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(index)): p.read_bytes() for p in sorted(index.rglob("*")) if p.is_file()
    }


def _count_scans(monkeypatch, stop_after: int | None = None) -> list[str]:
    """Record the shards ``scan_shards`` opens; with ``stop_after``, die at the next one."""
    opened: list[str] = []

    def scan(root, name, opts):
        if stop_after is not None and len(opened) == stop_after:
            raise Killed(name)
        opened.append(name)
        return SCAN_SHARD(root, name, opts)

    monkeypatch.setattr(shards_mod, "scan_shard", scan)
    return opened


@pytest.fixture
def ds(tmp_path):
    make_image_caption_dataset(tmp_path / "d", shards=6, per_shard=3)
    return tmp_path / "d"


def test_killed_prepare_resumes_without_reading_finished_shards(ds, monkeypatch):
    prepare_dataset(ds, fields=FIELDS)
    whole = _files(ds / INDEX_DIR)
    (ds / INDEX_DIR / "info.yaml").unlink()  # a previous index plays no part in a resume
    _count_scans(monkeypatch, stop_after=4)
    with pytest.raises(Killed):
        prepare_dataset(ds, fields=FIELDS)
    opened = _count_scans(monkeypatch)
    prepare_dataset(ds, fields=FIELDS)
    assert opened == ["shard-0004.tar", "shard-0005.tar"]
    assert _files(ds / INDEX_DIR) == whole  # the journal is gone with the old folder
    opened.clear()
    prepare_dataset(ds, fields=FIELDS)  # a finished prepare leaves no journal behind
    assert len(opened) == 6


def test_changed_shard_or_options_are_scanned_again(ds, monkeypatch):
    _count_scans(monkeypatch, stop_after=4)
    with pytest.raises(Killed):
        prepare_dataset(ds, fields=FIELDS)
    st = os.stat(ds / "shard-0001.tar")
    os.utime(ds / "shard-0001.tar", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    opened = _count_scans(monkeypatch, stop_after=2)
    with pytest.raises(Killed):
        prepare_dataset(ds, fields=FIELDS)
    assert opened == ["shard-0001.tar", "shard-0004.tar"]  # then killed reading shard 5
    opened = _count_scans(monkeypatch)
    report = prepare_dataset(ds, fields=["image=jpg"])  # other fields: nothing recorded fits
    assert len(opened) == 6 and report.num_samples == 18


def test_a_torn_journal_record_is_scanned_again(ds, monkeypatch):
    _count_scans(monkeypatch, stop_after=3)
    with pytest.raises(Killed):
        prepare_dataset(ds, fields=FIELDS)
    (journal,) = (ds / INDEX_DIR).rglob("*.jnl")
    data = journal.read_bytes()
    journal.write_bytes(data[:-5])  # the kill came while the last record was written
    opened = _count_scans(monkeypatch)
    prepare_dataset(ds, fields=FIELDS)
    assert opened == ["shard-0002.tar", "shard-0003.tar", "shard-0004.tar", "shard-0005.tar"]


def test_a_part_run_resumes_and_merges_to_the_same_index(ds, monkeypatch):
    prepare_dataset(ds, fields=FIELDS)
    whole = _files(ds / INDEX_DIR)
    _count_scans(monkeypatch, stop_after=2)
    with pytest.raises(Killed):
        prepare_dataset(ds, fields=FIELDS, part=(0, 2))
    opened = _count_scans(monkeypatch)
    prepare_dataset(ds, fields=FIELDS, part=(0, 2))
    prepare_dataset(ds, fields=FIELDS, part=(1, 2))
    assert opened == ["shard-0002.tar", "shard-0003.tar", "shard-0004.tar", "shard-0005.tar"]
    prepare_dataset(ds, fields=FIELDS, merge=True)
    assert _files(ds / INDEX_DIR) == whole
    assert not (ds / ".fpipe-parts").exists()  # the parts' journal went with them
