"""A process forked while one of its threads held a process-wide lock of fpipe's.

Thread workers hold these locks while they work: the lock around ``restore_seeds`` hooks for
the whole hook, the one around Pillow's warning filters for each image opened. A loader with
process workers forked meanwhile (another loader, a validation pass) gave its workers a lock
that no thread of theirs would ever release: their first such hook or image waited forever.
"""

from __future__ import annotations

import io
import os

import pytest
from PIL import Image

from fpipe.decode import image as image_mod
from fpipe.encode import hooks
from tests.forking import forked_while_held


def _png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (4, 4)).save(buf, "PNG")  # not a JPEG: opened through Pillow's warnings
    return buf.getvalue()


def _seeded_hook() -> None:
    with hooks.seeded_global_rngs(3):
        pass


def _decoded_image(data: bytes) -> None:
    image_mod.decode_image(data, out="numpy")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize(
    ("lock", "use"),
    [("_GLOBAL_SEEDS", _seeded_hook), ("_WARNINGS_LOCK", _decoded_image)],
    ids=["restore_seeds", "image_warnings"],
)
def test_a_child_forked_while_another_thread_held_the_lock_can_use_it(lock, use):
    module = hooks if lock == "_GLOBAL_SEEDS" else image_mod
    data = _png()
    use(data) if use is _decoded_image else use()  # imports done here, not in the child

    def child() -> bytes:
        use(data) if use is _decoded_image else use()
        return b"ok"

    assert forked_while_held([getattr(module, lock)], child) == b"ok"
