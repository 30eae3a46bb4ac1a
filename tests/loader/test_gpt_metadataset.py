"""GPT sequences of a Megatron corpus as a metadataset entry, blended with an image-caption
dataset: typed samples, exact and elastic resume, seek, token shares, lineage."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest
import torch

import fpipe
from fpipe.encode import DefaultTaskEncoder
from fpipe.loader import Topology
from fpipe.samples import GPTSample
from fpipe.storage.prepare.megatron_writer import IndexedCorpusWriter
from fpipe.storage.read.layouts import open_dataset

EOD = 0
SEQ = 16


class KeysEncoder(DefaultTaskEncoder):
    """A batch is the samples' ``(key, subflavor kind)``; GPT samples are checked here."""

    def encode_sample(self, sample, rng):
        if isinstance(sample, GPTSample):
            _check_gpt_sample(sample)
        return sample

    def batch(self, samples):
        return [(s.__key__, s.__subflavors__.get("kind")) for s in samples]


def _check_gpt_sample(s):
    # fields of eod_mask_loss, extra token: labels are the tokens shifted by one
    assert s.tokens.shape == (SEQ,) and s.labels.shape == (SEQ,)
    assert s.tokens[1:].tolist() == s.labels[:-1].tolist()
    assert s.loss_mask.tolist() == (s.tokens != EOD).float().tolist()
    assert s.cu_seqlens.dtype == torch.int32 and int(s.cu_seqlens[-1]) == SEQ
    assert int(s.pieces[:, 2].sum()) == SEQ + 1


@pytest.fixture(scope="module")
def mix(tmp_path_factory):
    from fpipe.storage import prepare_dataset
    from tests.storage.helpers import make_image_caption_dataset

    root = tmp_path_factory.mktemp("gptmix")
    rng = np.random.default_rng(7)
    docs = []
    with IndexedCorpusWriter(str(root / "text"), dtype=np.uint16) as w:
        for _ in range(60):
            doc = np.concatenate([rng.integers(1, 900, int(rng.integers(2, 20))), [EOD]])
            docs.append(doc)
            w.add_document(doc, lengths=[len(doc)])
    make_image_caption_dataset(root / "imgs", shards=2, per_shard=8)
    prepare_dataset(
        root / "imgs",
        fields={"image": "jpg", "caption": "txt"},
        sample_type="CaptioningSample",
        columns=["tokens=len(json[caption])"],
    )
    body = """\
        splits:
          train:{unit}
            blend:
              - weight: 3
                path: text
                sequence_length: {seq}
                eod_token: {eod}
                eod_mask_loss: true
                subflavors: {{kind: text}}
              - {{weight: 1, path: imgs, subflavors: {{kind: image}}}}
        """
    out = {"root": root, "docs": docs}
    for name, unit in (("samples", ""), ("tokens", "\n    blend_unit: tokens")):
        path = root / f"{name}.yaml"
        path.write_text(textwrap.dedent(body).format(unit=unit, seq=SEQ, eod=EOD))
        out[name] = str(path)
    return out


def _loader(path, *, batch=4, rank=0, world=1, **kw):
    kw.setdefault("shuffle_buffer_size", 8)
    ds = fpipe.get_train_dataset(
        path,
        batch_size=batch,
        seed=11,
        max_samples_per_sequence=3,
        task_encoder=KeysEncoder(),
        topology=Topology(rank=rank, world_size=world),
        **kw,
    )
    return fpipe.get_loader(ds, num_workers=0)


def _take(loader, n):
    it = iter(loader)
    return [next(it) for _ in range(n)]


def test_gpt_samples_are_typed_and_cut_across_documents(mix):
    ds = open_dataset(mix["root"] / "text", sequence_length=SEQ, eod_token=EOD)
    stream = np.concatenate(mix["docs"])
    assert len(ds) == (len(stream) - 1) // SEQ
    got = _take(_loader(mix["samples"]), 6)
    kinds = {k for b in got for _, k in b}
    assert kinds == {"text", "image"}  # both datasets in one stream, typed per dataset
    # fpipe's order: sample j is tokens [j * SEQ, j * SEQ + SEQ + 1) of the corpus
    for j in (0, 5, len(ds) - 1):
        raw = ds.read(j)
        tokens = np.frombuffer(raw["tokens"], np.int64)
        assert tokens.tolist() == stream[j * SEQ : j * SEQ + SEQ].tolist()
        pieces = ds.reader.pieces(j)
        joined = np.concatenate([mix["docs"][s][o : o + n] for s, o, n in pieces])
        assert joined.tolist() == stream[j * SEQ : j * SEQ + SEQ + 1].tolist()
    spans = [len(ds.reader.pieces(j)) for j in range(len(ds))]
    assert max(spans) > 1  # samples cut across document boundaries


def test_megatron_order_entry_equals_megatron_gpt(mix, tmp_path):
    from fpipe.datasets.megatron_gpt import MegatronGPT

    prefix = str(mix["root"] / "text")
    gpt = MegatronGPT([prefix], split="1,0,0", num_samples=(50,), seq_length=SEQ, seed=4, eod=EOD)
    ds = open_dataset(
        prefix, sequence_length=SEQ, eod_token=EOD, order="megatron", seed=4, num_samples=50
    )
    assert len(ds) == len(gpt)
    for i in (0, 7, len(ds) - 1):
        want = gpt.sample("train", i)
        got = ds.read(i)
        assert np.frombuffer(got["tokens"], np.int64).tolist() == want["tokens"].tolist()
        assert np.frombuffer(got["cu_seqlens"], np.int32).tolist() == want["cu_seqlens"].tolist()
        assert ds.reader.pieces(i) == gpt.lineage("train", i)["pieces"]


def test_exact_resume_through_state_dict(mix):
    loader = _loader(mix["samples"])
    first = _take(loader, 3)
    state = loader.state_dict()
    rest = _take(loader, 3)
    again = _loader(mix["samples"])
    again.load_state_dict(state)
    assert _take(again, 3) == rest
    assert first != rest


def test_elastic_resume_two_ranks_to_one(mix):
    whole = [k for b in _take(_loader(mix["samples"], batch=4), 6) for k in b]
    ranks = [_loader(mix["samples"], batch=2, rank=r, world=2) for r in range(2)]
    parts = [_take(loader, 3) for loader in ranks]
    seen = [k for step in zip(*parts) for b in step for k in b]
    state = ranks[0].state_dict()
    one = _loader(mix["samples"], batch=4)
    one.load_state_dict(state)
    after = [k for b in _take(one, 3) for k in b]
    assert seen + after == whole  # nothing repeated or skipped in global order


def test_seek_equals_stepping(mix):
    stepped = _take(_loader(mix["samples"]), 5)[4]
    loader = _loader(mix["samples"])
    loader.seek(4)
    assert _take(loader, 1)[0] == stepped


def test_token_blend_follows_the_weights(mix):
    ds = fpipe.get_train_dataset(
        mix["tokens"], batch_size=16, seed=2, max_samples_per_sequence=3, shuffle_buffer_size=8
    )
    plan = ds.plan
    state = plan.init()
    tokens = np.zeros(2)
    for _ in range(40):
        state, out = plan.next(state, 1)
        refs = out[0].refs
        np.add.at(tokens, refs.dataset, refs.column("tokens"))
    assert abs(tokens[0] / tokens.sum() - 0.75) < 0.05


def test_step_samples_names_the_pieces(mix):
    from fpipe.datasets.lineage import step_samples
    from fpipe.datasets.options import DatasetOptions
    from fpipe.datasets.plan_config import PlanConfig

    options = DatasetOptions(batch_size=4, seed=11, max_samples_per_sequence=3)
    cfg = PlanConfig(path=mix["samples"], options=options, world_size=1)
    rows = [r for r in step_samples(cfg, (0, 3)) if "pieces" in r]
    assert rows
    stream = np.concatenate(mix["docs"])
    for r in rows:
        j = int(r["key"].rsplit("/", 1)[1])
        joined = np.concatenate([mix["docs"][s][o : o + n] for s, o, n in r["pieces"]])
        assert joined.tolist() == stream[j * SEQ : j * SEQ + SEQ + 1].tolist()


def test_megatron_order_entry_keeps_its_order(mix):
    path = mix["root"] / "megatron.yaml"
    path.write_text(
        "splits:\n  train:\n    blend:\n      - {weight: 1, path: text, sequence_length: 16,"
        " eod_token: 0, eod_mask_loss: true, order: megatron, seed: 4, num_samples: [50]}\n"
    )
    loader = _loader(str(path), shuffle_buffer_size=None)
    keys = [k for b in _take(loader, 2) for k, _ in b]
    assert keys == [f"text#train/{j}" for j in range(8)]  # Megatron's sample j, not reshuffled
