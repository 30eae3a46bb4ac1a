"""``fpipe check DIR``: every member against the index."""

import numpy as np

from fpipe.cli.main import main
from fpipe.storage import prepare_dataset
from tests.storage.helpers import make_image_caption_dataset


def test_check_passes_then_finds_a_wrong_offset_then_a_stale_shard(tmp_path, capsys):
    make_image_caption_dataset(tmp_path, shards=2, per_shard=3)
    prepare_dataset(tmp_path, fields={"image": "jpg", "caption": "txt"})
    assert main(["check", str(tmp_path), "--no-progress"]) == 0
    assert "6 samples in 2 shards checked: ok" in capsys.readouterr().out

    index = tmp_path / ".fpipe" / "members"
    row = int(np.load(index / "start.npy")[4])  # the first member of sample 4
    offsets = index / "offset.npy"
    arr = np.load(offsets)
    arr[row] -= 512  # points at another member of the same shard, still inside it
    np.save(offsets, arr)
    assert main(["check", str(tmp_path), "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "shard-0001.tar: shard-0001/000004: members differ" in out

    shard = tmp_path / "shard-0000.tar"
    shard.write_bytes(shard.read_bytes() + b"\0" * 512)
    assert main(["check", str(tmp_path), "--no-progress"]) == 2
    assert "re-run `fpipe prepare" in capsys.readouterr().err
