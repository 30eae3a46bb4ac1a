"""GPT sequences across document boundaries: pieces, fields, resume and seek (no Megatron)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fpipe.core import megatron_order as mo
from fpipe.datasets.megatron_gpt import MegatronGPT, parse_data_path
from fpipe.materialize.gpt_fields import GPTFields, cu_seqlens, gpt_fields
from fpipe.storage.prepare.megatron_writer import IndexedCorpusWriter

EOD = 0


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    prefix = str(tmp_path_factory.mktemp("gpt") / "c")
    rng = np.random.default_rng(3)
    docs = []
    with IndexedCorpusWriter(prefix, dtype=np.uint16) as w:
        for _ in range(40):
            doc = np.concatenate([rng.integers(1, 500, int(rng.integers(1, 15))), [EOD]])
            docs.append(doc)
            w.add_item(doc)
            w.end_document()
    return prefix, docs


def _gpt(prefix, **kw):
    return MegatronGPT(
        [prefix], split="1,0,0", num_samples=(100,), seq_length=8, seed=5, eod=EOD, **kw
    )


def test_pieces_cut_the_documents_laid_end_to_end(corpus):
    prefix, docs = corpus
    gpt = _gpt(prefix)
    index = gpt.index("train")
    order = index.orders[0]
    stream = np.concatenate([docs[d] for d in order.document_index])
    for i in range(len(index)):
        row = int(order.shuffle_index[i])
        pieces = gpt.lineage("train", i)["pieces"]
        tokens = np.concatenate([docs[s][o : o + n] for s, o, n in pieces])
        start = row * 8  # sample k starts at token k * seq_length of the stream
        assert tokens.tolist() == stream[start : start + 9].tolist(), i
        assert gpt.sample("train", i)["tokens"].tolist() == stream[start : start + 8].tolist()


def test_fields_follow_megatrons_rules():
    text = np.array([5, 6, EOD, 7, EOD, 8, 9, 3, 4])
    opts = GPTFields(
        eod=EOD,
        reset_position_ids=True,
        reset_attention_mask=True,
        eod_mask_loss=True,
        create_attention_mask=True,
    )
    out = gpt_fields(text, opts)
    assert out["labels"].tolist() == text[1:].tolist()
    assert out["position_ids"].tolist() == [0, 1, 2, 0, 1, 0, 1, 2]
    assert out["loss_mask"].tolist() == [1, 1, 0, 1, 0, 1, 1, 1]
    mask = out["attention_mask"][0]
    assert not mask[4, 3] and mask[5, 4] and mask[3, 2] and mask[0, 1]
    plain = gpt_fields(text[:8], GPTFields(eod=EOD, extra=0))
    assert plain["labels"].tolist() == text[1:8].tolist() + [0]  # the pad, zeroed
    assert plain["loss_mask"].tolist() == [1.0] * 7 + [0.0]
    assert cu_seqlens([3, 2, 5], 8).tolist() == [0, 3, 5, 8]


def test_resume_and_seek_are_exact(corpus):
    gpt = _gpt(corpus[0])
    plan = gpt.plan("train", batch_size=4)
    state = plan.init()
    batches = []
    for _ in range(6):
        state, out = plan.next(state)
        batches.append(out[0].refs)
    state = plan.init()
    for _ in range(2):
        state, _ = plan.next(state)
    blob = plan.snapshot(state)
    assert len(blob) < 1024
    resumed = plan.restore(blob)
    sought, passed = plan.skip(plan.init(), 2)
    assert passed == 2
    for k in range(2, 6):
        resumed, a = plan.next(resumed)
        sought, b = plan.next(sought)
        assert a[0].refs == batches[k] == b[0].refs
    batch = gpt.materialize("train", a[0])
    assert batch["tokens"].shape == (4, 8) and len(batch["cu_seqlens"]) == 4


def test_split_and_blend_arithmetic():
    assert mo.parse_split("969,30,1")[2] is not None and mo.parse_split("1")[1:] == [None, None]
    assert parse_data_path(["30", "a", "70", "b"]) == (["a", "b"], [30.0, 70.0])
    assert parse_data_path(["a", "b"]) == (["a", "b"], None)
    dataset, within = mo.blending_indices([0.5, 0.25, 0.25], 8)
    # s=0 and s=1 both weigh x=1; s=4 is a three-way tie, won by the first dataset
    assert dataset.tolist() == [0, 1, 2, 0, 0, 1, 2, 0]
    assert within.tolist() == [0, 0, 0, 1, 2, 1, 1, 3]
    with pytest.raises(Exception, match="split"):
        mo.parse_split("")
    assert torch.is_tensor(gpt_fields(np.arange(1, 4), GPTFields(eod=EOD))["tokens"])
