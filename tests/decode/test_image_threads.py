"""Image decoding from several threads (thread workers) leaves the process's warning filters
as they were (``warnings.catch_warnings`` swaps a process-wide list)."""

import io
import sys
import threading
import warnings

from PIL import Image

from fpipe.decode.image import decode_image


def test_decoding_in_threads_keeps_the_warning_filters():
    buf = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buf, "JPEG")
    data = buf.getvalue()
    before = list(warnings.filters)

    def decode_many():
        for _ in range(200):
            decode_image(data, out="numpy")

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        threads = [threading.Thread(target=decode_many) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert warnings.filters == before
