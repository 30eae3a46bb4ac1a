"""varlen_pack / stack_varlen: boundaries, positions, segments and labels of packed samples."""

import pytest
import torch

from fpipe.encode.varlen import stack_varlen, varlen_pack


def test_one_pack_with_padding():
    p = varlen_pack([[5, 6, 7], [8, 9]], pad_to=7)
    assert p.input_ids.tolist() == [5, 6, 7, 8, 9, 0, 0]
    assert p.cu_seqlens.dtype == torch.int32 and p.cu_seqlens.tolist() == [0, 3, 5]
    assert p.max_seqlen == 3
    assert p.position_ids.tolist() == [0, 1, 2, 0, 1, 0, 0]
    assert p.segment_ids.tolist() == [0, 0, 0, 1, 1, -1, -1]
    # shifted targets: never the next sample's first token, never on padding
    assert p.labels.tolist() == [6, 7, -100, 9, -100, -100, -100]


def test_unshifted_labels_mask_each_sample_start_and_keep_given_masks():
    p = varlen_pack([[5, 6, 7], [8, 9]], labels=[[-100, 6, 7], [8, 9]], shifted=False, pad_to=6)
    assert p.labels.tolist() == [-100, 6, 7, -100, 9, -100]


def test_no_target_crosses_a_boundary():
    seqs = [[1, 2], [3], [4, 5, 6], [7]]
    p = varlen_pack(seqs, pad_to=9)
    seg = p.segment_ids.tolist()
    for t, lab in enumerate(p.labels.tolist()):
        if lab != -100:
            assert seg[t + 1] == seg[t] and lab == p.input_ids[t + 1]


def test_empty_samples_and_errors():
    p = varlen_pack([[1, 2], [], [3]])
    assert p.cu_seqlens.tolist() == [0, 2, 2, 3] and p.labels.tolist() == [2, -100, -100]
    with pytest.raises(ValueError, match="pad_to"):
        varlen_pack([[1, 2, 3]], pad_to=2)
    with pytest.raises(ValueError, match="same lengths"):
        varlen_pack([[1, 2]], labels=[[1]])
    with pytest.raises(ValueError, match="same lengths.*sample 1 has 1 labels for 2 tokens"):
        varlen_pack([[1], [2, 3]], labels=[[1], [2]])
    with pytest.raises(ValueError, match="same lengths.*1 label sequences for 2 samples"):
        varlen_pack([[1], [2, 3]], labels=[[1]])


def test_stack_partitions_the_flat_batch():
    a = varlen_pack([[1, 2, 3], [4]], pad_to=6)
    b = varlen_pack([[5, 6, 7, 8, 9, 10]], pad_to=6)
    s = stack_varlen([a, b])
    assert s.input_ids.shape == (2, 6)
    assert s.cu_seqlens.tolist() == [0, 3, 4, 6, 12]  # row 0's padding is its own segment
    assert s.max_seqlen == 6
    with pytest.raises(ValueError, match="one length"):
        stack_varlen([a, varlen_pack([[1]])])
    with pytest.raises(ValueError, match="at least one pack"):  # it raised IndexError
        stack_varlen([])
