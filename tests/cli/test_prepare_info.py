"""`fpipe prepare` and `fpipe info` through the command-line entry point."""

from __future__ import annotations

import json
import subprocess
import sys

from fpipe.cli.main import main
from fpipe.storage import open_dataset
from tests.storage.helpers import (
    jpeg_bytes,
    make_energon_dataset,
    make_image_caption_dataset,
    write_tar,
)


def test_prepare_flags_then_info(tmp_path, capsys):
    make_image_caption_dataset(tmp_path, shards=3, per_shard=2)
    rc = main(
        [
            "prepare",
            str(tmp_path),
            "--field",
            "image=jpg",
            "--field",
            "caption=json[caption]",
            "--split",
            "1,1,1",
            "--sample-type",
            "CaptioningSample",
            "--column",
            "score=json[score]",
            "--no-progress",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "indexed 6 samples from 3 shards" in out and "train=1" in out
    ds = open_dataset(tmp_path)
    assert ds.config.field_map == {"image": "jpg", "caption": "json[caption]"}
    assert "score" in ds.column_names
    assert main(["info", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "samples: 6" in out and "shards: 3" in out and "train=2, val=2, test=2" in out
    assert "image.width" in out and "sample_type: CaptioningSample" in out


def test_prepare_reports_problems_and_succeeds(tmp_path, capsys):
    write_tar(tmp_path / "s.tar", [("a", {"jpg": b"junk", "txt": b"x"}), ("b", {"txt": b"y"})])
    assert main(["prepare", str(tmp_path), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "problem: s.tar: s/a: member 'jpg': undecodable image header" in captured.err
    assert "1 left out" in captured.out
    assert main(["info", str(tmp_path)]) == 0
    assert "left out at prepare: 1" in capsys.readouterr().out


def test_prepare_names_samples_missing_a_field(tmp_path, capsys):
    """The summary (stdout) counts left-out samples by reason, names the first few (shard,
    key) and says which file lists all of them; that file has each one."""
    jpg = jpeg_bytes(8, 6)
    samples = [(f"{i:02d}", {"jpg": jpg, **({"txt": b"c"} if i % 3 else {})}) for i in range(9)]
    write_tar(tmp_path / "s.tar", samples)
    args = ["prepare", str(tmp_path), "--field", "image=jpg", "--field", "caption=txt"]
    assert main([*args, "--no-progress", "--no-probe-av", "--show-problems", "0"]) == 0
    out = capsys.readouterr().out
    listed = tmp_path / ".fpipe" / "problems.jsonl"
    assert (
        "left out 3 samples (missing field 'caption' (txt): 3), first s.tar: s/00, "
        f"s.tar: s/03, s.tar: s/06; all of them (shard, key, reason) in {listed}"
    ) in out
    lines = listed.read_text().splitlines()
    assert [json.loads(x)["key"] for x in lines] == ["s/00", "s/03", "s/06"]


def test_part_and_merge_and_workers(tmp_path, capsys):
    make_image_caption_dataset(tmp_path, shards=4, per_shard=2)
    for i in range(2):
        assert main(["prepare", str(tmp_path), "--part", f"{i}/2", "--no-progress"]) == 0
    assert main(["prepare", str(tmp_path), "--merge", "--no-progress", "--split", "3,1"]) == 0
    assert len(open_dataset(tmp_path)) == 8
    assert main(["prepare", str(tmp_path), "--workers", "2", "--no-progress"]) == 0
    assert len(open_dataset(tmp_path)) == 8


def test_errors_exit_2(tmp_path, capsys):
    assert main(["prepare", str(tmp_path / "nope"), "--no-progress"]) == 2
    assert "error:" in capsys.readouterr().err
    assert main(["info", str(tmp_path)]) == 2
    assert "fpipe prepare" in capsys.readouterr().err


def test_energon_info_and_table(tmp_path, capsys):
    make_energon_dataset(tmp_path / "e", shards=2, per_shard=2)
    assert main(["info", str(tmp_path / "e")]) == 0
    out = capsys.readouterr().out
    assert "Energon .tar.idx" in out and "samples: 4" in out and "train=4" in out
    (tmp_path / "t.csv").write_text("path,text\nmissing.mp4,hi\n")
    # its only row is left out: an empty index is an error naming the row
    assert main(["prepare", str(tmp_path / "t.csv"), "--no-progress"]) == 2
    assert "missing.mp4" in capsys.readouterr().err


def test_table_with_media_beside_its_folder_opens_with_media_root(tmp_path, capsys):
    # OpenSora's layout: meta/train.csv, media/ beside it (recorded as ../media)
    (tmp_path / "media").mkdir()
    (tmp_path / "media" / "0.jpg").write_bytes(jpeg_bytes(9, 5))
    (tmp_path / "meta").mkdir()
    (tmp_path / "meta" / "t.csv").write_text("path,text\n0.jpg,hi\n")
    media, meta = str(tmp_path / "media"), str(tmp_path / "meta")
    assert main(["prepare", f"{meta}/t.csv", "--root", media, "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["info", meta]) == 2  # the recorded media folder leads out of meta/
    assert "'../media' leads out" in capsys.readouterr().err
    assert main(["info", meta, "--media-root", media]) == 0
    assert "samples: 1" in capsys.readouterr().out
    assert main(["check", meta, "--no-progress", "--media-root", str(tmp_path)]) == 0
    # media inside the table's folder need nothing
    (tmp_path / "meta" / "img").mkdir()
    (tmp_path / "meta" / "img" / "0.jpg").write_bytes(jpeg_bytes(9, 5))
    assert main(["prepare", f"{meta}/t.csv", "--root", f"{meta}/img", "--no-progress"]) == 0
    assert main(["info", meta]) == 0


def test_no_prompt_without_terminal(tmp_path):
    make_image_caption_dataset(tmp_path, shards=1, per_shard=2)
    proc = subprocess.run(
        [sys.executable, "-m", "fpipe.cli.main", "prepare", str(tmp_path)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "indexed 2 samples" in proc.stdout
    assert "\r" not in proc.stderr and "1/1" not in proc.stderr  # no progress bar in a log


def test_prompts_on_terminal_fill_missing_settings(tmp_path, monkeypatch, capsys):
    make_image_caption_dataset(tmp_path, shards=2, per_shard=2)
    answers = iter(["image=jpg caption=txt", "", "1,1"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(answers))
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    assert main(["prepare", str(tmp_path), "--no-progress"]) == 0
    ds = open_dataset(tmp_path)
    assert ds.config.field_map == {"image": "jpg", "caption": "txt"}
    assert ds.config.sample_type == "CaptioningSample"
    assert ds.split_names == ("train", "val")
    assert "jpg" in capsys.readouterr().out


def test_prepare_that_indexes_no_sample_fails_naming_why(tmp_path, capsys):
    """Every sample left out (a misspelt JSON key) is an error, not an empty index: exit 2, the
    reason and the first samples named. A partial index still succeeds (tests above)."""
    make_image_caption_dataset(tmp_path, shards=2, per_shard=3)
    args = ["prepare", str(tmp_path), "--field", "image=jpg", "--field", "caption=json[captoin]"]
    assert main([*args, "--no-progress", "--no-probe-av"]) == 2
    err = capsys.readouterr().err
    assert "indexed 0 samples" in err and "every sample was left out" in err
    assert "left out 6 samples" in err and "captoin" in err
    assert "shard-0000.tar: shard-0000/" in err  # the first samples, by shard and key


def test_prepare_api_refuses_an_empty_index(tmp_path):
    import pytest

    from fpipe.core.errors import ConfigError
    from fpipe.storage import prepare_dataset

    make_image_caption_dataset(tmp_path, shards=1, per_shard=2)
    with pytest.raises(ConfigError, match="indexed 0 samples"):
        prepare_dataset(tmp_path, fields={"image": "jpg", "caption": "json[nope]"})
