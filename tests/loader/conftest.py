"""A small prepared image-caption dataset shared by the loader tests."""

import pytest

from tests.loader.helpers import prepared_images


@pytest.fixture(scope="session")
def image_dataset(tmp_path_factory):
    return prepared_images(
        tmp_path_factory.mktemp("images"), shards=10, per_shard=12, split="8,1,1"
    )
