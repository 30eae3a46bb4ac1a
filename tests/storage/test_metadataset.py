"""metadataset.yaml parsing: Energon's MetadatasetV2 forms, nesting, and the errors users get."""

from __future__ import annotations

import textwrap

import pytest

from fpipe.core.errors import ConfigError
from fpipe.storage.config.metadataset import JoinPart, MixSchedule, load_metadataset, resolve_mix


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def dirs(tmp_path):
    for name in ("coco", "coyo", "laion", "ocr"):
        (tmp_path / "data" / name).mkdir(parents=True)
    return tmp_path


ENERGON_EXAMPLE = """\
    __module__: megatron.energon
    __class__: MetadatasetV2
    splits:
      train:
        blend:
          - weight: 5
            path: ./data/coco
            subflavors: {augmentation_type: small_images, text_length: short}
          - weight: 2
            path: ./data/coyo
            split_part: train
          - weight: 1
            path: ./data/coyo
            split_part: val
      val:
        path: ./data/coco
      test:
        path: ./data/coyo
"""


def test_energon_example_weights_paths_subflavors(dirs):
    md = load_metadataset(write(dirs / "mix.yaml", ENERGON_EXAMPLE))
    mix = resolve_mix(md, "train")
    assert mix.mode == "blend"
    assert [lf.name for lf in mix.leaves] == ["coco", "coyo.train", "coyo.val"]
    assert [lf.weight for lf in mix.leaves] == pytest.approx([5 / 8, 2 / 8, 1 / 8])
    assert [lf.path for lf in mix.leaves] == [
        str(dirs / "data" / n) for n in ("coco", "coyo", "coyo")
    ]
    assert [lf.split_part for lf in mix.leaves] == ["train", "train", "val"]
    assert mix.leaves[0].subflavors == {"augmentation_type": "small_images", "text_length": "short"}
    assert mix.schedule.points == (0,)
    val = resolve_mix(md, "val", training=False)
    assert val.mode == "single" and val.leaves[0].split_part == "val"


def test_three_level_nesting_subflavors_and_split_part(dirs):
    # level 3: a plain blend; level 2: blends level 3 and takes laion's val part into train;
    # level 1: the file users load.
    write(
        dirs / "l3" / "inner.yaml",
        """\
        splits:
          train:
            blend:
              - {weight: 1, path: ../data/ocr, subflavors: {kind: ocr, level: three}}
              - {weight: 3, path: ../data/coyo}
          val:
            path: ../data/ocr
        """,
    )
    write(
        dirs / "l2" / "middle.yaml",
        """\
        __module__: megatron.energon
        __class__: MetadatasetV2
        splits:
          train:
            blend:
              - weight: 1
                path: ../l3/inner.yaml
                subflavors: {level: two}
              - weight: 1
                path: ../data/laion
                split_part: val
                subflavors: {kind: web}
        """,
    )
    top = write(
        dirs / "top.yaml",
        """\
        splits:
          train:
            blend:
              - {weight: 3, path: ./data/coco, subflavors: {kind: caption}}
              - {weight: 1, path: ./l2/middle.yaml, subflavors: {source: mix}}
        """,
    )
    mix = resolve_mix(load_metadataset(top), "train")
    by = {lf.name: lf for lf in mix.leaves}
    assert sorted(by) == ["coco", "middle/inner/coyo", "middle/inner/ocr", "middle/laion.val"]
    # Weights: normalized at every level, multiplied down.
    assert by["coco"].weight == pytest.approx(3 / 4)
    assert by["middle/inner/ocr"].weight == pytest.approx(1 / 4 * 1 / 2 * 1 / 4)
    assert by["middle/inner/coyo"].weight == pytest.approx(1 / 4 * 1 / 2 * 3 / 4)
    assert by["middle/laion.val"].weight == pytest.approx(1 / 4 * 1 / 2)
    assert sum(lf.weight for lf in mix.leaves) == pytest.approx(1)
    # Subflavors: merged down the levels; the outer level wins on a clash (Energon's order).
    assert by["middle/inner/ocr"].subflavors == {"kind": "ocr", "level": "two", "source": "mix"}
    assert by["middle/laion.val"].subflavors == {"kind": "web", "source": "mix"}
    # split_part picks the inner split; the default is the split being built.
    assert by["middle/laion.val"].split_part == "val"
    assert by["middle/inner/coyo"].split_part == "train"
    assert by["middle/inner/ocr"].path == str(dirs / "data" / "ocr")


def test_epochized_repetitions_multiply_down(dirs):
    write(
        dirs / "inner.yaml",
        """\
        splits:
          train:
            blend_epochized:
              - {repetitions: 2, path: ./data/ocr}
              - {repetitions: 0.5, path: ./data/laion}
        """,
    )
    top = write(
        dirs / "top.yaml",
        """\
        splits:
          train:
            blend_epochized:
              - {repetitions: 3, path: ./data/coco}
              - {repetitions: 2, path: ./inner.yaml}
        """,
    )
    mix = resolve_mix(load_metadataset(top), "train")
    assert mix.mode == "blend_epochized" and mix.schedule is None
    assert [(lf.name, lf.repetitions) for lf in mix.leaves] == [
        ("coco", 3),
        ("inner/ocr", 4),
        ("inner/laion", 1),
    ]
    val = resolve_mix(load_metadataset(top), "train", training=False)
    assert val.mode == "concat" and {lf.repetitions for lf in val.leaves} == {1.0}


def test_schedule_yaml(dirs):
    top = write(
        dirs / "top.yaml",
        """\
        splits:
          train:
            blend:
              - {path: ./data/coco}
              - {path: ./data/coyo}
            schedule: [[0, {coco: 1, coyo: 1}], [1000000, {coco: 1, coyo: 3}]]
            schedule_mode: linear
        """,
    )
    s = resolve_mix(load_metadataset(top), "train").schedule
    assert isinstance(s, MixSchedule)  # plain data: the plan tier builds its own schedule
    assert s.points == (0, 1_000_000) and s.linear
    assert s.weights == ((1.0, 1.0), (1.0, 3.0))


@pytest.mark.parametrize(
    ("train", "message"),
    [
        ("blend: [{weight: 1, path: ./data/coco, wieght: 2}]", "unknown key(s) ['wieght']"),
        ("blend: [{weight: -1, path: ./data/coco}]", "weight must be a finite number >= 0"),
        ("blend: [{weight: 0, path: ./data/coco}, {weight: 0, path: ./data/coyo}]", "all weights"),
        ("blend: [{weight: 1, path: ./data/nope}]", "path './data/nope' does not exist"),
        ("blend: [{weight: [1], path: ./data/coco}]", "weight must be a number"),
        ("blend_epochized: [{repetitions: 0, path: ./data/coco}]", "repetitions must be > 0"),
        ("{path: ./data/coco, blend: []}", "exactly one of"),
        ("blend: [{path: ./data/coco}, {path: ./data/coco}]", "two datasets are named 'coco'"),
        (
            "{blend: [{path: ./data/coco}], schedule: [[0, {cocoa: 1}]]}",
            "unknown dataset(s) ['cocoa']",
        ),
        (
            "{blend: [{path: ./data/coco}], schedule: [[5, {coco: 1}]]}",
            "first point must be at position 0",
        ),
        (
            "{blend: [{path: ./data/coco}], schedule: [[0, {coco: 1}], [0, {coco: 2}]]}",
            "positions must increase",
        ),
    ],
)
def test_errors_name_file_and_entry(dirs, train, message):
    path = write(dirs / "bad.yaml", f"splits:\n  train:\n    {train}\n")
    with pytest.raises(ConfigError) as e:
        load_metadataset(path)
    assert str(path) in str(e.value)
    assert message in str(e.value)
    if "[" in train and "exactly" not in message and "named" not in message:
        assert "splits.train" in str(e.value)


def test_unknown_top_level_key_and_class(dirs):
    path = write(dirs / "a.yaml", "splits: {train: {path: ./data/coco}}\nsplitz: 1\n")
    with pytest.raises(ConfigError, match=r"top level: unknown key\(s\) \['splitz'\]"):
        load_metadataset(path)
    path = write(
        dirs / "b.yaml",
        "__module__: megatron.energon\n__class__: Metadataset\nsplits: {train: {path: x}}\n",
    )
    with pytest.raises(ConfigError, match="version-1 split is a mapping with 'datasets:'"):
        load_metadataset(path)  # Energon's version-1 class, with a version-2 split
    path = write(dirs / "c.yaml", "__class__: MetadatasetV3\nsplits: {train: {path: x}}\n")
    with pytest.raises(ConfigError, match="MetadatasetV3.*not supported"):
        load_metadataset(path)


def test_cycle_between_nested_files(dirs):
    write(dirs / "a.yaml", "splits: {train: {blend: [{path: ./b.yaml}, {path: ./data/coco}]}}\n")
    write(dirs / "b.yaml", "splits: {train: {path: ./a.yaml}}\n")
    with pytest.raises(ConfigError, match="cycle") as e:
        load_metadataset(dirs / "a.yaml")
    assert "a.yaml -> " in str(e.value) and "b.yaml" in str(e.value)


def test_nested_split_missing(dirs):
    write(dirs / "inner.yaml", "splits: {train: {path: ./data/coco}}\n")
    path = write(dirs / "top.yaml", "splits: {val: {path: ./inner.yaml}}\n")
    with pytest.raises(ConfigError, match="has no split 'val'"):
        load_metadataset(path)


def test_yaml_tags_are_not_executed(dirs):
    path = write(dirs / "evil.yaml", "splits: !!python/object/apply:os.system ['echo hi']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_metadataset(path)


def test_join_entries(dirs):
    path = write(
        dirs / "j.yaml",
        """\
        splits:
          train:
            blend:
              - weight: 1
                join:
                  - {path: ./data/coco}
                  - {path: ./data/ocr, nonmatch: skip}
                joiner: {__module__: megatron.energon, __class__: CaptioningSample}
              - {weight: 1, path: ./data/coyo}
        """,
    )
    mix = resolve_mix(load_metadataset(path), "train")
    j = mix.leaves[0]
    assert j.name == "coco" and j.joiner == "megatron.energon.CaptioningSample"
    assert j.join == (
        JoinPart(path=str(dirs / "data" / "ocr"), split_part="train", nonmatch="skip"),
    )


def test_same_folder_name_in_two_places_is_named_by_its_parent(dirs):
    # The layout of Megatron-LM's recipe: .../a/wds and .../b/wds, in a version-1 blend.
    for parent in ("a", "b"):
        (dirs / "data" / parent / "wds").mkdir(parents=True)
    md = load_metadataset(
        write(
            dirs / "v1.yaml",
            """\
            __module__: megatron.energon
            __class__: Metadataset
            splits:
              train:
                datasets:
                  - {weight: 1, path: ./data/a/wds}
                  - {weight: 3, path: ./data/b/wds}
                  - {weight: 1, path: ./data/coco}
            """,
        )
    )
    mix = resolve_mix(md, "train")
    assert [lf.name for lf in mix.leaves] == ["a/wds", "b/wds", "coco"]
    assert [lf.weight for lf in mix.leaves] == pytest.approx([0.2, 0.6, 0.2])
    val = resolve_mix(md, "train", training=False)
    assert [lf.name for lf in val.leaves] == ["a/wds", "b/wds", "coco"]


def test_a_dataset_that_cannot_be_opened_names_the_metadataset_and_the_path(dirs):
    # data/coco exists (so the file checks) but holds no dataset: the error says which entry of
    # which file named it, and the folder it tried
    import fpipe

    path = write(
        dirs / "mix.yaml", "splits:\n  train:\n    blend: [{weight: 1, path: ./data/coco}]\n"
    )
    with pytest.raises(ConfigError) as e:
        fpipe.get_train_dataset(path, batch_size=2)
    assert f"{path}: splits.train.blend[0]" in str(e.value)
    assert str(dirs / "data" / "coco") in str(e.value)


def test_a_relative_path_that_does_not_exist_names_where_it_looked(tmp_path, monkeypatch):
    from fpipe.storage import open_dataset

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="dsZ: no such dataset") as e:
        open_dataset("dsZ")
    assert str(tmp_path / "dsZ") in str(e.value)
