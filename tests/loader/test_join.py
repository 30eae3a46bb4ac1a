"""Joined datasets (``join:``): images in one dataset, texts in another, matched by key.

The text dataset holds the keys in another order and another shard split, and lacks some.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from typing import Any

import pytest

import fpipe
from fpipe.core import BadSampleError, ConfigError, SnapshotMismatchError
from fpipe.decode.image import ImageDecodeOptions
from fpipe.encode.task_encoder import DefaultTaskEncoder
from fpipe.loader import Topology
from fpipe.samples import Cooker, Sample, register_sample_type
from fpipe.storage import prepare_dataset
from tests.storage.helpers import image_caption_samples, jpeg_bytes, make_energon_dataset, write_tar

DECODE = ImageDecodeOptions(target_size=8)
N = 12  # images 000000..000011 in 3 shards of 4


@register_sample_type
@dataclass
class ImageText(Sample):
    """The joiner of the tests: an image and a text."""

    image: Any
    text: str


@register_sample_type
@dataclass
class CaptionPair(Sample):
    """A custom joiner with its own from_joined (Energon's pattern), named parts."""

    image: Any
    caption: str

    @staticmethod
    def from_joined(pic, words):
        return CaptionPair.derive_from(pic, image=pic.image, caption=words.text.upper())


def text_of(k: int) -> str:
    return f"text of {k:06d}"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("join")
    for s in range(3):
        write_tar(
            root / "images" / f"img-{s}.tar",
            [(f"{k:06d}", {"jpg": jpeg_bytes(8, 8)}) for k in range(4 * s, 4 * s + 4)],
        )
    prepare_dataset(root / "images", fields={"image": "jpg"}, sample_type="ImageSample")
    # Texts: reversed order, two shards of other sizes, keys 3 and 7 missing, one extra key.
    keys = [k for k in range(N) if k not in (3, 7)][::-1] + [99]
    for s, part in enumerate((keys[:7], keys[7:])):
        write_tar(
            root / "texts" / f"txt-{s}.tar",
            [(f"{k:06d}", {"txt": text_of(k).encode()}) for k in part],
        )
    prepare_dataset(root / "texts", fields={"text": "txt"}, sample_type="TextSample")
    make_energon_dataset(root / "energon", shards=2, per_shard=4)  # keys 0..7, not prepared
    return root


def mds(root, name, body) -> str:
    path = root / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def join_yaml(root, nonmatch="skip", name="j.yaml", joiner="ImageText"):
    return mds(
        root,
        name,
        f"""\
        splits:
          train:
            join:
              - {{path: ./images}}
              - {{path: ./texts, nonmatch: {nonmatch}}}
            joiner: {{__module__: tests.loader.test_join, __class__: {joiner}}}
            subflavors: {{source: joined}}
        """,
    )


def loader(path, num_workers=0, worker_mode="process", **kw):
    kw = {"max_samples_per_sequence": 2, **kw}
    ds = fpipe.get_train_dataset(
        path,
        batch_size=3,
        shuffle_buffer_size=4,
        seed=7,
        image_decode=DECODE,
        topology=Topology(0, 1),
        **kw,
    )
    return fpipe.get_loader(ds, num_workers=num_workers, worker_mode=worker_mode)


def samples_of(loader_, batches, images=True):
    it = iter(loader_)
    out = []
    for _ in range(batches):
        b = next(it)
        if images:  # the primary's field, decoded
            assert len(b.image) == len(b.__key__) and b.image[0].shape[-2:] == (8, 8)
        out.extend(zip(b.__key__, b.text, b.__subflavors__))
    return out


def test_join_merges_fields_by_key_and_skips_nonmatches(data):
    ld = loader(join_yaml(data))
    got = samples_of(ld, 8)  # 24 refs = two epochs of 12; keys 3 and 7 are skipped
    assert len(got) == 20
    for key, text, sub in got:
        k = int(key.split("/")[1])
        assert key.startswith("img-") and text == text_of(k)
        assert sub == {"source": "joined"}
    assert {int(k.split("/")[1]) for k, _, _ in got} == set(range(N)) - {3, 7}
    st = ld.stats()
    assert st.skipped == 4 and st.samples == 20


def test_nonmatch_none_gives_none_fields(data):
    got = samples_of(loader(join_yaml(data, "none", "n.yaml")), 4)
    texts = {int(k.split("/")[1]): t for k, t, _ in got}
    assert len(got) == 12 and texts[3] is None and texts[7] is None
    assert all(texts[k] == text_of(k) for k in texts if k not in (3, 7))


def test_nonmatch_error_names_file_key_and_dataset(data):
    it = iter(loader(join_yaml(data, "error", "e.yaml")))
    with pytest.raises(BadSampleError, match=r"no sample with key '00000[37]' in joined dataset"):
        for _ in range(4):
            next(it)
    ld = loader(join_yaml(data, "error", "e.yaml"), error_policy="skip")
    assert len(samples_of(ld, 4)) == 10 and ld.stats().skipped == 2


def test_workers_and_resume_are_exact(data):
    from tests.loader.helpers import take

    path = join_yaml(data)
    ref = take(loader(path), 6)
    assert take(loader(path, num_workers=2), 6) == ref
    assert take(loader(path, num_workers=2, worker_mode="thread"), 6) == ref
    ld = loader(path)
    assert take(ld, 2) == ref[:2]
    again = loader(path)
    again.load_state_dict(ld.state_dict())
    assert take(again, 4) == ref[2:]


def test_parts_are_looked_up_once_per_recipe_and_read_in_chunks(data, monkeypatch):
    from fpipe.materialize import join
    from fpipe.materialize import materializer as materialize
    from tests.loader.helpers import take

    path = join_yaml(data, "none", "once.yaml")
    ref = take(loader(path), 4)
    calls = []
    lookup = join.part_indices
    monkeypatch.setattr(join, "part_indices", lambda *a: calls.append(1) or lookup(*a))
    monkeypatch.setattr(materialize, "_READ_CHUNK", 2)  # a recipe of 3 refs: reads in 2 chunks
    assert take(loader(path), 4) == ref
    assert len(calls) == 4  # one lookup per recipe (prefetch), reused by the reads


def test_restore_into_another_join_is_refused(data):
    ld = loader(join_yaml(data, "skip", "r1.yaml"))
    next(iter(ld))
    plain = loader(str(data / "images"))
    next(iter(plain))  # the plan state holds the primary's position only: the same size
    assert len(ld.state_dict()["fpipe_snapshot"]) == len(plain.state_dict()["fpipe_snapshot"])
    other = loader(join_yaml(data, "none", "r2.yaml"))
    with pytest.raises(SnapshotMismatchError, match=r"joined as 'images'.*texts#train#11:none"):
        other.load_state_dict(ld.state_dict())


def test_custom_joiner_with_named_parts_inside_a_blend(data):
    mds(
        data,
        "inner.yaml",
        """\
        splits:
          train:
            join:
              pic: {path: ./images}
              words: {path: ./texts, nonmatch: skip}
            joiner: {__module__: tests.loader.test_join, __class__: CaptionPair}
        """,
    )
    path = mds(
        data,
        "outer.yaml",
        """\
        splits:
          train:
            blend:
              - {weight: 1, path: ./inner.yaml, subflavors: {level: outer}}
              - {weight: 1, path: ./images}
        """,
    )
    ds = fpipe.get_train_dataset(
        path, batch_size=4, seed=2, image_decode=DECODE, topology=Topology(0, 1)
    )
    seen = 0
    it = iter(fpipe.get_loader(ds))
    for _ in range(6):
        b = next(it)
        assert isinstance(b, list)  # two sample types: the default batch is a list
        for s in b:
            if isinstance(s, CaptionPair):
                k = int(s.__key__.split("/")[1])
                assert s.caption == text_of(k).upper() and s.__subflavors__ == {"level": "outer"}
                seen += 1
    assert seen > 0


def test_join_errors_name_the_entry(data):
    bad = mds(
        data,
        "bad.yaml",
        """\
        splits:
          train:
            join:
              - {path: ./images}
              - {path: ./texts}
            joiner: CaptioningSample
        """,
    )
    with pytest.raises(
        ConfigError, match=r"bad.yaml: splits.train: joiner CaptioningSample has no field\(s\) text"
    ):
        loader(bad)
    first = mds(
        data,
        "first.yaml",
        "splits: {train: {join: [{path: ./images, nonmatch: skip}, {path: ./texts}]}}\n",
    )
    with pytest.raises(ConfigError, match=r"join\[0\]: the first dataset of a join is the primary"):
        loader(first)
    unknown = mds(
        data,
        "u.yaml",
        "splits: {train: {join: [{path: ./images}, {path: ./texts}], joiner: os.system}}\n",
    )
    with pytest.raises(
        ConfigError, match="joiner of the join of .*unknown sample type 'os.system'"
    ):
        next(iter(loader(unknown)))  # resolved in the worker: `fpipe plan` needs no joiner


def test_join_an_energon_folder_as_it_is(data):
    path = mds(
        data,
        "en.yaml",
        """\
        splits:
          train:
            join:
              - {path: ./images}
              - {path: ./energon, nonmatch: skip}
            joiner: {__module__: megatron.energon, __class__: CaptioningSample}
        """,
    )
    got = []
    for b in loader(path, num_epochs=1):
        got.extend(zip(b.__key__, b.caption))
    captions = {i: x["caption"] for i, x in enumerate(image_caption_samples(0, 8))}
    assert sorted(int(k.split("/")[1]) for k, _ in got) == list(range(8))  # 8..11: skipped
    assert all(c == captions[int(k.split("/")[1])] for k, c in got)


def test_info_lists_the_joined_datasets(data):
    from fpipe.cli._info import format_metadataset_info

    text = format_metadataset_info(join_yaml(data, "none", "i.yaml"))
    assert f"joined: 11 samples (train of {data / 'texts'}), nonmatch none" in text
    assert "joiner: tests.loader.test_join.ImageText" in text


def _cook_pair(crude):
    from fpipe.samples import basic_sample_keys

    text = crude.get("txt")  # decoded by extension, as in Energon
    return ImageText(**basic_sample_keys(crude), image=len(crude["jpg"]), text=text)


class _CrudeEncoder(DefaultTaskEncoder):
    cookers = (Cooker(_cook_pair),)


def test_crude_datasets_join_into_one_crude_sample(data, tmp_path):
    import shutil

    for name in ("images", "texts"):
        shutil.copytree(data / name, tmp_path / name, ignore=shutil.ignore_patterns(".fpipe"))
        prepare_dataset(tmp_path / name)  # no field map: crude
    path = mds(
        tmp_path,
        "c.yaml",
        "splits: {train: {join: [{path: ./images}, {path: ./texts, nonmatch: none}]}}\n",
    )
    enc = _CrudeEncoder()
    got = samples_of(loader(path, task_encoder=enc, num_epochs=1), 4, images=False)
    assert {int(k.split("/")[1]): t for k, t, _ in got} == {
        k: None if k in (3, 7) else text_of(k) for k in range(N)
    }
    mixed = mds(
        tmp_path,
        "m.yaml",
        f"splits: {{train: {{join: [{{path: ./images}}, {{path: {data / 'texts'}}}]}}}}\n",
    )
    with pytest.raises(ConfigError, match="mixes crude and typed datasets"):
        loader(mixed, task_encoder=enc)


@dataclass
class UnregisteredPair(Sample):
    """A joiner class of the user's code that is not registered (Energon's tests' pattern)."""

    image: Any
    text: str

    @staticmethod
    def from_joined(pic, words):
        return UnregisteredPair.derive_from(pic, image=pic.image, text=f"cls:{words.text}")


def unregistered_join(pic, words):
    """A joiner function of the user's code, named in YAML by module path, not registered."""
    return ImageText.derive_from(pic, image=pic.image, text=f"fn:{words.text}")


def _named_joiner(root, name, joiner):
    return mds(
        root,
        name,
        f"""\
        splits:
          train:
            join:
              - {{path: ./images}}
              - {{path: ./texts, nonmatch: skip}}
            joiner: {joiner}
        """,
    )


def test_joiner_named_by_module_path_from_the_users_imported_code(data):
    fn = _named_joiner(
        data, "fn.yaml", "{__module__: tests.loader.test_join, __function__: unregistered_join}"
    )
    got = samples_of(loader(fn), 2)
    assert got and all(text == f"fn:{text_of(int(k.split('/')[1]))}" for k, text, _ in got)
    cls = _named_joiner(
        data, "cls.yaml", "{__module__: tests.loader.test_join, __class__: UnregisteredPair}"
    )
    got = samples_of(loader(cls), 2)
    assert got and all(text.startswith("cls:text of") for _, text, _ in got)


@pytest.mark.parametrize(
    ("joiner", "message"),
    [
        ("{__module__: os, __function__: system}", "unknown joiner function 'os.system'"),
        ("{__module__: json, __function__: loads}", "unknown joiner function 'json.loads'"),
        (
            "{__module__: fpipe.samples.registry, __function__: joiner_from_name}",
            "unknown joiner function 'fpipe.samples.registry.joiner_from_name'",
        ),
        (
            "{__module__: tests.loader.no_such_module, __function__: f}",
            "import tests.loader.no_such_module in your training code",
        ),
        ("{__module__: yaml, __class__: YAMLObject}", "unknown sample type 'yaml.YAMLObject'"),
    ],
)
def test_a_joiner_outside_the_users_code_is_refused_and_nothing_imported(data, joiner, message):
    import sys

    path = _named_joiner(data, f"bad-{abs(hash(joiner))}.yaml", joiner)
    with pytest.raises(ConfigError, match=re.escape(message)):
        next(iter(loader(path)))
    assert "tests.loader.no_such_module" not in sys.modules
