"""User columns (``--column NAME=SPEC``) of Parquet datasets: computed from the files' columns
with pyarrow, written to the index, and usable as packing budgets and blend units; what cannot
give a number is refused before a row is read."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fpipe.cli.main import main
from fpipe.core.errors import ConfigError
from fpipe.storage import open_dataset, prepare_dataset
from tests.helpers import check_token_column_use

META = pa.struct([("n", pa.int32()), ("tags", pa.list_(pa.string()))])


def _write(root, rows, row_group=3):
    """``rows`` dicts as ``root/train.parquet`` with typed columns, ``row_group`` rows a group."""
    root.mkdir(parents=True, exist_ok=True)
    cols = {
        "text": pa.array([r.get("text") for r in rows], pa.string()),
        "input_ids": pa.array([r.get("ids") for r in rows], pa.list_(pa.int32())),
        "meta": pa.array([r.get("meta") for r in rows], META),
        "doc": pa.array([r.get("doc") for r in rows], pa.string()),
        "score": pa.array([r.get("score") for r in rows], pa.float32()),
    }
    pq.write_table(pa.table(cols), root / "train.parquet", row_group_size=row_group)
    return root


def test_columns_are_computed_from_the_parquet_columns(tmp_path):
    rows = [
        {"text": "héllo", "ids": [5, 6, 7], "meta": {"n": 2, "tags": ["a"]}, "doc": '{"a": [4]}'},
        {"text": "", "ids": [], "meta": {"n": 9, "tags": []}, "doc": '{"a": [1.5, 2]}'},
        {"text": "xy", "ids": [1], "meta": None, "doc": '{"b": 1}', "score": 0.5},
        {"text": "abcd", "ids": None, "meta": {"n": None, "tags": None}, "doc": None},
        {"text": "z", "ids": [8, 9], "meta": {"n": 4, "tags": ["p", "q"]}, "doc": "[]"},
    ]
    root = _write(tmp_path / "ds", rows)
    report = prepare_dataset(
        root,
        columns=[
            "ntok=len(input_ids)",
            "first=input_ids[0]",
            "last=input_ids[-1]",
            "n=meta[n]",
            "ntags=len(meta[tags])",
            "chars=len(text)",
            "a0=doc[a][0]",
            "n_or_first=meta[n],input_ids[0]",
            "score2=score",
        ],
    )
    assert {"ntok", "first", "last", "n", "ntags", "chars", "a0", "n_or_first"} <= set(
        report.columns
    )
    ds = open_dataset(root)
    col = lambda name: np.asarray(ds.column(name)).tolist()  # noqa: E731
    nan = pytest.approx(float("nan"), nan_ok=True)
    assert col("ntok") == [3, 0, 1, nan, 2]  # a null list has no length
    assert col("first") == [5, nan, 1, nan, 8]  # an empty list has no first item
    assert col("last") == [7, nan, 1, nan, 9]
    assert col("n") == [2, 9, nan, nan, 4]
    assert col("ntags") == [1, 0, nan, nan, 2]
    assert col("chars") == [5, 0, 2, 4, 1]  # characters, not UTF-8 bytes
    assert np.asarray(ds.column("chars")).dtype == np.int64  # every row has an integer
    assert col("a0") == [4, 1.5, nan, nan, nan]  # JSON text, followed row by row
    assert col("n_or_first") == [2, 9, 1, nan, 4]  # the first alternative with a value
    assert col("score2") == [nan, nan, 0.5, nan, nan]


def test_a_row_with_bad_json_is_left_out_and_named(tmp_path):
    rows = [{"text": "t", "doc": d} for d in ('{"a": [1]}', "{not json", '{"a": [3]}')]
    root = _write(tmp_path / "ds", rows)
    report = prepare_dataset(root, columns=["a0=doc[a][0]"])
    assert report.num_samples == 2
    (problem,) = report.problems
    assert problem.key == "train/1" and "'doc' is not valid JSON" in problem.reason
    assert np.asarray(open_dataset(root).column("a0")).tolist() == [1, 3]


@pytest.mark.parametrize(
    ("column", "message"),
    [
        ("x=text", r"a string value is not a number; len\(text\) gives its length"),
        ("x=input_ids", r"len\(input_ids\) gives its length"),
        ("x=len(score)", r"len\(\) of a float value"),
        ("x=score[a]", r"a float value has no \[a\]"),
        ("x=meta[nope]", r"the struct has no field 'nope'"),
        ("x=input_ids[a]", r"a list is indexed by position"),
        ("x=len(json[tokens])", r"the file has no column 'json'"),
        ("x=meta", r"not a number"),
    ],
)
def test_what_cannot_give_a_number_is_refused(tmp_path, column, message):
    root = _write(tmp_path / "ds", [{"text": "a", "ids": [1], "score": 1.0}])
    with pytest.raises(ConfigError, match=message) as e:
        prepare_dataset(root, columns=[column])
    assert "column 'x'" in str(e.value) and "train.parquet" in str(e.value)
    assert not (root / ".fpipe").exists()  # refused before anything was written


def test_extra_columns_fn_is_refused_for_parquet(tmp_path):
    root = _write(tmp_path / "ds", [{"text": "a"}])
    with pytest.raises(ConfigError, match=r"--column\): NAME=COLUMN"):
        prepare_dataset(root, extra_columns_fn="json:dumps")


def _token_dataset(root, n, median, seed):
    rng = np.random.default_rng(seed)
    lengths = np.maximum(1, np.round(rng.lognormal(np.log(median), 0.5, n))).astype(int)
    rows = [{"text": f"{root.name} {i}", "ids": list(range(k))} for i, k in enumerate(lengths)]
    _write(root, rows, row_group=64)
    assert main(["prepare", str(root), "--column", "ntok=len(input_ids)"]) == 0
    return lengths


def test_a_token_column_drives_packing_and_a_token_blend(tmp_path, capsys):
    short = _token_dataset(tmp_path / "short", 400, 5, 1)
    _token_dataset(tmp_path / "long", 400, 50, 2)
    check_token_column_use(tmp_path, short)
