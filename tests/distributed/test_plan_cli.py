"""``fpipe plan CONFIG --step N`` names the keys the loader delivers at step N on each rank;
``fpipe state show FILE`` prints a snapshot's envelope and state."""

from __future__ import annotations

import json

import pytest
import yaml

import fpipe
from fpipe.cli.main import main
from fpipe.core.snapshot import FORMAT_VERSION
from tests.distributed.helpers import batch_keys, build_dataset

SETTINGS = dict(
    global_batch_size=6, shuffle_buffer_size=8, max_samples_per_sequence=4, seed=11, num_epochs=2
)


def _config(tmp_path, dataset, **over) -> str:
    cfg = {"path": dataset, "world_size": 2, **SETTINGS, **over}
    p = tmp_path / "plan.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return str(p)


def _plan(capsys, *argv) -> dict:
    assert main(["plan", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _delivered(dataset, world, step, **over):
    settings = {**SETTINGS, **over}
    if "batch_size" in over:
        settings.pop("global_batch_size")
    out = []
    for r in range(world):
        loader = fpipe.get_loader(build_dataset(dataset, rank=r, world_size=world, **settings))
        for i, b in enumerate(loader):
            if i == step:
                out.append(batch_keys(b))
                break
    return out


@pytest.mark.parametrize("step", [0, 5, 9, 15])
def test_plan_matches_loader_global(text_dataset, tmp_path, capsys, step):
    got = _plan(capsys, _config(tmp_path, text_dataset), "--step", str(step))
    assert got["distribution"] == "global" and got["world_size"] == 2
    keys = [[s["key"] for s in r["samples"]] for r in got["ranks"]]
    assert keys == _delivered(text_dataset, 2, step)


def test_plan_matches_loader_per_rank_and_flags(text_dataset, tmp_path, capsys):
    # a dataset folder plus flags instead of a YAML file; flags override
    got = _plan(
        capsys, text_dataset, "--batch-size", "2", "--world-size", "3", "--seed", "11",
        "--shuffle-buffer-size", "8", "--max-samples-per-sequence", "4", "--num-epochs", "2",
        "--distribution", "per_rank", "--step", "4",
    )  # fmt: skip
    keys = [[s["key"] for s in r["samples"]] for r in got["ranks"]]
    assert keys == _delivered(text_dataset, 3, 4, batch_size=2, distribution="per_rank")


def test_plan_text_output_and_errors(text_dataset, tmp_path, capsys):
    cfg = _config(tmp_path, text_dataset)
    assert main(["plan", cfg, "--step", "3", "--rank", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("step 3: 2 rank(s) x batch 3 (global mode)")
    assert "rank 1 (3 samples)" in out
    assert "rank 0" not in out
    assert main(["plan", cfg, "--step", "1000"]) == 1  # past the end (2 epochs = 16 steps)
    assert "past the end" in capsys.readouterr().out
    assert main(["plan", cfg, "--step", "0", "--world-size", "4"]) == 2  # 6 % 4 != 0
    assert "not a positive multiple" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"path": text_dataset, "batch_size": 2, "shufle": 3}))
    assert main(["plan", str(bad), "--step", "0"]) == 2
    assert "unknown keys ['shufle']" in capsys.readouterr().err


def test_plan_relative_dataset_path(text_dataset, tmp_path, capsys):
    import os

    rel = os.path.relpath(text_dataset, tmp_path)
    got = _plan(capsys, _config(tmp_path, rel), "--step", "2")
    assert [[s["key"] for s in r["samples"]] for r in got["ranks"]] == _delivered(
        text_dataset, 2, 2
    )


def test_state_show(text_dataset, tmp_path, capsys):
    import torch

    loader = fpipe.get_loader(build_dataset(text_dataset, rank=1, world_size=2, **SETTINGS))
    it = iter(loader)
    for _ in range(3):
        next(it)
    raw = tmp_path / "state.bin"
    raw.write_bytes(loader.snapshot())
    pt = tmp_path / "state.pt"
    torch.save({"loader": loader.state_dict()}, pt)

    assert main(["state", "show", str(raw), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert (
        info["kind"] == "loader"
        and info["checksum_ok"]
        and info["format_version"] == FORMAT_VERSION
    )
    assert [p["name"] for p in info["parts"]][-3:] == ["distribute", "batch", "loader"]
    assert info["payload"][1:3] == [3, 9]  # batches, samples (plain values)

    cfg = _config(tmp_path, text_dataset)
    assert main(["state", "show", str(pt), "--config", cfg]) == 0
    out = capsys.readouterr().out
    assert "fpipe loader snapshot" in out and '"__type__": "BatchState"' in out
    assert '"step": 3' in out
    # each step with its whole config, then its own state
    assert 'window_shuffle (WindowShuffleConfig): {"window_size": 8}' in out
    assert main(["state", "show", str(pt), "--config", cfg, "--json"]) == 0
    steps = {s["name"]: s for s in json.loads(capsys.readouterr().out)["steps"]}
    assert steps["batch"]["config"]["batch_size"] == 3 and steps["batch"]["state"]["step"] == 3
    assert (
        steps["slice_shuffle"]["state"] is None and "slice_size" in steps["slice_shuffle"]["config"]
    )

    # another config: refused, naming the difference
    assert main(["state", "show", str(raw), "--config", cfg, "--seed", "12"]) == 2
    assert "seed" in capsys.readouterr().err
    # corrupted bytes
    data = bytearray(raw.read_bytes())
    data[-1] ^= 1
    raw.write_bytes(bytes(data))
    assert main(["state", "show", str(raw)]) == 2
    assert "MISMATCH" in capsys.readouterr().out
