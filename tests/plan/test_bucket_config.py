"""bucket_config parsing (OpenSora's nested form, Python tuples and YAML lists) and the
assignment of samples to buckets from their metadata."""

import textwrap

import numpy as np
import pytest

from fpipe.core import ConfigError
from fpipe.plan import assign_buckets, load_bucket_config, parse_bucket_config
from fpipe.plan.buckets._assign import REJECTED, UNFIT
from tests.helpers import OPENSORA_BUCKET_CONFIG, OPENSORA_BUCKET_YAML

OPENSORA = OPENSORA_BUCKET_CONFIG

# under a bucket_config key, as in a training config file
YAML = "bucket_config:\n" + textwrap.indent(OPENSORA_BUCKET_YAML, "  ")


def shapes(table):
    return [(b.label, b.shape, b.probability, b.batch_size) for b in table.buckets]


def test_opensora_config_parses():
    t = parse_bucket_config(OPENSORA)
    assert len(t) == 11
    got = {b.label: (b.shape, b.probability, b.batch_size) for b in t.buckets}
    assert got["1:1/256/65"] == ((65, 256, 256), 0.5, 4)
    assert got["16:9/240x426/17"] == ((17, 240, 426), 1.0, 8)
    assert got["16:9/480x854/65"] == ((65, 480, 854), 0.25, 1)
    assert got["9:16/426x240/17"] == ((17, 426, 240), 1.0, 8)
    # canonical order: aspect ratio (W/H) ascending, then area, then frames
    assert [b.aspect for b in t.buckets][0] == "9:16" and t.buckets[-1].label == "16:9/480x854/65"


def test_yaml_lists_equal_python_tuples(tmp_path):
    assert load_bucket_config(YAML) == parse_bucket_config(OPENSORA)
    f = tmp_path / "buckets.yaml"
    f.write_text(YAML)
    assert load_bucket_config(str(f)) == parse_bucket_config(OPENSORA)


def test_key_order_does_not_matter():
    reordered = {k: OPENSORA[k] for k in reversed(list(OPENSORA))}
    assert parse_bucket_config(reordered) == parse_bucket_config(OPENSORA)


def test_int_side_under_a_wide_ratio_is_the_short_side():
    t = parse_bucket_config({"16:9": {256: {17: (1.0, 2)}}, "9:16": {"256": {17: (1.0, 2)}}})
    assert sorted(b.shape for b in t.buckets) == [(17, 256, 456), (17, 456, 256)]


def test_none_batch_size_only_with_probability_zero():
    t = parse_bucket_config({"1:1": {256: {1: (1.0, 8), 65: (0.0, None)}}})
    assert [b.batch_size for b in t.buckets] == [8, 0]
    with pytest.raises(ConfigError, match=r"\[65\].*None is only allowed with probability 0"):
        parse_bucket_config({"1:1": {256: {65: (0.5, None)}}})


@pytest.mark.parametrize(
    "config, match",
    [
        ({61: {256: {1: (1.0, 8)}}}, "quote the ratio"),
        ({"wide": {256: {1: (1.0, 8)}}}, "'W:H'"),
        ({"16:9": {"240x320": {17: (1.0, 8)}}}, "240x320.*not 16:9"),
        ({"16:9": {"240p": {17: (1.0, 8)}}}, "'240p'.*HxW"),
        ({"1:1": {256: {0: (1.0, 8)}}}, "frames 0"),
        ({"1:1": {256: {1: (1.5, 8)}}}, r"\['1:1'\]\[256\]\[1\]: probability 1.5"),
        ({"1:1": {256: {1: (1.0, 0)}}}, "batch size 0"),
        ({"1:1": {256: {1: 8}}}, r"\(probability, batch_size\)"),
        ({"1:1": {256: {1: (1.0, 8)}, "256x256": {1: (1.0, 4)}}}, "same bucket"),
        ({}, "non-empty"),
        ({"1:1": {}}, "non-empty"),
    ],
)
def test_errors_name_the_key(config, match):
    with pytest.raises(ConfigError, match=match):
        parse_bucket_config(config)


def test_unquoted_yaml_ratio_is_explained():
    with pytest.raises(ConfigError, match="base-60"):
        load_bucket_config("1:1: {256: {1: [1.0, 8]}}\n")


TABLE = parse_bucket_config(OPENSORA)
ID = {b.label: i for i, b in enumerate(TABLE.buckets)}


def assign(w, h, t, key=7, epoch=0, index=None):
    n = len(w)
    return assign_buckets(
        TABLE,
        key,
        width=np.array(w),
        height=np.array(h),
        frames=np.array(t),
        index=np.arange(n) if index is None else index,
        epoch=epoch,
    )


def test_nearest_ratio_largest_resolution_and_frames_not_above():
    got = assign(
        [1920, 600, 300, 426, 250, 200, 260, 260],
        [1080, 600, 300, 240, 300, 200, 470, 470],
        [30, 1, 20, 20, 1, 1, 10, 30],
    )
    assert [TABLE.label(i) if i >= 0 else i for i in got] == [
        "16:9/480x854/17",  # 1080p, 30 frames: largest 16:9 resolution, 17 <= 30 < 65
        "1:1/512/1",  # a 600x600 image
        "1:1/256/17",  # 300x300 < 512 x 512
        "16:9/240x426/17",
        "1:1/256/1",  # 250x300 is nearest to 1:1
        UNFIT,  # 200x200 is below 256x256
        UNFIT,  # 9:16 has only 17-frame buckets; 10 frames is too short
        "9:16/426x240/17",
    ]


def test_probability_is_a_keyed_draw_with_fallback_to_smaller_resolutions():
    n = 20_000
    w, h, t = np.full(n, 1000), np.full(n, 1000), np.full(n, 100)
    got = assign(w, h, t)
    # 1:1/512/65 keeps 1/4; the rest fall to 1:1/256/65 which keeps 1/2; the rest are rejected
    frac = {k: float(np.mean(got == v)) for k, v in ID.items() if k.endswith("/65")}
    assert abs(frac["1:1/512/65"] - 0.25) < 0.015
    assert abs(frac["1:1/256/65"] - 0.75 * 0.5) < 0.015
    assert abs(float(np.mean(got == REJECTED)) - 0.375) < 0.015
    # keyed: same key, epoch and identity -> same decision, in any order or chunking
    perm = np.random.default_rng(0).permutation(n)
    again = assign(w[perm], h[perm], t[perm], index=np.arange(n)[perm])
    assert np.array_equal(again, got[perm])
    assert not np.array_equal(assign(w, h, t, epoch=1), got)  # a new draw each epoch
    assert not np.array_equal(assign(w, h, t, key=8), got)


def test_missing_metadata_is_unfit_and_missing_frames_is_an_image():
    got = assign([0, 300, np.nan], [300, 300, 300], [1, np.nan, 1])
    assert got[0] == UNFIT and got[2] == UNFIT
    assert TABLE.label(int(got[1])) == "1:1/256/1"


def test_samples_where_opensora_assigns_otherwise():
    """The rule docs/buckets.md states where it differs from OpenSora's get_bucket_id: in
    OpenSora (1.2 and 2.0, same ratios) the first sample is in 1:1/256 (it has 0.88 x its
    pixels, OpenSora's bar is 0.8 x), the second in 4:3 and the third in 1:1 (nearest in plain
    H/W, not in log W/H), and the 17-frame clip in no 17-frame bucket (1.x: T > 17 needed)."""
    table = parse_bucket_config(
        {
            "1:1": {256: {1: (1.0, 8), 17: (1.0, 2)}},
            "4:3": {"240x320": {1: (1.0, 8)}},
            "9:16": {"426x240": {1: (1.0, 8)}},
        }
    )
    got = assign_buckets(
        table,
        7,
        width=np.array([240, 345, 292, 256]),
        height=np.array([240, 300, 400, 256]),
        frames=np.array([1, 1, 1, 17]),
        index=np.arange(4),
    )
    labels = [table.label(int(i)) if i >= 0 else int(i) for i in got]
    assert labels == [UNFIT, "1:1/256/1", "9:16/426x240/1", "1:1/256/17"]


def test_an_opensora_resolution_name_as_the_first_key_is_explained():
    """OpenSora keys its bucket_config by resolution name first ("240p"); fpipe by aspect ratio.
    Pasting OpenSora's config must say so, not only that "240p" is no ratio."""
    with pytest.raises(ConfigError, match="OpenSora resolution name"):
        parse_bucket_config({"240p": {1: (1.0, 8)}})
    with pytest.raises(ConfigError, match="OpenSora resolution name"):
        parse_bucket_config({"256px": {1: (1.0, 8)}})
