"""Lineage: ``find_key`` finds a sample at exactly the (step, rank, position) where ``fpipe plan
--step`` lists it; ``--steps A:B --keys`` dumps the samples of steps; skipped steps are shown."""

from __future__ import annotations

import json

import msgspec
import pytest
import yaml

from fpipe.cli.main import main
from fpipe.core.errors import ConfigError
from fpipe.datasets.lineage import find_key, step_samples
from fpipe.datasets.plan_config import load_plan_config
from fpipe.datasets.plan_queries import plan_step
from fpipe.plan import pack

BASE = dict(seed=5, shuffle_buffer_size=8, max_samples_per_sequence=4, num_epochs=2)

CONFIGS = {
    "global": dict(world_size=2, global_batch_size=6),
    "global_short_last": dict(world_size=3, global_batch_size=9, drop_last=False),
    "per_rank": dict(world_size=2, batch_size=2, distribution="per_rank"),
}


def _cfg(text_dataset, **over):
    return load_plan_config(text_dataset, {**BASE, **over})


def _places_by_plan_step(cfg) -> dict[str, list[tuple[int, int, int, int]]]:
    """key -> (step, rank, position, epoch) from plan_step, step by step to the end."""
    places: dict[str, list] = {}
    step = 0
    while True:
        got = plan_step(cfg, step)
        if all(r["samples"] is None for r in got["ranks"]):
            return places
        for r in got["ranks"]:
            for pos, s in enumerate(r["samples"] or ()):
                places.setdefault(s["key"], []).append((step, r["rank"], pos, s["epoch"]))
        step += 1


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_find_key_agrees_with_plan_step(text_dataset, name):
    cfg = _cfg(text_dataset, **CONFIGS[name])
    places = _places_by_plan_step(cfg)
    assert len(places) == 48
    for key in ["shard-00/00000", "shard-01/00017", "shard-03/00047"]:
        got = find_key(cfg, key)
        hits = [(h["step"], h["rank"], h["position"], h["epoch"]) for h in got["hits"]]
        assert hits == places[key], (name, key)
    rows = list(step_samples(cfg, (0, 1000)))
    dumped: dict[str, list] = {}
    for r in rows:
        dumped.setdefault(r["key"], []).append((r["step"], r["rank"], r["position"], r["epoch"]))
    assert dumped == places


def test_find_key_with_plan_tier_packs(text_dataset):
    """Packs: a rank's batch is its packs one after the other; positions agree with plan_step."""
    stages = (pack({"text.chars": 20}, strategy="ffd", packing_buffer_size=12),)
    plain = _cfg(text_dataset, world_size=2, batch_size=2)
    packed = msgspec.structs.replace(
        plain,
        options=msgspec.structs.replace(plain.options, plan_stages=stages, columns=("text.chars",)),
    )
    places = _places_by_plan_step(packed)
    assert places != _places_by_plan_step(plain)  # packing changed the batches
    for key in ["shard-00/00003", "shard-02/00030"]:
        hits = [(h["step"], h["rank"], h["position"], h["epoch"])
                for h in find_key(packed, key)["hits"]]  # fmt: skip
        assert hits == places[key]


def test_find_key_range_and_errors(text_dataset):
    cfg = _cfg(text_dataset, world_size=2, global_batch_size=6)
    everything = find_key(cfg, "shard-00/00005")["hits"]
    first = everything[0]["step"]
    part = find_key(cfg, "shard-00/00005", (first, first + 1))
    assert part["hits"] == everything[:1] and part["scanned_refs"] == 6
    with pytest.raises(ConfigError, match="keys look like"):
        find_key(cfg, "00005")
    endless = load_plan_config(text_dataset, {"global_batch_size": 6})
    with pytest.raises(ConfigError, match="--steps"):
        find_key(endless, "shard-00/00005")
    assert len(find_key(endless, "shard-00/00005", "0:40")["hits"]) == 5  # 40 steps: 5 epochs


def _yaml(tmp_path, text_dataset, **over) -> str:
    p = tmp_path / "plan.yaml"
    p.write_text(yaml.safe_dump({"path": text_dataset, "world_size": 2, "global_batch_size": 6,
                                 **BASE, **over}))  # fmt: skip
    return str(p)


def test_cli_find_keys_and_skipped_steps(text_dataset, tmp_path, capsys):
    cfg = _yaml(tmp_path, text_dataset, skip_steps=[[2, 4]])
    assert main(["plan", cfg, "--step", "3"]) == 0
    assert "SKIPPED" in capsys.readouterr().out
    assert main(["plan", cfg, "--step", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["skipped"] is True
    assert main(["plan", cfg, "--step", "4", "--json"]) == 0
    step4 = json.loads(capsys.readouterr().out)
    assert step4["skipped"] is False

    assert main(["plan", cfg, "--steps", "3:5", "--keys"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    expected = [(step, rank) for step in (3, 4) for rank in (0, 1) for _ in range(3)]
    assert [(r["step"], r["rank"]) for r in rows] == expected
    assert all(r.get("skipped") for r in rows[:6]) and not any("skipped" in r for r in rows[6:])
    assert [r["key"] for r in rows[6:9]] == [s["key"] for s in step4["ranks"][0]["samples"]]

    key = rows[7]["key"]
    assert main(["plan", cfg, "--find", key, "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert {"step": 4, "rank": 0, "position": 1} in [
        {k: h[k] for k in ("step", "rank", "position")} for h in found["hits"]
    ]
    assert main(["plan", cfg, "--find", key, "--steps", "0:8"]) == 0
    assert f"{key} (" in capsys.readouterr().out
    assert main(["plan", cfg, "--keys"]) == 2
    assert "--keys needs --steps" in capsys.readouterr().err
    assert main(["plan", cfg, "--find", "nope"]) == 2
    assert "no sample with key 'nope'" in capsys.readouterr().err
