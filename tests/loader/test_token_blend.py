"""Token-weighted blends from a metadataset (``blend_unit: tokens``) and from
``get_train_dataset(blend_unit=...)``: shares of tokens, errors that name the fix, and the
restore rules (a changed unit is refused unless ``allow_changed_weights``)."""

from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest

import fpipe
from fpipe.core.errors import ConfigError, SnapshotMismatchError
from fpipe.core.testing import run
from fpipe.loader import Topology


def write_table(path, n, median, seed, column="tokens"):
    rng = np.random.default_rng(seed)
    lengths = np.maximum(1, np.round(rng.lognormal(np.log(median), 0.5, n))).astype(int)
    with open(path, "w") as f:
        for i, t in enumerate(lengths.tolist()):
            f.write(json.dumps({"text": f"{path.stem} {i}", column: t}) + "\n")


@pytest.fixture(scope="module")
def mix(tmp_path_factory):
    root = tmp_path_factory.mktemp("tokmix")
    write_table(root / "short.jsonl", 3000, 100, 1)
    write_table(root / "long.jsonl", 3000, 1000, 2)
    write_table(root / "chars.jsonl", 100, 10, 3, column="chars")

    def write(name, extra):
        (root / name).write_text(
            textwrap.dedent(
                """\
                splits:
                  train:
                    blend:
                      - {weight: 1, path: short.jsonl}
                      - {weight: 1, path: long.jsonl}
                """
            )
            + extra
        )
        return str(root / name)

    return {
        "tokens": write("tokens.yaml", "    blend_unit: tokens\n"),
        "samples": write("samples.yaml", ""),
        "root": root,
    }


def dataset(path, **kw):
    args = dict(
        batch_size=10,
        seed=3,
        sample_type="TextSample",
        field_map={"text": "text"},
        shuffle_buffer_size=50,
        columns=["tokens"],  # loaded either way: a run can then switch its unit
        topology=Topology(rank=0, world_size=1),
    )
    return fpipe.get_train_dataset(path, **{**args, **kw})


def token_share(ds, steps=200) -> float:
    _, recipes = run(ds.plan, limit=steps)
    tokens = np.concatenate([r.refs.column("tokens") for r in recipes])
    mine = np.concatenate([r.refs.dataset for r in recipes]) == 0
    return float(tokens[mine].sum() / tokens.sum())


def test_blend_unit_makes_weights_shares_of_tokens(mix):
    assert abs(token_share(dataset(mix["tokens"])) - 0.5) < 0.02
    assert token_share(dataset(mix["samples"])) < 0.15  # shares of samples: about 1/11
    # The keyword overrides the file, both ways.
    assert abs(token_share(dataset(mix["samples"], blend_unit="tokens")) - 0.5) < 0.02
    assert token_share(dataset(mix["tokens"], blend_unit="samples")) < 0.15


def test_a_changed_unit_is_refused_unless_allowed(mix):
    by_samples = dataset(mix["samples"])
    state, _ = run(by_samples.plan, limit=5)
    snap = by_samples.plan.snapshot(state)
    with pytest.raises(SnapshotMismatchError, match="blend_unit"):
        dataset(mix["tokens"]).plan.restore(snap)
    allowed = dataset(mix["tokens"], allow_changed_weights=True).plan
    state, out = run(allowed, allowed.restore(snap), limit=3)
    assert len(out) == 3


def test_errors_name_the_dataset_and_the_fix(mix):
    root = mix["root"]
    (root / "missing.yaml").write_text(
        "splits:\n  train:\n    blend_unit: tokens\n    blend:\n"
        "      - {path: short.jsonl}\n      - {path: chars.jsonl}\n"
    )
    with pytest.raises(ConfigError, match="dataset 'chars.jsonl' has no index column 'tokens'"):
        dataset(str(root / "missing.yaml"))
    (root / "epochized.yaml").write_text(
        "splits:\n  train:\n    blend_unit: tokens\n    blend_epochized:\n"
        "      - {path: short.jsonl}\n"
    )
    with pytest.raises(ConfigError, match="top-level 'blend'"):
        dataset(str(root / "epochized.yaml"))
    with pytest.raises(ConfigError, match="needs a metadataset with a blend"):
        dataset(str(root / "short.jsonl"), blend_unit="tokens")


def test_info_shows_what_the_weights_are_shares_of(mix):
    from fpipe.cli._info import format_metadataset_info

    assert "dataset(s), draw hash (the default), weights share tokens\n" in (
        format_metadataset_info(mix["tokens"])
    )
    assert "weights share" not in format_metadataset_info(mix["samples"])
