"""User columns (``--column NAME=SPEC``, ``--extra-columns``) of JSONL and CSV tables: computed
from the rows' cells, written to the index, usable as packing budgets; what cannot give a
number is refused, naming the table, before anything is written."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fpipe.cli.main import main
from fpipe.core.errors import ConfigError
from fpipe.storage import open_dataset, prepare_dataset
from tests.helpers import check_token_column_use

NAN = pytest.approx(float("nan"), nan_ok=True)


def _jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _col(ds, name):
    return np.asarray(ds.column(name)).tolist()


def test_jsonl_table_columns_come_from_its_cells(tmp_path):
    rows = [
        {"text": "héllo", "tokens": [5, 6, 7], "meta": {"n": 2, "tags": ["a"]}, "score": 1},
        {"text": "", "tokens": [], "meta": {"n": 9, "tags": []}, "score": None},
        {"text": "xy", "tokens": [1], "meta": None, "score": 0.5},
        {"text": "abcd", "tokens": None, "meta": {"n": None}, "score": 3},
    ]
    table = _jsonl(tmp_path / "t.jsonl", rows)
    report = prepare_dataset(
        table,
        columns=[
            "ntok=len(tokens)",
            "chars=len(text)",
            "first=tokens[0]",
            "last=tokens[-1]",
            "n=meta[n]",
            "ntags=len(meta[tags])",
            "n_or_first=meta[n],tokens[0]",
            "score2=score",
        ],
    )
    assert {"ntok", "chars", "first", "n", "ntags", "n_or_first", "score2"} <= set(report.columns)
    ds = open_dataset(tmp_path)
    assert _col(ds, "ntok") == [3, 0, 1, NAN]  # an empty cell has no length
    assert _col(ds, "chars") == [5, 0, 2, 4]  # characters, not UTF-8 bytes
    assert np.asarray(ds.column("chars")).dtype == np.int64  # every row has an integer
    assert _col(ds, "first") == [5, NAN, 1, NAN]  # an empty list has no first item
    assert _col(ds, "last") == [7, NAN, 1, NAN]
    assert _col(ds, "n") == [2, 9, NAN, NAN]
    assert _col(ds, "ntags") == [1, 0, NAN, NAN]
    assert _col(ds, "n_or_first") == [2, 9, 1, NAN]  # the first alternative with a value
    assert _col(ds, "score2") == [1, NAN, 0.5, 3]
    assert ds.read(0)["text"] == "héllo".encode()  # the table's own columns are untouched


def test_csv_table_columns_and_json_text_cells(tmp_path):
    (tmp_path / "videos").mkdir()
    for name in "abc":
        (tmp_path / "videos" / f"{name}.mp4").write_bytes(b"mp4-" + name.encode())
    (tmp_path / "meta.csv").write_text(
        "path,text,num_frames,meta\n"
        'videos/a.mp4,a cat,120,"{""n"": 3, ""tags"": [""x"", ""y""]}"\n'
        "videos/b.mp4,a dog,64,{not json\n"
        'videos/c.mp4,ein Bär,,"{""tags"": []}"\n'
    )
    report = prepare_dataset(
        tmp_path / "meta.csv",
        probe_av=False,  # the media are fake bytes, not videos
        columns=["frames=num_frames", "chars=len(text)", "n=meta[n]", "ntags=len(meta[tags])"],
    )
    assert report.num_samples == 2
    (problem,) = report.problems  # JSON text followed by a path must be JSON
    assert problem.key == "meta/1" and "'meta' is not valid JSON" in problem.reason
    assert "meta.csv" in problem.path
    ds = open_dataset(tmp_path)
    assert _col(ds, "frames") == [120, NAN]
    assert _col(ds, "chars") == [5, 7]
    assert _col(ds, "n") == [3, NAN]
    assert _col(ds, "ntags") == [2, 0]
    assert _col(ds, "path.bytes") == [5, 5]  # the media columns' own statistics stay


def row_stats(row: dict[str, bytes]) -> dict[str, float]:
    """An extra-column function: gets the row as ``ds.read(i)`` gives it."""
    return {"words": len(row["text"].split()), "media": len(row["mp4"])}


def test_extra_columns_function_gets_the_row(tmp_path):
    (tmp_path / "v.mp4").write_bytes(b"12345")
    table = _jsonl(tmp_path / "t.jsonl", [{"path": "v.mp4", "text": w} for w in ("a b", "c")])
    prepare_dataset(table, probe_av=False, extra_columns_fn=row_stats)
    ds = open_dataset(tmp_path)
    assert _col(ds, "words") == [2, 1] and _col(ds, "media") == [5, 5]


@pytest.mark.parametrize(
    ("column", "message"),
    [
        ("x=text", r"text values are not numbers; len\(text\) gives its length"),
        ("x=tokens", r"list values are not numbers; len\(tokens\) gives its length"),
        ("x=len(score)", r"len\(\) of a number"),
        ("x=score[a]", r"a number has no \[a\]"),
        ("x=len(json[tokens])", r"the table has no column 'json'"),
        ("x=len(path)", r"names a media file; its size is the column 'path.bytes'"),
        ("score=len(tokens)", r"'score' is a column of the table"),
    ],
)
def test_what_cannot_give_a_number_is_refused(tmp_path, column, message):
    (tmp_path / "v.mp4").write_bytes(b"v")
    table = _jsonl(
        tmp_path / "t.jsonl", [{"path": "v.mp4", "text": "a", "tokens": [1], "score": 2}]
    )
    with pytest.raises(ConfigError, match=message) as e:
        prepare_dataset(table, columns=[column], probe_av=False)
    assert "t.jsonl" in str(e.value) and f"column {column.split('=')[0]!r}" in str(e.value)
    assert not (tmp_path / ".fpipe").exists()  # refused before anything was written


def _token_table(folder, n, median, seed):
    rng = np.random.default_rng(seed)
    lengths = np.maximum(1, np.round(rng.lognormal(np.log(median), 0.5, n))).astype(int)
    rows = [{"text": f"doc {i}", "tokens": list(range(k))} for i, k in enumerate(lengths)]
    table = _jsonl(folder / "docs.jsonl", rows)
    assert main(["prepare", str(table), "--column", "ntok=len(tokens)"]) == 0
    return lengths


def test_a_table_token_column_drives_packing_and_a_token_blend(tmp_path, capsys):
    short = _token_table(tmp_path / "short", 300, 5, 1)
    _token_table(tmp_path / "long", 300, 50, 2)
    check_token_column_use(tmp_path, short)
