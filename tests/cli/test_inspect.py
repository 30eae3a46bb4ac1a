"""``fpipe inspect``: padding, packs and load balance of the first batches, and the plot."""

import json

from PIL import Image

from fpipe.cli.main import main
from fpipe.core.records import Recipe, Refs
from fpipe.plan.layout import batch_layout, layout_stats


def _table(tmp_path, n=200):
    path = tmp_path / "lengths.jsonl"
    with open(path, "w") as f:
        for i in range(n):
            row = {"text": f"s{i}", "tokens": 16 + (i * 37) % 300, "images": i % 5}
            f.write(json.dumps(row) + "\n")
    return str(path)


def test_layout_of_packs_and_of_padded_samples():
    refs = Refs.of(index=[0, 1, 2, 3], tokens=[3, 5, 2, 6], images=[1, 0, 2, 1], pack=[0, 0, 1, 1])
    lay = batch_layout(Recipe(step=3, key=0, refs=refs), "tokens", 10, "images")
    assert lay.rows == ((3, 5), (2, 6)) and lay.width == 10 and lay.loads == (1, 3)
    stats = layout_stats([lay])
    assert stats["padding"] == 1 - 16 / 20 and stats["samples_per_row"] == (2.0, 2, 2)
    assert stats["second_load_ratio"] == 1.5
    plain = batch_layout(Recipe(step=0, key=0, refs=Refs.of(index=[0, 1], tokens=[2, 6])), "tokens")
    assert plain.rows == ((2,), (6,)) and plain.width == 6  # padded to the longest


def test_inspect_prints_and_plots(tmp_path, capsys):
    data, out = _table(tmp_path), tmp_path / "packs.png"
    args = ["inspect", data, "--batch-size", "4", "--batches", "3", "--budget", "600"]
    args += ["--budget-column", "images=12", "--strategy", "balanced"]
    args += ["--packing-buffer-size", "50", "--plot", str(out)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "3 batches, 12 packs: padding" in text and "samples per pack" in text
    assert "second budget's load balance" in text
    with Image.open(out) as img:
        assert img.size[0] > 600 and img.size[1] > 3 * 4 * 8
    assert main(["inspect", data, "--batch-size", "4", "--batches", "2"]) == 0
    assert "samples per row: mean 1.00" in capsys.readouterr().out
    assert main(["inspect", data, "--budget-column", "images=3"]) == 2
