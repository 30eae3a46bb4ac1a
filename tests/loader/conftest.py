"""A small prepared image-caption dataset shared by the loader tests."""

import pytest

from fpipe.storage import prepare_dataset
from tests.storage.helpers import make_image_caption_dataset


@pytest.fixture(scope="session")
def image_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    make_image_caption_dataset(root, shards=10, per_shard=12, with_json=False)
    prepare_dataset(
        root,
        fields={"image": "jpg", "caption": "txt"},
        sample_type="CaptioningSample",
        split="8,1,1",
    )
    return str(root)
