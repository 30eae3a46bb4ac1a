"""A real S3-compatible server on 127.0.0.1 for tests and benchmarks (moto's server).

``LocalS3()`` starts moto's threaded server (or, with ``process=True``, ``moto_server`` in its
own process, so a benchmark's server does not share the loader's GIL) on a free loopback port.
``FlakyProxy`` sits in front of it and answers every ``fail_every``-th GET with a 503, the
transient error a real bucket gives under load. Nothing here talks to any other address.
"""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

__all__ = ["FlakyProxy", "LocalS3", "S3Server"]

HOST = "127.0.0.1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class S3Server:
    """An S3-compatible server at ``endpoint`` (run as ``proc`` when it is a process): the
    variables obstore and boto3 read, a client, uploads, the server's CPU time."""

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
            self._thread.start()
            host, port = self._thread.get_host_and_port()
            self.endpoint = f"http://{host}:{port}"

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.stop()
        super().stop()


def _wait_listening(port: int, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"no server on {HOST}:{port} after {timeout} s")


class FlakyProxy:
    """Forwards requests to ``upstream``; every ``fail_every``-th GET gets a 503 instead."""

    def __init__(self, upstream: str, fail_every: int = 3):
        up = upstream.split("://", 1)[1]
        host, port = up.split(":")
        self.failed = 0
        self.forwarded = 0
        count = [0]
        lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.command == "GET":
                    with lock:
                        count[0] += 1
                        fail = count[0] % fail_every == 0
                    if fail:
                        proxy.failed += 1
                        msg = b"<Error><Code>SlowDown</Code><Message>try again</Message></Error>"
                        self.send_response(503)
                        self.send_header("Content-Length", str(len(msg)))
                        self.end_headers()
                        self.wfile.write(msg)
                        return
                conn = http.client.HTTPConnection(host, int(port), timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                headers["Host"] = self.headers.get("Host", f"{host}:{port}")
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                proxy.forwarded += 1
                self.send_response(resp.status)
                head = self.command == "HEAD"  # keep the object's Content-Length, send no body
                skip = ("transfer-encoding", "connection") + (() if head else ("content-length",))
                for k, v in resp.getheaders():
                    if k.lower() not in skip:
                        self.send_header(k, v)
                if not head:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if not head:
                    self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _forward

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://{HOST}:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


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
