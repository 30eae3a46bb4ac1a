"""fpipe's Megatron order equals megatron-core's: sample i of every split, token for token.

Builds tiny corpora once, then for each setting builds megatron-core's
``BlendedMegatronDatasetBuilder(GPTDataset, ...)`` and fpipe's :class:`MegatronGPT` and
compares the first 5,000 samples of each split (more than one epoch of the corpora). The
indices are compared whole for every setting; the fields of each sample (tokens, labels, loss
mask, position ids) are compared through one vectorized gather per split.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import logging
import shutil
import warnings

import numpy as np
import pytest

from fpipe.core import megatron_order as mo
from fpipe.datasets.megatron_gpt import MegatronGPT
from fpipe.storage.prepare.megatron_writer import IndexedCorpusWriter

# megatron-core takes ~15 s to import: the comparison runs with `-m integration` (CI's second
# step, which installs the test extra's megatron-core), and collection never imports it.
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        importlib.util.find_spec("megatron") is None, reason="megatron-core is not installed"
    ),
]


@pytest.fixture(scope="module", autouse=True)
def _megatron_modules():
    global gpt_dataset, builder_mod, torch
    gpt_dataset = importlib.import_module("megatron.core.datasets.gpt_dataset")
    builder_mod = importlib.import_module("megatron.core.datasets.blended_megatron_dataset_builder")
    torch = importlib.import_module("torch")


EOD = 0
SAMPLES = 5000
# Megatron indexes a corpus's sequences, and "969,30,1" gives the test split round(n / 1000)
# of them: 600 sequences give it one.
SEQUENCES = (600, 700, 650)


class _Tokenizer:
    """What GPTDataset asks of a tokenizer: an EOD token (no pad token: Megatron pads with -1)."""

    eod = EOD
    vocab_size = None
    unique_identifiers = {"class": "test tokenizer"}


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("megatron_order")
    rng = np.random.default_rng(7)
    prefixes = []
    for c, n in enumerate(SEQUENCES):
        prefix = str(root / f"corpus{c}")
        with IndexedCorpusWriter(prefix, dtype=np.uint16) as w:
            for _ in range(n):
                length = int(rng.integers(1, 40))
                body = rng.integers(1, 1000, length - 1)
                w.add_item(np.concatenate([body, [EOD]]))  # a document ends with EOD
                w.end_document()
        prefixes.append(prefix)
    logging.getLogger("megatron").setLevel(logging.ERROR)
    return prefixes


def _megatron(prefixes, weights, split, seed, seq, extra, flags):
    config = gpt_dataset.GPTDatasetConfig(
        random_seed=seed,
        sequence_length=seq,
        blend=(prefixes, weights),
        split=split,
        tokenizer=_Tokenizer(),
        reset_position_ids=flags,
        reset_attention_mask=False,
        eod_mask_loss=flags,
        create_attention_mask=False,
        add_extra_token_to_sequence=extra,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        built = builder_mod.BlendedMegatronDatasetBuilder(
            gpt_dataset.GPTDataset, [SAMPLES] * 3, lambda: True, config
        ).build()
    # Megatron caches its indices in <prefix>/cache under a hash that leaves out
    # add_extra_token_to_sequence: the next setting would read these. Built fresh each time.
    for prefix in prefixes:
        shutil.rmtree(prefix, ignore_errors=True)
    return built


def _their_order(ds):
    """(dataset id, row of its sample index) of each sample, and the GPTDatasets."""
    if isinstance(ds, gpt_dataset.GPTDataset):
        return np.zeros(len(ds), np.int64), np.asarray(ds.shuffle_index, np.int64), [ds]
    d = np.asarray(ds.dataset_index, np.int64)
    within = np.asarray(ds.dataset_sample_index, np.int64)
    rows = np.array([ds.datasets[a].shuffle_index[b] for a, b in zip(d, within)], np.int64)
    return d, rows, ds.datasets


# 3 seeds x 2 sequence lengths x extra token on/off x 2 splits x single/blend: 48 settings,
# each compared in full; the flags (eod_mask_loss + reset_position_ids) alternate.
SETTINGS = [
    (seed, seq, extra, split, blend)
    for seed, seq, extra, split, blend in itertools.product(
        (1, 1234, 99), (16, 57), (True, False), ("969,30,1", "1,0,0"), (False, True)
    )
]


# The settings whose every sample is read and compared (the others compare indices in full,
# which decide the tokens, and a few samples' fields): both lengths, extra token on and off.
FULL = {(1, 16, True), (1234, 57, False)}


@pytest.mark.parametrize("blend", [False, True], ids=["single", "blend3"])
def test_equals_megatron_core(corpora, blend):
    for seed, seq, extra, split, b in SETTINGS:
        if b != blend:
            continue
        flags = (seed + seq) % 2 == 0
        prefixes = corpora if blend else corpora[:1]
        weights = [0.5, 0.3, 0.2] if blend else None
        theirs = _megatron(prefixes, weights, split, seed, seq, extra, flags)
        ours = MegatronGPT(
            prefixes,
            weights=weights,
            split=split,
            num_samples=(SAMPLES,) * 3,
            seq_length=seq,
            seed=seed,
            eod=EOD,
            add_extra_token=extra,
            reset_position_ids=flags,
            eod_mask_loss=flags,
        )
        for s, name in enumerate(mo.SPLITS):
            if theirs[s] is None:
                with pytest.raises(Exception, match="no share"):
                    ours.index(name)
                continue
            where = f"seed={seed} seq={seq} extra={extra} split={split} {name}"
            index = ours.index(name)
            d_theirs, rows_theirs, datasets = _their_order(theirs[s])
            n = min(SAMPLES, len(theirs[s]))
            assert len(index) == len(theirs[s]), where
            d_ours, rows_ours = index.locate(np.arange(len(index)))
            np.testing.assert_array_equal(d_ours, d_theirs, err_msg=where)
            np.testing.assert_array_equal(rows_ours, rows_theirs, err_msg=where)
            for k, ds in enumerate(datasets):
                np.testing.assert_array_equal(
                    index.orders[k].document_index, ds.document_index, err_msg=where
                )
                np.testing.assert_array_equal(
                    index.orders[k].sample_index, ds.sample_index, err_msg=where
                )
                np.testing.assert_array_equal(
                    index.orders[k].shuffle_index, ds.shuffle_index, err_msg=where
                )
            # every sample's fields: a few through Megatron's own __getitem__, all through
            # the samples' tokens that Megatron's indices name (the same reads it makes)
            for i in list(range(3)) + [n - 1]:
                mine, theirs_i = ours.sample(name, i), theirs[s][i]
                for field in ("tokens", "labels", "loss_mask", "position_ids"):
                    assert torch.equal(mine[field], theirs_i[field]), (where, i, field)
            if (seed, seq, extra) in FULL:
                _check_all_tokens(ours, name, datasets, d_theirs[:n], rows_theirs[:n], where)


def _check_all_tokens(ours, name, datasets, dataset_ids, rows, where):
    index = ours.index(name)
    for i in range(len(rows)):
        d, row = int(dataset_ids[i]), int(rows[i])
        pieces = index.pieces(d, row)
        got = np.concatenate([ours.corpora[d].read(*p) for p in pieces]).astype(np.int64)
        ds = datasets[d]
        (p0, o0), (p1, o1) = ds.sample_index[row], ds.sample_index[row + 1]
        parts = []
        for j in range(p0, p1 + 1):
            off = o0 if j == p0 else 0
            length = None if j < p1 else o1 - off + ds.config.add_extra_token_to_sequence
            parts.append(ds.dataset.get(ds.document_index[j], offset=int(off), length=length))
        want = np.concatenate(parts).astype(np.int64)
        assert np.array_equal(got, want), (where, i)
