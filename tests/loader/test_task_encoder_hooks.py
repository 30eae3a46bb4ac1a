"""TaskEncoder hooks around packing, run by the materializer in the documented order."""

import fpipe
from fpipe.decode.image import ImageDecodeOptions
from fpipe.encode import DefaultTaskEncoder
from fpipe.samples import TextSample


class PairPacker(DefaultTaskEncoder):
    """Packs captions two by two; pre/post-encode mark what ran, rng draws are recorded."""

    def preencode_sample(self, sample, rng):
        return TextSample(text=sample.caption, __key__=sample.__key__)

    def select_samples_to_pack(self, samples):
        return [samples[i : i + 2] for i in range(0, len(samples), 2)]

    def pack_selected_samples(self, samples):
        return TextSample(
            text=" | ".join(s.text for s in samples), __key__="+".join(s.__key__ for s in samples)
        )

    def postencode_sample(self, sample, rng):
        return sample.replace(text=f"{sample.text} #{int(rng.integers(1000))}")

    def encode_batch(self, batch):
        return {"texts": batch.text, "keys": batch.__key__}


def _batches(path, n, num_workers=0):
    ds = fpipe.get_train_dataset(
        path,
        batch_size=2,
        seed=5,
        task_encoder=PairPacker(),
        packing_buffer_size=4,
        image_decode=ImageDecodeOptions(target_size=8),
    )
    it = iter(fpipe.get_loader(ds, num_workers=num_workers))
    return [next(it) for _ in range(n)]


def test_packing_hooks(image_dataset):
    batches = _batches(image_dataset, 3)
    for b in batches:
        assert len(b["texts"]) == 2 and all(k.count("+") == 1 for k in b["keys"])
        assert all(" | " in t and " #" in t for t in b["texts"])
    # the hooks are pure: same packs and same rng draws in workers
    assert _batches(image_dataset, 3, num_workers=2) == batches
