"""Packs chosen in the plan tier, end to end: budgets hold in the batches, encode_sample runs
per sample, pack_selected_samples per pack; same batches for 0 and 2 workers and after a
restore from inside a packing buffer."""

import pytest

import fpipe
from fpipe.core.errors import ConfigError
from fpipe.decode.image import ImageDecodeOptions
from fpipe.encode import DefaultTaskEncoder
from fpipe.plan import pack
from fpipe.samples import TextSample


class CaptionPacker(DefaultTaskEncoder):
    def encode_sample(self, sample, rng):
        return TextSample(text=sample.caption, __key__=sample.__key__)

    def pack_selected_samples(self, samples):
        return TextSample(
            text="".join(s.text for s in samples), __key__="+".join(s.__key__ for s in samples)
        )

    def encode_batch(self, batch):
        return {"texts": batch.text, "keys": batch.__key__}


def _dataset(path):
    return fpipe.get_train_dataset(
        path,
        batch_size=3,
        seed=2,
        task_encoder=CaptionPacker(),
        image_decode=ImageDecodeOptions(target_size=8),
        columns=["caption.chars"],
        plan_stages=[pack({"caption.chars": 60}, strategy="balanced", packing_buffer_size=10)],
    )


def _take(loader, n):
    it = iter(loader)
    return [next(it) for _ in range(n)]


def test_plan_packs_end_to_end(image_dataset):
    ref = _take(fpipe.get_loader(_dataset(image_dataset)), 6)
    for b in ref:
        assert len(b["texts"]) == 3  # batch_size packs
        assert all(len(t) <= 60 for t in b["texts"])  # the budget holds after encoding
    keys = [k for b in ref for key in b["keys"] for k in key.split("+")]
    assert len(keys) == len(set(keys)) and any("+" in k for b in ref for k in b["keys"])
    assert _take(fpipe.get_loader(_dataset(image_dataset), num_workers=2), 6) == ref
    for cut in (1, 2):  # 10 refs per buffer give 3-4 packs: cut 1 lands inside a buffer
        loader = fpipe.get_loader(_dataset(image_dataset))
        head = _take(loader, cut)
        resumed = fpipe.get_loader(_dataset(image_dataset))
        resumed.load_state_dict(loader.state_dict())
        assert head + _take(resumed, 6 - cut) == ref


class EncodesOnly(DefaultTaskEncoder):
    def encode_sample(self, sample, rng):
        return sample


@pytest.mark.parametrize("encoder", [None, EncodesOnly()])
def test_plan_packs_need_an_encoder_that_packs(image_dataset, encoder):
    ds = fpipe.get_train_dataset(
        image_dataset,
        batch_size=3,
        task_encoder=encoder,
        columns=["caption.chars"],
        plan_stages=[pack({"caption.chars": 60}, packing_buffer_size=10)],
    )
    assert ds.plan.next(ds.plan.init(), 1)[1]  # the plan alone needs no encoder (fpipe inspect)
    # refused when the loader is made, not at the first batch inside a worker
    name = type(ds.materializer.task_encoder).__name__
    with pytest.raises(ConfigError, match="defines pack_selected_samples") as refused:
        fpipe.get_loader(ds, num_workers=2)
    assert "fpipe.plan.pack" in str(refused.value)
    assert f"{name} does not define" in str(refused.value)
    assert "select_samples_to_pack" not in str(refused.value)  # not needed for plan packs
