"""A metadataset chooses its weighted blend's draw (``blend_draw: quota`` next to the
split's top-level ``blend:``): the stream is the one ``blend_draw="quota"`` gives, the choice
reaches the snapshot check, and a conflict with the Python argument or an unknown value is an
error naming the file and the key."""

from __future__ import annotations

import json
from typing import get_args

import pytest

import fpipe
from fpipe.core.errors import ConfigError, SnapshotError
from fpipe.plan.blend_state import BlendDraw
from fpipe.storage.config.metadataset import BLEND_DRAWS

NAMES = ("a.jsonl", "b.jsonl", "c.jsonl")
BLEND = "".join(f"      - {{weight: {w}, path: {n}}}\n" for w, n in zip((3, 2, 1), NAMES))


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("draw")
    for name, n in (("a", 120), ("b", 80), ("c", 60)):
        with open(root / f"{name}.jsonl", "w") as f:
            f.writelines(json.dumps({"text": f"{name} {i}"}) + "\n" for i in range(n))
    (root / "mix.yaml").write_text("splits:\n  train:\n    blend:\n" + BLEND)
    for draw in ("quota", "hash", "exact"):
        (root / f"{draw}.yaml").write_text(
            f"splits:\n  train:\n    blend_draw: {draw}\n    blend:\n" + BLEND
        )
    return root


def dataset(root, name, **kw):
    args = dict(global_batch_size=8, seed=3, sample_type="TextSample", field_map={"text": "text"})
    return fpipe.get_train_dataset(str(root / name), **{**args, **kw})


def keys(ds, steps=12) -> list[list[str]]:
    return [list(b.__key__) for _, b in zip(range(steps), fpipe.get_loader(ds))]


def test_the_file_key_chooses_the_quota_draw(root):
    by_file = keys(dataset(root, "quota.yaml"))
    assert by_file == keys(dataset(root, "mix.yaml", blend_draw="quota"))
    assert by_file != keys(dataset(root, "mix.yaml"))
    # the argument may say the same as the file
    assert keys(dataset(root, "quota.yaml", blend_draw="quota")) == by_file
    assert keys(dataset(root, "hash.yaml")) == keys(dataset(root, "mix.yaml"))


def test_the_files_draw_reaches_the_snapshot_check(root):
    loader = fpipe.get_loader(dataset(root, "quota.yaml"))
    for _, _batch in zip(range(3), loader):
        pass
    snap = loader.snapshot()
    with pytest.raises(SnapshotError, match="field .draw. differs"):
        fpipe.get_loader(dataset(root, "mix.yaml")).load_state_dict(snap)
    fpipe.get_loader(dataset(root, "mix.yaml", blend_draw="quota")).load_state_dict(snap)


@pytest.mark.parametrize(("name", "arg"), [("quota.yaml", "hash"), ("hash.yaml", "quota")])
def test_a_file_and_an_argument_that_disagree_are_refused(root, name, arg):
    with pytest.raises(ConfigError, match=rf"{name}: splits\.train: blend_draw") as e:
        dataset(root, name, blend_draw=arg)
    assert f"blend_draw={arg!r}" in str(e.value)


def test_an_unknown_draw_is_refused_naming_the_file_key_and_values(root):
    with pytest.raises(ConfigError, match=r"exact\.yaml: splits\.train: blend_draw") as e:
        dataset(root, "exact.yaml")
    assert "'hash' or 'quota'" in str(e.value) and "'exact'" in str(e.value)


def test_the_draw_belongs_to_the_top_level_weighted_blend(root):
    epochized = "".join(f"      - {{repetitions: 1, path: {n}}}\n" for n in NAMES)
    (root / "epochized.yaml").write_text(
        "splits:\n  train:\n    blend_draw: quota\n    blend_epochized:\n" + epochized
    )
    with pytest.raises(ConfigError, match=r"epochized\.yaml: splits\.train: 'blend_draw'"):
        dataset(root, "epochized.yaml")
    # a nested file's blend is flattened into the outer blend: one draw, the outer file's
    (root / "outer.yaml").write_text(
        "splits:\n  train:\n    blend:\n      - {weight: 1, path: quota.yaml}\n"
        "      - {weight: 1, path: a.jsonl, name: a2}\n"
    )
    with pytest.raises(ConfigError, match=r"quota\.yaml: splits\.train: 'blend_draw'"):
        dataset(root, "outer.yaml")


def test_the_files_draws_are_the_blends():
    assert set(BLEND_DRAWS) == set(get_args(BlendDraw))


@pytest.mark.parametrize(("draw", "other"), [("quota", "hash"), ("hash", "quota")])
def test_info_shows_the_draw_the_file_chooses(root, draw, other):
    from fpipe.cli._info import format_metadataset_info

    text = format_metadataset_info(str(root / f"{draw}.yaml"))
    assert f"split train: blend, 3 dataset(s), draw {draw}\n" in text
    assert f"draw {other}" not in text and "default" not in text


def test_info_shows_the_default_draw_when_the_file_sets_none(root, capsys):
    from fpipe.cli.main import main

    assert main(["info", str(root / "mix.yaml")]) == 0
    out = capsys.readouterr().out
    assert "split train: blend, 3 dataset(s), draw hash (the default)\n" in out
    assert "draw quota" not in out
