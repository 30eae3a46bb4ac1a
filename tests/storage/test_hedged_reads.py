"""Hedged ranged GETs and the fault-injecting proxy, against moto's S3 server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from tests.optional import skip_unless_installed  # noqa: E402

skip_unless_installed("obstore", "moto")

from fpipe.core.errors import ConfigError  # noqa: E402
from fpipe.storage import open_dataset, prepare_dataset  # noqa: E402
from fpipe.storage.read import read_ahead, remote  # noqa: E402
from fpipe.storage.read._gets import Get, Gets  # noqa: E402
from fpipe.storage.read._hedge import Hedger  # noqa: E402
from tests.storage.helpers import make_image_caption_dataset  # noqa: E402
from tests.storage.s3_server import FaultProxy, restore_env, serving_s3, set_env  # noqa: E402

FIELDS = {"image": "jpg", "caption": "txt"}
SLOW_S = 0.6


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with serving_s3(tmp_path_factory.mktemp("cache")) as server:
        yield server


@pytest.fixture(scope="module")
def pair(s3, tmp_path_factory):
    local = tmp_path_factory.mktemp("data") / "imgs"
    make_image_caption_dataset(local, shards=3, per_shard=8, with_json=False)
    url = s3.upload(local, "fpipe-hedge", "imgs")
    prepare_dataset(local, fields=FIELDS, split="1,0,0")
    prepare_dataset(url, fields=FIELDS, split="1,0,0")
    return str(local), url


def _slow_ranged_get(which: int):
    """A ``choose`` for the proxy: the ``which``-th ranged GET waits SLOW_S, no other GET."""
    ranged = itertools.count(1)

    def choose(number, path, headers):
        if headers.get("Range") and next(ranged) == which:
            return "delay", SLOW_S
        return None

    return choose


def _read_through(s3, url, proxy, options):
    """Each sample read one at a time (its own ranged GET) through ``proxy``; the seconds of
    each read, the bytes, the reader's stats."""
    old = set_env({"AWS_ENDPOINT_URL": proxy.endpoint})
    try:
        ds = open_dataset(url, storage=options)
        seconds, got = [], []
        for i in range(len(ds)):
            t0 = time.monotonic()
            got.append(ds.read(i))  # the tar reader checks the member headers, as always
            seconds.append(time.monotonic() - t0)
        return seconds, got, ds.reader._files.stats()
    finally:
        restore_env(old)


def test_a_slow_get_is_hedged_and_the_bytes_are_the_same(s3, pair):
    local, url = pair
    options = remote.StorageOptions(hedge_min_delay_s=0.15)
    with FaultProxy(s3.endpoint, choose=_slow_ranged_get(22)) as proxy:
        seconds, got, stats = _read_through(s3, url, proxy, options)
        end = time.monotonic() + 2 * SLOW_S
        while proxy.counts["cancelled"] == 0 and time.monotonic() < end:
            time.sleep(0.01)  # the proxy notices the loser's closed connection within 20 ms
    ref = open_dataset(local)
    assert got == [ref.read(i) for i in range(len(ref))]
    assert proxy.counts["delay"] == 1 and proxy.counts["duplicates"] >= 1
    assert seconds[21] < SLOW_S * 0.7, seconds[21]  # the hedge answered, not the slow GET
    assert stats["hedges"] >= 1 and stats["hedge_wins"] >= 1 and stats["requests"] == 24
    assert proxy.counts["cancelled"] == 1  # the slow request was cancelled, not waited for


def test_without_hedging_the_slow_get_is_waited_for(s3, pair):
    local, url = pair
    options = remote.StorageOptions(hedge=False)
    with FaultProxy(s3.endpoint, choose=_slow_ranged_get(22)) as proxy:
        seconds, got, stats = _read_through(s3, url, proxy, options)
    assert got == [open_dataset(local).read(i) for i in range(24)]
    assert seconds[21] >= SLOW_S and stats["hedges"] == 0 and proxy.counts["duplicates"] == 0


def test_a_late_read_ahead_is_hedged_and_the_bytes_are_the_same(s3, pair):
    """A read the batch needs while its read-ahead GET is still running is hedged as a direct
    read would be; every other range read ahead is taken, not fetched again."""
    local, url = pair
    # options of its own: stores are kept per (bucket, options), with the endpoint they had
    options = remote.StorageOptions(hedge_min_delay_s=0.16)
    with FaultProxy(s3.endpoint, choose=_slow_ranged_get(22)) as proxy:
        old = set_env({"AWS_ENDPOINT_URL": proxy.endpoint})
        try:
            ds = open_dataset(url, storage=options)
            got = [ds.read(i) for i in range(21)]  # 21 direct reads: the hedger has its times
            win = read_ahead.Window(1 << 20)
            win.add(0, *ds.read_ahead([21, 22, 23]))  # the 22nd ranged GET (sample 21) is slow
            t0 = time.monotonic()
            with read_ahead.reading_with(win):
                ds.prefetch([21, 22, 23])
                got += [ds.read(i) for i in (21, 22, 23)]
            took = time.monotonic() - t0
        finally:
            restore_env(old)
    assert got == [open_dataset(local).read(i) for i in range(24)]
    assert took < SLOW_S * 0.7, took  # the hedge answered, not the slow GET
    stats = ds.reader._files.stats()
    assert stats["requests"] == 24 and stats["hedges"] >= 1 and stats["hedge_wins"] >= 1
    assert proxy.counts["duplicates"] >= 1 and win.held == 0


def _reads_through(hedger: Hedger, request, reads: int, ahead: bool = False) -> list:
    """Results of ``reads`` reads started at once through a :class:`Gets` with ``hedger`` on
    the I/O loop; ``request(store, name, offset, size)`` answers them (read ``i`` asks for
    offset ``i``)."""
    gets = Gets(remote._io_loop(), request, remote._as_os_error, 64, hedger)
    batch = [Get(None, "x", "s3://b/x", i, 1, ahead) for i in range(reads)]
    gets.submit(batch)
    return [g.future.result(timeout=10) for g in batch]


def _fake_reads(hedger: Hedger, reads: int, slow_s: float):
    """Run ``reads`` reads at once through ``hedger``; each read's first request takes
    ``slow_s``, a second one answers at once. Requests sent per read."""
    sent = [0] * reads

    def request(store, name, off, size):
        sent[off] += 1
        first = sent[off] == 1

        async def answer():
            if first:
                await asyncio.sleep(slow_s)
            return b"x%d" % off

        return answer()

    assert _reads_through(hedger, request, reads) == [b"x%d" % i for i in range(reads)]
    return sent


def test_hedges_are_capped_and_one_per_read():
    hedger = Hedger(quantile=0.95, max_fraction=0.1, min_delay_s=0.001)
    assert _fake_reads(hedger, 20, 0.0) == [1] * 20  # warm-up: no threshold known yet
    sent = _fake_reads(hedger, 50, 0.05)  # every read is slow enough to hedge
    assert max(sent) == 2  # at most one hedge per read
    assert 6 <= hedger.hedges == sent.count(2) <= 0.1 * hedger.reads  # the cap (70 reads)
    assert hedger.hedge_wins == hedger.hedges


def test_a_failed_request_is_covered_by_the_other():
    hedger = Hedger(quantile=0.5, max_fraction=1.0, min_delay_s=0.001, warmup=1)
    hedger.record(0.001)
    calls = itertools.count()

    def slow_then_failing(store, name, off, size):
        first = next(calls) == 0

        async def answer():
            if first:
                await asyncio.sleep(0.05)
                return b"first"
            raise OSError("hedge failed")

        return answer()

    assert _reads_through(hedger, slow_then_failing, 1) == [b"first"]  # the hedge's error: ignored
    assert hedger.hedges == 1

    def failing(store, name, off, size):
        number = next(calls)

        async def answer():
            await asyncio.sleep(0.0 if number % 2 else 0.05)  # the first request fails last
            raise OSError(f"request {number} failed")

        return answer()

    got = _reads_through(hedger, failing, 1)[0]  # the first request's error, when both fail
    assert isinstance(got, OSError) and str(got) == "request 2 failed", got
    assert hedger.hedges == 2


def test_reads_ahead_are_not_hedged_until_needed():
    """A read ahead is hedged only once a reader waits for it (``needed_now``)."""
    hedger = Hedger(quantile=0.5, max_fraction=1.0, min_delay_s=0.001, warmup=1)
    hedger.observed(0.001)  # a read ended earlier: its time, and a hedge's worth of tokens
    sent = [0, 0]

    def request(store, name, off, size):
        sent[off] += 1
        first = sent[off] == 1

        async def answer():
            await asyncio.sleep(0.3 if first else 0.0)
            return b"x%d" % off

        return answer()

    gets = Gets(remote._io_loop(), request, remote._as_os_error, 64, hedger)
    batch = [Get(None, "x", "s3://b/x", i, 1, True) for i in range(2)]
    gets.submit(batch)
    time.sleep(0.05)
    assert sent == [1, 1]  # past the hedge delay, nobody waiting: no second request
    gets.needed_now(batch[1])
    assert batch[1].future.result(timeout=10) == b"x1"
    assert sent[1] == 2 and hedger.hedge_wins == 1  # the reader's wait was hedged
    assert batch[0].future.result(timeout=10) == b"x0" and sent[0] == 1


def test_gets_in_flight_stay_within_each_lane_s_limit():
    """At most ``concurrency`` direct reads and 4 x ``concurrency`` reads ahead are in flight;
    the queued ones start as earlier ones end, and every read is answered once."""
    in_flight = {False: 0, True: 0}
    most = {False: 0, True: 0}

    def request(store, name, off, size):
        lane = off >= 1000  # reads ahead are numbered from 1000
        in_flight[lane] += 1
        most[lane] = max(most[lane], in_flight[lane])

        async def answer():
            await asyncio.sleep(0.002)
            in_flight[lane] -= 1
            return b"x%d" % off

        return answer()

    gets = Gets(remote._io_loop(), request, remote._as_os_error, 3, None)
    batch = [Get(None, "x", "s3://b/x", i, 1, False) for i in range(20)]
    batch += [Get(None, "x", "s3://b/x", 1000 + i, 1, True) for i in range(40)]
    gets.submit(batch)
    assert [g.future.result(timeout=10) for g in batch] == [b"x%d" % g.off for g in batch]
    assert most == {False: 3, True: 12}


def test_a_failure_while_answering_a_read_still_answers_it():
    """The reader waits without a timeout: a failure in the bookkeeping of an answer (here the
    hedger's) reaches it as the read's error instead of leaving it waiting."""

    class Broken(Hedger):
        def record(self, seconds):
            raise RuntimeError("bookkeeping broke")

    def request(store, name, off, size):
        async def answer():
            return b"x"

        return answer()

    hedger = Broken(quantile=0.5, max_fraction=1.0, min_delay_s=0.001)
    got = _reads_through(hedger, request, 2)
    assert all(isinstance(g, OSError) and "bookkeeping broke" in str(g) for g in got), got


def test_the_proxy_injects_each_fault_and_reads_still_match(s3, pair):
    local, url = pair
    options = remote.StorageOptions(
        max_retries=10, backoff_s=0.01, max_backoff_s=0.05, hedge=False,
        client={"allow_http": True, "timeout": "2s"},
    )  # fmt: skip
    faults = dict(error503=0.1, error500=0.1, reset=0.1, stall=0.05, stall_s=0.2, seed=3)
    with FaultProxy(s3.endpoint, **faults) as proxy:
        _, got, _ = _read_through(s3, url, proxy, options)
    assert got == [open_dataset(local).read(i) for i in range(24)]
    assert all(proxy.counts[k] >= 1 for k in ("503", "500", "reset", "stall")), proxy.counts


def test_the_proxy_only_forwards_to_loopback():
    with pytest.raises(ValueError, match="loopback"):
        FaultProxy("http://10.0.0.1:9000")


def test_hedge_options_are_checked():
    with pytest.raises(ConfigError, match="hedge_quantile"):
        remote.StorageOptions(hedge_quantile=0.0)
    with pytest.raises(ConfigError, match="hedge_max_fraction"):
        remote.StorageOptions(hedge_max_fraction=1.5)
