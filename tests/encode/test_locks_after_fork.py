"""A process forked while one of its threads held a process-wide lock of fpipe's.

Thread workers hold these locks while they work: the lock around ``restore_seeds`` hooks for
the whole hook, the one around Pillow's warning filters for each image opened. A loader with
process workers forked meanwhile (another loader, a validation pass) gave its workers a lock
that no thread of theirs would ever release: their first such hook or image waited forever.
"""

from __future__ import annotations

import io
import os
import select
import signal
import threading

import pytest
from PIL import Image

from fpipe.decode import image as image_mod
from fpipe.encode import hooks


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
    held, forked = threading.Event(), threading.Event()

    def worker():  # another thread: the child has no such thread to release it
        with getattr(module, lock):
            held.set()
            forked.wait(5)

    t = threading.Thread(target=worker)
    t.start()
    assert held.wait(5)
    r, w = os.pipe()
    try:
        pid = os.fork()
        if pid == 0:  # child
            try:
                use(data) if use is _decoded_image else use()
                os.write(w, b"ok")
            finally:
                os._exit(0)
    finally:
        forked.set()
        t.join(5)
    os.close(w)
    ready, _, _ = select.select([r], [], [], 5)
    if not ready:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    got = os.read(r, 2) if ready else b""
    os.close(r)
    assert got == b"ok"
