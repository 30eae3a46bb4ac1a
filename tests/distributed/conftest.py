import pytest

from tests.distributed.helpers import make_text_dataset


@pytest.fixture(scope="session")
def text_dataset(tmp_path_factory):
    """48 text samples in 4 shards (8 global steps of 6 per epoch)."""
    return make_text_dataset(tmp_path_factory.mktemp("text"), shards=4, per_shard=12)
