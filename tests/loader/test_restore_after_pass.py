"""A loader restored from a snapshot taken after a full pass continues as the loader that saved
it: the next ``for`` loop plays the pass again (Energon's test_save_restore_state_val)."""

from __future__ import annotations

import pytest

import fpipe
from fpipe.loader import WorkerConfig
from tests.distributed.helpers import make_text_dataset

WC = WorkerConfig(rank=0, world_size=1, num_workers=0)


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    return make_text_dataset(tmp_path_factory.mktemp("valpass"), shards=3, per_shard=7)  # 21


def _keys(loader):
    return [list(b["__key__"]) if isinstance(b, dict) else list(b.__key__) for b in loader]


@pytest.mark.parametrize("limit", [None, 2])
def test_a_restored_val_loader_plays_the_pass_again(text, limit):
    def make():
        ds = fpipe.get_val_dataset(text, batch_size=4, worker_config=WC, limit=limit)
        return fpipe.get_savable_loader(ds)

    saver = make()
    state_0 = saver.save_state_rank()
    order_1 = _keys(saver)
    assert order_1, "the pass is not empty"
    state_1 = saver.save_state_rank()  # after the full pass
    order_2 = _keys(saver)  # the saving loader plays the pass again
    assert order_2 == order_1

    restored = make()
    restored.restore_state_rank(state_1)
    assert _keys(restored) == order_2  # same state, same continuation
    again = make()
    again.restore_state_rank(state_0)
    assert _keys(again) == order_1


def test_a_state_saved_inside_the_pass_continues_it(text):
    saver = fpipe.get_savable_loader(fpipe.get_val_dataset(text, batch_size=4, worker_config=WC))
    it = iter(saver)
    first = next(it)
    mid = saver.save_state_rank()
    rest = [list(b.__key__) if not isinstance(b, dict) else list(b["__key__"]) for b in it]
    restored = fpipe.get_savable_loader(fpipe.get_val_dataset(text, batch_size=4, worker_config=WC))
    restored.restore_state_rank(mid)
    assert _keys(restored) == rest and first is not None
