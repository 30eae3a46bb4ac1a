"""Grouped batching gives Energon's batches: the same script (a task encoder with
``batch_group_criterion``, as Energon's grouping guide writes one) runs in Megatron-Energon 7.4's
Python and in fpipe's with only its import changed, on a folder the real ``energon prepare``
wrote, and the two give the same batches (keys, in order, the partly filled groups at the end
included), with sizes per group and with a fixed ``batch_size``.

Opt-in with ``-m integration`` (another venv's Python); skipped without it, as
tests/energon/test_energon_compare.py is.
"""

from __future__ import annotations

import sys

import pytest

from tests.energon.energon_folder import write_plain_shards
from tests.energon.test_energon_compare import ENERGON, _run
from tests.loader.test_group_batches import energon_groups

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(ENERGON is None, reason="no Python with megatron-energon"),
]

SCRIPT = r"""
import importlib, json, sys
from typing import Hashable, Optional, Tuple

E = importlib.import_module(sys.argv[1])
path = sys.argv[2]
if sys.argv[1] == "megatron.energon":  # the real `energon prepare`, in this process
    from megatron.energon.cli.main import main

    main(["prepare", path, "--non-interactive", "--split-ratio", "1,0,0",
          "--sample-type", "ImageClassificationSample",
          "--field-map", json.dumps({"image": "jpg", "label": "cls"})], standalone_mode=False)


class SizePerGroup(E.DefaultTaskEncoder):
    def batch_group_criterion(self, sample) -> Tuple[Hashable, Optional[int]]:
        return sample.label, {0: 2, 1: 3, 2: 4}[sample.label]


class FixedSize(E.DefaultTaskEncoder):
    def batch_group_criterion(self, sample) -> Tuple[Hashable, Optional[int]]:
        return sample.label % 2, None


def batches(encoder, batch_size):
    wc = E.WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = E.get_val_dataset(path, split_part="train", batch_size=batch_size, worker_config=wc,
                           task_encoder=encoder)
    return [list(b.__key__) for b in E.get_loader(ds)]


out = {"per_group": batches(SizePerGroup(), None), "fixed": batches(FixedSize(), 3)}
print("RESULT " + json.dumps(out))
"""


def test_grouped_batches_are_energons(tmp_path):
    folder = tmp_path / "typed"
    write_plain_shards(folder, shards=3, per_shard=7)  # labels 0, 1, 2, 0, ...
    script = tmp_path / "same_code.py"
    script.write_text(SCRIPT)
    energon = _run(ENERGON, "megatron.energon", script, folder, folder)  # prepares, then loads
    ours = _run(sys.executable, "fpipe.energon", script, folder, folder)
    keys = [f"{i:06d}" for i in range(21)]  # in order: a validation pass, one worker
    # Energon's rules as tests/loader/test_group_batches.py writes them (its reference),
    # checked here against Energon itself
    sizes = {0: 2, 1: 3, 2: 4}
    per_group = energon_groups(keys, lambda k: (int(k) % 3, sizes[int(k) % 3]))
    assert energon["per_group"] == per_group
    assert energon["fixed"] == energon_groups(keys, lambda k: (int(k) % 3 % 2, None), fixed=3)
    # the partly filled groups at the end, in the order the groups were first seen: 0, 1, 2
    assert per_group[-3:] == [[keys[18]], [keys[19]], [keys[14], keys[17], keys[20]]]
    assert ours == energon
