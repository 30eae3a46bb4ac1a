"""Energon's JSONL datasets: a crude sample carries the parsed line under ``sample["json"]``,
where Energon's cookers read it (Energon 7.4 ``flavors/jsonl/crude_jsonl_dataset.py``: the
line is ``json.loads``-ed into ``sample["json"]``); the columns stay where fpipe puts them."""

from __future__ import annotations

import json
from collections import Counter

from fpipe.energon import (
    Cooker,
    CrudeSample,
    DefaultTaskEncoder,
    Sample,
    WorkerConfig,
    basic_sample_keys,
    edataclass,
    get_loader,
    get_train_dataset,
    get_val_dataset,
    stateless,
)

WC = WorkerConfig(rank=0, world_size=1, num_workers=0)


@edataclass
class IdxText(Sample):
    idx: int
    text: str
    even: bool


@stateless()
def cook_line(sample: CrudeSample) -> IdxText:
    line = sample["json"]
    return IdxText(**basic_sample_keys(sample), idx=line["idx"], text=line["txt"],
                   even=line["meta"]["even"])  # fmt: skip


class LineEncoder(DefaultTaskEncoder):
    cookers = [Cooker(cook=cook_line)]


def _write(path, n):
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"idx": i, "txt": f"t{i}", "meta": {"even": i % 2 == 0}}) + "\n")
    return path


def test_jsonl_cookers_read_sample_json(tmp_path):
    path = _write(tmp_path / "lines.jsonl", 12)
    ds = get_val_dataset(path, batch_size=4, worker_config=WC, task_encoder=LineEncoder())
    got = [(int(i), t, bool(e)) for b in get_loader(ds) for i, t, e in zip(b.idx, b.text, b.even)]
    assert got == [(i, f"t{i}", i % 2 == 0) for i in range(12)]
    train = get_train_dataset(
        path,
        batch_size=1,
        worker_config=WC,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        task_encoder=LineEncoder(),
    )
    seen = Counter(t for _, b in zip(range(24), get_loader(train)) for t in b.text)
    assert seen == Counter({f"t{i}": 2 for i in range(12)})


def test_the_columns_stay_at_the_top_level(tmp_path):
    path = _write(tmp_path / "lines.jsonl", 3)
    seen = []

    @stateless()
    def keep(sample):
        seen.append({k: sample[k] for k in ("idx", "txt", "json")})
        return IdxText(**basic_sample_keys(sample), idx=0, text="", even=False)

    class Keep(DefaultTaskEncoder):
        cookers = [Cooker(cook=keep)]

    list(get_loader(get_val_dataset(path, batch_size=3, worker_config=WC, task_encoder=Keep())))
    assert seen[0] == {"idx": 0, "txt": "t0",
                       "json": {"idx": 0, "txt": "t0", "meta": {"even": True}}}  # fmt: skip
