"""Files a reader shares with the other threads of its process (thread workers each open their
own datasets, but the files under them are the same).

- A gzip shard is decompressed once into ``.fpipe/decompressed/``: two threads reading it first
  at the same time each wrote the same temporary file (named by the process id only), so one
  truncated the other's copy while it was being written, and the copy renamed into place could
  hold zeros where the other thread's bytes had been.
- An auxiliary store's media metadata (``.nv-meta/index.sqlite``) is read through one SQLite
  connection, which SQLite refused to use in any thread but the one that opened it (a Ray
  actor with ``max_concurrency=2`` runs successive tasks on different threads).
"""

from __future__ import annotations

import gzip
import sqlite3
import threading

from fpipe.storage.read import remote_index
from fpipe.storage.read.file_store import StoredMediaMetadata
from fpipe.storage.read.tar import reader as tar_reader


def test_two_threads_decompressing_one_gzip_shard_each_get_the_whole_copy(tmp_path, monkeypatch):
    data = bytes(range(256)) * 64  # 16 KiB, no run of zeros
    src = tmp_path / "shard.tar.gz"
    src.write_bytes(gzip.compress(data))
    dst = tmp_path / "decompressed" / "shard.tar"
    half, quarter = len(data) // 2, len(data) // 4
    a_half, b_quarter, a_done = threading.Event(), threading.Event(), threading.Event()

    def copy_in_turns(fin, fout, _length=0):
        """A writes half and waits for B to write a quarter; A ends while B waits."""
        whole = fin.read()
        if threading.current_thread() is a:
            first, wait_for, signal = half, b_quarter, a_half
        else:
            first, wait_for, signal = quarter, a_done, b_quarter
        fout.write(whole[:first])
        fout.flush()
        signal.set()
        assert wait_for.wait(5)
        fout.write(whole[first:])
        fout.flush()

    got: dict[str, object] = {}

    def run(name):
        try:
            path = tar_reader._decompressed_copy(str(src), dst)
            with open(path, "rb") as f:
                got[name] = f.read()
        except OSError as e:
            got[name] = e
        finally:
            if name == "a":
                a_done.set()

    monkeypatch.setattr(tar_reader.shutil, "copyfileobj", copy_in_turns)
    a = threading.Thread(target=run, args=("a",))
    b = threading.Thread(target=run, args=("b",))
    a.start()
    assert a_half.wait(5)
    b.start()
    a.join(10)
    b.join(10)
    assert got["a"] == data  # not zeros where B truncated A's copy
    assert got["b"] == data  # not an error: its copy was renamed away under it
    assert dst.read_bytes() == data
    assert sorted(p.name for p in dst.parent.iterdir()) == ["shard.tar"]  # no leftovers


def test_stored_media_metadata_is_read_from_any_thread(tmp_path):
    meta = tmp_path / ".nv-meta"
    meta.mkdir()
    db = sqlite3.connect(meta / "index.sqlite")
    db.execute(
        "CREATE TABLE media_metadata (entry_key TEXT, metadata_type TEXT, metadata_json TEXT)"
    )
    db.execute("INSERT INTO media_metadata VALUES ('a.jpg', 'image', '{\"width\": 2}')")
    db.commit()
    db.close()
    stored = StoredMediaMetadata(str(tmp_path))
    assert stored.get("a.jpg") == ("image", '{"width": 2}')  # opened in this thread
    got: list = []

    def other_thread():
        try:
            got.append(stored.get("a.jpg"))
        except sqlite3.Error as e:
            got.append(e)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join(5)
    assert got == [("image", '{"width": 2}')]


def test_two_threads_copying_one_remote_index_leave_a_whole_copy(tmp_path, monkeypatch):
    """The local copy of a remote index is made in a folder of its own and swapped in whole:
    that folder was named by the process id only, so a second thread emptied the first's
    half-made copy, and the first then swapped in what it wrote after that, marker and all (a
    copy kept, short of arrays, for every later run)."""
    monkeypatch.setenv("FPIPE_CACHE", str(tmp_path))
    first_half, second_done = threading.Event(), threading.Event()

    def copy(folder):  # as local_index copies: the arrays, then the marker
        for name in ("a.npy", "b.npy"):
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(name.encode())
            if threading.current_thread() is first and name == "a.npy":
                first_half.set()
                assert second_done.wait(5)
        (folder / "info.yaml").write_bytes(b"current")

    def run():
        remote_index.cached_copy("index", "s3://b/ds", "info.yaml", b"current", copy)

    first = threading.Thread(target=run)
    first.start()
    assert first_half.wait(5)
    run()  # the second one, whole
    second_done.set()
    first.join(5)
    got = remote_index.cached_copy("index", "s3://b/ds", "info.yaml", b"current", copy)
    assert sorted(p.name for p in got.iterdir()) == ["a.npy", "b.npy", "info.yaml"]
    assert [p.name for p in got.parent.iterdir()] == [got.name]  # no folder left behind


def test_a_temporary_name_is_each_process_and_threads_own(tmp_path):
    """Every file fpipe writes and renames into place (decompressed shards, copied indexes, an
    index folder, a Megatron index copy, the parsed-YAML record) takes its temporary name from
    :func:`fpipe.core.temp_names.beside`: one per thread, the same for a thread's retries."""
    import os

    from fpipe.core.temp_names import beside

    target = tmp_path / "index.idx"
    names: list = []
    together = threading.Barrier(2)  # both alive at once: an ended thread's id is reused

    def name() -> None:
        names.append(beside(target))
        together.wait(5)

    threads = [threading.Thread(target=name) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    mine = beside(target)
    assert mine == beside(target) and mine.parent == tmp_path
    assert len({mine, *names}) == 3
    assert mine.name.startswith(f"index.idx.tmp-{os.getpid()}-")
    assert beside(target, "old").name.startswith("index.idx.old-")
