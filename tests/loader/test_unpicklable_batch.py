"""A batch that cannot be pickled back from a worker process (a class defined inside a function,
a lambda in a field) is a typed error naming the type and the fix, within a second of being
built: not a feeder-thread traceback and a main process waiting forever."""

import time

import pytest

from fpipe.core import MaterializeError
from tests.loader.encoders import UnpicklableBatchEncoder
from tests.loader.helpers import build

TIMEOUT_S = 8.0  # without the check, a hang ends only here (as a WorkerError)


@pytest.mark.parametrize(
    ("kind", "type_name"), [("local", "LocalBatch"), ("lambda", "BatchWithHook")]
)
def test_an_unpicklable_batch_is_a_typed_error_not_a_hang(image_dataset, capfd, kind, type_name):
    loader = build(
        image_dataset, num_workers=2, encoder=UnpicklableBatchEncoder(kind), timeout=TIMEOUT_S
    )
    t0 = time.monotonic()
    with pytest.raises(MaterializeError) as info:
        next(iter(loader))
    elapsed = time.monotonic() - t0
    err = info.value
    assert elapsed < TIMEOUT_S / 2, f"took {elapsed:.1f} s"  # worker start + one batch
    assert type_name in str(err) and "module level" in str(err)
    assert 'worker_mode="thread"' in str(err) and err.step == 0
    assert err.hook == "send batch" and err.original in ("AttributeError", "PicklingError")
    assert "Traceback" not in capfd.readouterr().err  # no feeder thread traceback
    thread = build(image_dataset, num_workers=2, encoder=UnpicklableBatchEncoder(kind),
                   worker_mode="thread")  # fmt: skip
    assert next(iter(thread)).keys  # the advised fix works
