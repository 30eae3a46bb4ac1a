"""A real S3-compatible server on 127.0.0.1 for tests and benchmarks (moto's server).

``LocalS3()`` starts moto's threaded server (or, with ``process=True``, ``moto_server`` in its
own process, so a benchmark's server does not share the loader's GIL) on a free loopback port.
``FaultProxy`` sits in front of it and injects the faults a real bucket gives under load into a
chosen share of GETs: latency, 503/500 errors, reset connections, stalls (``FlakyProxy``: every
``fail_every``-th GET a 503). Nothing here talks to any other address.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import http.client
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

__all__ = ["FaultProxy", "FlakyProxy", "LocalS3", "S3Server"]

HOST = "127.0.0.1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class S3Server:
    """An S3-compatible server at ``endpoint`` (run as ``proc`` when it is a process): the
    variables obstore and boto3 read, a client, uploads, the server's CPU time."""

    _client = None

    def __init__(self, endpoint: str, proc: subprocess.Popen | None = None):
        self.endpoint = endpoint
        self._proc = proc

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(30)

    def cpu_seconds(self) -> float:
        """CPU time (user + system) the server process has used (servers run as processes)."""
        with open(f"/proc/{self._proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def env(self, endpoint: str | None = None) -> dict[str, str]:
        """AWS variables pointing at this server (or at ``endpoint``, e.g. a proxy)."""
        return {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint or self.endpoint,
            "AWS_ALLOW_HTTP": "true",
        }

    def client(self):
        """A boto3 client of this server (made once: making one costs ~0.1 s of CPU)."""
        if self._client is None:
            self._client = self._new_client()
        return self._client

    def _new_client(self):
        import boto3

        e = self.env()
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=e["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=e["AWS_SECRET_ACCESS_KEY"],
            region_name=e["AWS_REGION"],
        )

    def upload(self, folder: str | Path, bucket: str, prefix: str) -> str:
        """Create ``bucket`` (if needed), copy ``folder``'s files (not ``.fpipe``) under
        ``prefix``; returns ``s3://bucket/prefix``."""
        c = self.client()
        if bucket not in {b["Name"] for b in c.list_buckets().get("Buckets", [])}:
            c.create_bucket(Bucket=bucket)
        folder = Path(folder)
        for p in sorted(folder.rglob("*")):
            rel = p.relative_to(folder).as_posix()
            if p.is_file() and not rel.startswith(".fpipe"):
                c.put_object(Bucket=bucket, Key=f"{prefix}/{rel}", Body=p.read_bytes())
        return f"s3://{bucket}/{prefix}"


class LocalS3(S3Server):
    """moto's S3 server on loopback: a thread of this process, or (``process=True``) its own
    process."""

    def __init__(self, *, process: bool = False):
        self._proc = self._thread = None
        if process:
            port = _free_port()
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            self.endpoint = f"http://{HOST}:{port}"
            _wait_listening(port)
        else:
            import logging

            from moto.server import ThreadedMotoServer

            logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request

            self._thread = ThreadedMotoServer(ip_address=HOST, port=0, verbose=False)
            self._thread.start()  # serving, no request yet
            server = self._thread._server
            # TCP_NODELAY, as for the fault proxy: werkzeug writes a response's head and body
            # apart, and Nagle held each body for the client's delayed ACK (~40 ms a request)
            server.RequestHandlerClass = type(
                "NoDelayHandler", (server.RequestHandlerClass,), {"disable_nagle_algorithm": True}
            )
            host, port = self._thread.get_host_and_port()
            self.endpoint = f"http://{host}:{port}"

    def stop(self) -> None:
        if self._thread is not None:
            # werkzeug's serving loop looks for the stop request every 0.5 s, or after a
            # request: connections wake it until it has stopped
            stopping = threading.Thread(target=self._thread.stop)
            stopping.start()
            host, port = self._thread.get_host_and_port()
            while stopping.is_alive():
                with contextlib.suppress(OSError), socket.create_connection((host, port), 1):
                    pass
                stopping.join(0.02)
        super().stop()


def _wait_listening(port: int, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"no server on {HOST}:{port} after {timeout} s")


#: What the fault proxy does to one GET: ``(kind, seconds)``; kinds: ``"delay"`` (wait, then
#: forward), ``"503"`` / ``"500"`` (an S3 error body instead of forwarding), ``"reset"`` (close
#: the connection with a TCP reset, no response), ``"stall"`` (hold the connection for
#: ``seconds`` without answering, then close it).
FAULT_KINDS = ("delay", "503", "500", "reset", "stall")


class FaultProxy:
    """Forwards requests to ``upstream`` (on 127.0.0.1) and injects faults into GETs.

    Each GET (numbered from 1 in arrival order) gets a fault by share: ``delay`` of them wait
    ``delay_s`` before being forwarded, ``error503`` / ``error500`` get that status, ``reset``
    a reset connection, ``stall`` a connection held ``stall_s`` without an answer. Which GET
    gets what is a hash of ``(seed, number)``. ``choose(number, path, headers) -> (kind,
    seconds) | None`` decides instead, when given (a test's "the 25th GET is slow").

    ``counts``: GETs seen (``"get"``), requests forwarded, each fault kind, ``"cancelled"`` (the
    client closed the connection while a delay or stall held it: a hedged read's loser) and
    ``"duplicates"`` (a GET of a range another GET of the same range was still waiting for: a
    hedge). Bounded: every wait ends after its seconds or at :meth:`stop`, and the proxy stops
    itself after ``lifetime_s``.
    """

    def __init__(
        self,
        upstream: str,
        *,
        delay: float = 0.0,
        delay_s: float = 2.0,
        error503: float = 0.0,
        error500: float = 0.0,
        reset: float = 0.0,
        stall: float = 0.0,
        stall_s: float = 5.0,
        seed: int = 0,
        choose=None,
        lifetime_s: float = 900.0,
    ):
        host, port = upstream.split("://", 1)[1].split(":")
        if host not in (HOST, "localhost"):
            raise ValueError(f"the fault proxy forwards to loopback only, not {host}")
        self.counts: collections.Counter = collections.Counter()
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._in_flight: collections.Counter = collections.Counter()
        shares = [("delay", delay, delay_s), ("503", error503, 0.0), ("500", error500, 0.0),
                  ("reset", reset, 0.0), ("stall", stall, stall_s)]  # fmt: skip
        if sum(share for _, share, _ in shares) > 1.0:
            raise ValueError("fault shares add up to more than 1")

        def by_share(number: int, path: str, headers) -> tuple[str, float] | None:
            digest = hashlib.blake2b(f"{seed}:{number}".encode(), digest_size=8).digest()
            u = int.from_bytes(digest, "little") / 2**64
            for kind, share, seconds in shares:
                if u < share:
                    return kind, seconds
                u -= share
            return None

        pick = choose or by_share
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # TCP_NODELAY: a response's head and body go out as written, without Nagle's wait
            # for the client's delayed ACK (~40 ms a GET on loopback)
            disable_nagle_algorithm = True

            def log_message(self, *args):  # quiet
                pass

            def _send(self, status: int, body: bytes, headers=()) -> None:
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.command != "GET":
                    return self._relay(body)
                where = (self.path, self.headers.get("Range"))
                with proxy._lock:
                    proxy.counts["get"] += 1
                    number = proxy.counts["get"]
                    proxy.counts["duplicates"] += proxy._in_flight[where] > 0
                    proxy._in_flight[where] += 1
                try:
                    self._get(pick(number, self.path, self.headers), body)
                finally:
                    with proxy._lock:
                        proxy._in_flight[where] -= 1
                        if not proxy._in_flight[where]:
                            del proxy._in_flight[where]  # bounded: only ranges in flight

            def _get(self, fault, body: bytes) -> None:
                kind, seconds = fault or ("", 0.0)
                if kind:
                    proxy._count(kind)
                if kind in ("delay", "stall") and not self._hold(seconds):
                    proxy._count("cancelled")
                    self.close_connection = True
                    return
                if kind == "stall":
                    self.close_connection = True  # no answer at all
                elif kind in ("503", "500"):
                    code = "SlowDown" if kind == "503" else "InternalError"
                    msg = f"<Error><Code>{code}</Code><Message>try again</Message></Error>"
                    self._send(int(kind), msg.encode())
                elif kind == "reset":
                    self.connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    self.connection.close()
                    self.close_connection = True
                else:
                    self._relay(body)

            def _hold(self, seconds: float) -> bool:
                """Wait ``seconds`` (less if the proxy stops); False if the client closed the
                connection meanwhile."""
                end = time.monotonic() + seconds
                while (left := end - time.monotonic()) > 0 and not proxy._stopped.is_set():
                    readable, _, _ = select.select([self.connection], [], [], min(left, 0.02))
                    if readable:
                        try:
                            if not self.connection.recv(1, socket.MSG_PEEK):
                                return False
                        except OSError:
                            return False
                return True

            def _relay(self, body: bytes) -> None:
                conn = http.client.HTTPConnection(host, int(port), timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                headers["Host"] = self.headers.get("Host", f"{host}:{port}")
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                conn.close()
                proxy._count("forwarded")
                head = self.command == "HEAD"  # keep the object's Content-Length, send no body
                skip = ("transfer-encoding", "connection") + (() if head else ("content-length",))
                kept = [(k, v) for k, v in resp.getheaders() if k.lower() not in skip]
                if head:
                    self.send_response(resp.status)
                    for k, v in kept:
                        self.send_header(k, v)
                    self.end_headers()
                else:
                    self._send(resp.status, data, kept)

            do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _forward

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):  # a client gone away: quiet
                pass

        self._server = Server((HOST, 0), Handler)
        self.endpoint = f"http://{HOST}:{self._server.server_address[1]}"
        # a short poll: stop() waits for the serving loop to see the request (0.5 s by default)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        self._timer = threading.Timer(lifetime_s, self.stop)
        self._timer.daemon = True
        self._timer.start()

    def _count(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1

    def stop(self) -> None:
        """Stop serving (every wait in progress ends); safe to call twice."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._timer.cancel()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class FlakyProxy(FaultProxy):
    """Forwards requests to ``upstream``; every ``fail_every``-th GET gets a 503 instead."""

    def __init__(self, upstream: str, fail_every: int = 3):
        def every(number: int, path: str, headers):
            return ("503", 0.0) if number % fail_every == 0 else None

        super().__init__(upstream, choose=every)

    @property
    def failed(self) -> int:
        return self.counts["503"]

    @property
    def forwarded(self) -> int:
        return self.counts["forwarded"]


def set_env(values: dict[str, str]) -> dict[str, str | None]:
    """Set environment variables; returns the old values for :func:`restore_env`."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    return old


def restore_env(old: dict[str, str | None]) -> None:
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@contextlib.contextmanager
def serving_s3(cache_dir: Path):
    """A local S3 server with fpipe's environment pointed at it (index cache in ``cache_dir``),
    stopped and the environment restored on exit."""
    server = LocalS3()
    old = set_env({**server.env(), "FPIPE_CACHE": str(cache_dir)})
    try:
        yield server
    finally:
        restore_env(old)
        server.stop()
