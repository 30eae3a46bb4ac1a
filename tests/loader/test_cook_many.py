"""Samples of small members cooked a recipe at a time (``fpipe.materialize._cook_many``)
equal those cooked one by one, and a sample that fails among them is still named by its own
key, at its own place: its error is raised (or it is skipped) as when each was cooked alone."""

import dataclasses

import numpy as np
import pytest

import fpipe
from fpipe.core.errors import BadSampleError
from fpipe.decode import DecodeLimits, fields, register_decoder, unregister_decoder
from fpipe.encode.hooks import current_position
from fpipe.materialize import _cook, materializer
from fpipe.materialize._cook_many import Cooked
from fpipe.storage import prepare_dataset
from tests.loader.test_per_sample_golden import _npy, _write

BAD = "s1/0002"  # its .npy header declares more values than its bytes hold


class Samples(fpipe.DefaultTaskEncoder):
    """Batches are the samples themselves (encode_sample leaves them as they are)."""

    def batch(self, samples):
        return samples


def _set(root, ext, bad=False):
    rng = np.random.default_rng(3)
    root.mkdir()
    for s in range(2):
        samples = []
        for j in range(6):
            ids = rng.integers(0, 99, size=int(rng.integers(2, 9)), dtype=np.int32)
            data = _npy(ids) if ext == "npy" else f"text {s} {ids.tolist()}".encode()
            if ext == "id":  # an int: a str field gets its text (made as it always was)
                data = str(int(ids[0])).encode()
            if bad and f"s{s}/{j:04d}" == BAD:
                data = data[:-4]
            samples.append((f"{j:04d}", {ext: data, "cls": b"7"}))  # cls: not read
        _write(root / f"s{s}.tar", samples)  # keys s0/0000 ... s1/0005
    prepare_dataset(root, fields={"text": ext}, sample_type="TextSample", split="1,0,0")
    return root


def _samples(root, batches, **kw):
    ds = fpipe.get_train_dataset(
        str(root), batch_size=4, shuffle_buffer_size=None, seed=1, task_encoder=Samples(), **kw
    )
    it = iter(fpipe.get_loader(ds, num_workers=0))
    return [s for _ in range(batches) for s in next(it)]


@pytest.fixture
def cooked(monkeypatch):
    """The keys of the samples cooked a recipe at a time."""
    keys = []
    real = materializer.cook_many

    def spy(*args):
        out = real(*args)
        keys.extend(r.key for r in out if type(r) is Cooked)
        return out

    monkeypatch.setattr(materializer, "cook_many", spy)
    return keys


def _one_by_one(monkeypatch):
    monkeypatch.setattr(_cook, "plain_fields", lambda mat, how: None)


def _same(a, b):
    assert type(a) is type(b)
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), f.name
            assert x.flags.owndata == y.flags.owndata and x.flags.writeable == y.flags.writeable
        else:
            assert type(x) is type(y) and x == y, f.name


@pytest.mark.parametrize("ext", ["npy", "txt", "id"])
def test_samples_cooked_together_equal_those_cooked_alone(tmp_path, monkeypatch, cooked, ext):
    root = _set(tmp_path / ext, ext)
    together = _samples(root, 3)
    assert cooked == ([] if ext == "id" else [s.__key__ for s in together])
    _one_by_one(monkeypatch)
    alone = _samples(root, 3)
    assert len(together) == len(alone) == 12
    for a, b in zip(together, alone, strict=True):
        _same(a, b)


def test_arrays_without_a_size_limit_are_cooked_together_too(tmp_path, monkeypatch, cooked):
    root = _set(tmp_path / "nolimit", "npy")
    together = _samples(root, 1, decode_limits=DecodeLimits(max_array_bytes=None))
    assert cooked == [s.__key__ for s in together] and len(cooked) == 4
    _one_by_one(monkeypatch)
    for a, b in zip(together, _samples(root, 1), strict=True):
        _same(a, b)


def test_a_bad_member_among_them_is_named_by_its_key(tmp_path, monkeypatch, cooked):
    root = _set(tmp_path / "bad", "npy", bad=True)
    with pytest.raises(BadSampleError) as err:
        _samples(root, 3)
    assert err.value.key == BAD and "npy" in err.value.reason
    assert "s1/0003" in cooked and BAD not in cooked  # the rest of its batch was cooked
    skipped = _samples(root, 3, error_policy="skip")  # the others, in their order
    _one_by_one(monkeypatch)
    alone = _samples(root, 3, error_policy="skip")
    assert [s.__key__ for s in skipped] == [s.__key__ for s in alone]
    assert BAD not in [s.__key__ for s in skipped] and len(skipped) == 11
    for a, b in zip(skipped, alone, strict=True):
        _same(a, b)


def test_a_decoder_registered_for_the_member_runs_in_its_samples_context(tmp_path, cooked):
    root = _set(tmp_path / "reg", "npy")
    seen = []

    def decode(data):
        seen.append(current_position())  # a ConfigError outside a sample's hooks
        return fields.decode_npy(data)

    old = register_decoder("npy", decode)
    try:
        got = _samples(root, 1)
    finally:
        unregister_decoder("npy")
        if old is not None and old is not fields.decode_npy:
            register_decoder("npy", old)
    assert seen == [(0, p) for p in range(4)] and len(got) == 4 and not cooked
