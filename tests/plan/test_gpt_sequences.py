"""GPT sequences across document boundaries: pieces, fields, resume and seek (no Megatron)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fpipe.core import megatron_order as mo
from fpipe.datasets.megatron_gpt import MegatronGPT, parse_data_path
from fpipe.storage.prepare.megatron_writer import IndexedCorpusWriter
from fpipe.storage.read.gpt_tokens import GPTFields, batch_fields

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
    pos = np.array([[0, 0, 0, 1, 1, 2, 2, 2, 2]])  # the document of each token
    out = {k: v[0] for k, v in batch_fields(text[None], pos, opts).items()}
    assert out["labels"].tolist() == text[1:].tolist()
    assert out["position_ids"].tolist() == [0, 1, 2, 0, 1, 0, 1, 2]
    assert out["loss_mask"].tolist() == [1, 1, 0, 1, 0, 1, 1, 1]
    mask = out["attention_mask"][0]
    assert not mask[4, 3] and mask[5, 4] and mask[3, 2] and mask[0, 1]
    assert out["cu_seqlens"].tolist() == [0, 3, 5, 8]
    plain = batch_fields(text[None, :8], pos[:, :8], GPTFields(eod=EOD, extra=0))
    assert plain["labels"][0].tolist() == text[1:8].tolist() + [0]  # the pad, zeroed
    assert plain["loss_mask"][0].tolist() == [1.0] * 7 + [0.0]


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
    assert torch.is_tensor(batch["tokens"]) and torch.is_tensor(batch["cu_seqlens"][0])


def _reference(gpt, split, i):
    """Sample ``i``'s fields from its lineage, read piece by piece (Megatron's way)."""
    lineage = gpt.lineage(split, i)
    corpus = gpt.corpora[gpt.prefixes.index(lineage["prefix"])]
    pieces = lineage["pieces"]
    text = np.concatenate([corpus.read(*p) for p in pieces]).astype(np.int64)
    text = np.concatenate([text, np.full(9 - len(text), -1)])  # Megatron's padding
    bounds = np.cumsum([p[2] for p in pieces])
    return {
        "tokens": np.where(text[:8] == -1, 0, text[:8]),
        "labels": np.where(text[1:] == -1, 0, text[1:]),
        "loss_mask": (text[1:] != -1).astype(np.float32),
        "cu_seqlens": [0] + bounds[bounds < 8].tolist() + [8],
    }


def _same(got, want, where):
    for field in ("tokens", "labels", "loss_mask"):
        assert got[field].tolist() == want[field].tolist(), (where, field)
    assert got["cu_seqlens"].tolist() == want["cu_seqlens"], where


def test_a_blends_batch_is_its_samples_pieces(corpus, tmp_path):
    other = str(tmp_path / "other")
    with IndexedCorpusWriter(other, dtype=np.uint16) as w:
        for k in range(30):
            w.add_item(np.array([600 + k] * (k % 7 + 1) + [EOD]))
            w.end_document()
    gpt = MegatronGPT(
        [corpus[0], other], weights=[0.6, 0.4], split="1,0,0", num_samples=(40,),
        seq_length=8, seed=5, eod=EOD,
    )  # fmt: skip
    plan = gpt.plan("train", batch_size=16)
    _, recipes = plan.next(plan.init())
    refs = recipes[0].refs
    assert len(set(refs.dataset.tolist())) == 2  # both corpora in one batch
    batch = gpt.materialize("train", recipes[0])
    for b in range(16):
        got = {k: v[b] for k, v in batch.items()}
        _same(got, _reference(gpt, "train", b), b)


def test_a_short_last_sample_is_padded(corpus):
    gpt = MegatronGPT(
        [corpus[0]], split="1,1,0", seq_length=8, seed=5, eod=EOD,
        drop_last_partial_validation=False,
    )  # fmt: skip
    n = len(gpt.index("valid"))
    short = [i for i in range(n) if sum(p[2] for p in gpt.lineage("valid", i)["pieces"]) < 9]
    assert short  # the last row of the stream, wherever the shuffle put it
    for i in short + [0]:
        _same(gpt.sample("valid", i), _reference(gpt, "valid", i), i)
    assert gpt.sample("valid", short[0])["loss_mask"].tolist()[-1] == 0.0


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


def _one_block(batch):
    block = batch["tokens"].untyped_storage().data_ptr()
    small = [batch[k] for k in ("labels", "loss_mask", "position_ids")]
    for t in small + batch["cu_seqlens"]:
        assert t.untyped_storage().data_ptr() == block and t.is_contiguous()
    # the (large) attention mask apart: keeping a field does not keep it alive
    assert batch["attention_mask"].untyped_storage().data_ptr() != block


def test_a_batchs_fields_lie_in_one_block_shared_out_of_a_worker(corpus, monkeypatch):
    """A worker's batch crosses to the main process as one shared segment, not one a field."""
    import fpipe.datasets.megatron_gpt as megatron_gpt

    gpt = _gpt(corpus[0], create_attention_mask=True)
    plan = gpt.plan("train", batch_size=4)
    _, recipes = plan.next(plan.init())
    here = gpt.materialize("train", recipes[0])
    _one_block(here)
    monkeypatch.setattr(megatron_gpt, "in_worker_process", lambda: True)
    sent = gpt.materialize("train", recipes[0])
    _one_block(sent)
    assert sent["tokens"].is_shared() and not here["tokens"].is_shared()
    # a sample is not sent as it is (collate stacks it into shared memory): plain memory
    assert not gpt.sample("train", 0)["tokens"].is_shared()
    for k in ("tokens", "labels", "loss_mask", "position_ids", "attention_mask"):
        assert torch.equal(here[k], sent[k]), k
    assert [c.tolist() for c in here["cu_seqlens"]] == [c.tolist() for c in sent["cu_seqlens"]]


def test_the_gather_by_slices_equals_the_gather_by_index(corpus, monkeypatch):
    gpt = _gpt(corpus[0])
    stream, gather = gpt._stream("train", 0), gpt._gathers[0]
    last = int(stream.ends[-1]) // 8  # its window passes the stream's end: a padding piece
    pieces = stream.pieces(np.array([0, 3, last - 1, last]), 8, 9)
    assert (pieces.off < 0).any()
    got = {}
    for name, tokens_per_piece in (("slices", 0), ("index", 10**9)):
        monkeypatch.setattr(type(gather), "_SLICE_TOKENS", tokens_per_piece)
        got[name] = gather.read(pieces, 4, 9, -1, str)
    assert got["slices"].tolist() == got["index"].tolist()
    assert got["index"][3, -1] == -1  # the padding


def test_the_token_alignment_is_checked_once_not_per_batch(corpus):
    """Whether the .bin maps as tokens is decided once: checking every sequence pointer per
    batch cost time in proportion to the corpus, not the batch."""

    class Counted(np.ndarray):
        mods = 0

        def __mod__(self, other):
            Counted.mods += 1
            return np.asarray(self) % other

    gpt = _gpt(corpus[0])
    corpus_ = gpt.corpora[0]
    corpus_.sequence_pointers = np.asarray(corpus_.sequence_pointers).view(Counted)
    plan = gpt.plan("train", batch_size=4)
    state = plan.init()
    for _ in range(3):
        state, recipes = plan.next(state)
        gpt.materialize("train", recipes[0])
    assert Counted.mods == 1
