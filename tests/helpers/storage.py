"""Loopback servers for the object-storage tests: moto's S3 and a plain HTTP file server counting GETs."""
from __future__ import annotations

import contextlib
import functools
import http.client
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
from PIL import Image

from iofeed.format.policy import ImagePolicy
from iofeed.prepare.run import preprocess


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CountingServer:
    """A read-only HTTP server of `root` on 127.0.0.1 (on `port`, default any) that counts the GETs
    and HEADs of each path, and injects faults: throttling, 5xx answers, bodies that stall."""

    def __init__(self, root: Path, port: int = 0) -> None:
        self.gets: Counter = Counter()
        self.heads: Counter = Counter()
        self.stall: set[str] = set()  # paths whose GET sends half the body, then hangs
        self.drip: set[str] = set()  # paths whose GET sends the body 64 bytes every 0.1 s
        self.throttle: Counter = Counter()  # path -> GETs still to answer "503 Slow Down"
        self.failing: Counter = Counter()  # path -> requests (HEAD or GET) still to answer `fail_status`
        self.fail_status = 500
        counts, stall, throttle, folder, server = self.gets, self.stall, self.throttle, root, self

        class Handler(SimpleHTTPRequestHandler):
            def _fail(self) -> bool:
                if server.failing[self.path] > 0:
                    server.failing[self.path] -= 1
                    self.send_error(server.fail_status)
                    return True
                return False

            def do_HEAD(self) -> None:  # noqa: N802 - http.server's name
                server.heads[self.path] += 1
                if not self._fail():
                    super().do_HEAD()

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                counts[self.path] += 1
                if self._fail():
                    return
                if throttle[self.path] > 0:
                    throttle[self.path] -= 1
                    self.send_error(503, "Slow Down")
                    return
                if self.path not in stall and self.path not in server.drip:
                    super().do_GET()
                    return
                body = (folder / self.path.lstrip("/")).read_bytes()
                if self.path in server.drip:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    for start in range(0, len(body), 64):
                        self.wfile.write(body[start:start + 64])
                        self.wfile.flush()
                        time.sleep(0.1)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                time.sleep(60)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), functools.partial(Handler, directory=str(root)))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of `target` (moto's S3) that answers `failing[path]` more
    requests of a path (query left out) with `status` and an S3 error body, and forwards the rest."""

    def __init__(self, target: str, status: int = 500) -> None:
        self.failing: Counter = Counter()
        self.seen: Counter = Counter()
        proxy, host = self, target.split("://", 1)[1]

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                path = self.path.split("?")[0]
                proxy.seen[path] += 1
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if proxy.failing[path] > 0:
                    proxy.failing[path] -= 1
                    error = (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>InternalError</Code>"
                             b"<Message>We encountered an internal error.</Message></Error>")
                    self.send_response(status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(error)))
                    self.end_headers()
                    self.wfile.write(error if self.command != "HEAD" else b"")
                    return
                connection = http.client.HTTPConnection(host, timeout=30)
                connection.request(self.command, self.path, body or None, dict(self.headers))
                answer = connection.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                for name, value in answer.getheaders():
                    if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(data) if self.command != "HEAD"
                                                        else answer.getheader("Content-Length") or 0))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                connection.close()

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward  # noqa: N815 - http.server's names

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@contextlib.contextmanager
def moto_s3(port: int) -> Iterator[object]:
    """moto's standalone S3 server on 127.0.0.1:`port` (its buckets live on in this process)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def moto_bucket(monkeypatch) -> Iterator[tuple[object, str]]:
    """moto's S3 on a free loopback port with the AWS variables pointing at it (through
    `monkeypatch`), and a new bucket there: (its s3fs filesystem, "s3://BUCKET"). Buckets are
    named afresh each time: moto keeps them for the life of the process."""
    import fsspec

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    settings = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint}
    for name in settings:
        monkeypatch.setenv(name, settings[name])
    with moto_s3(port):
        fs = fsspec.filesystem("s3", endpoint_url=endpoint, skip_instance_cache=True)
        bucket = f"bucket-{os.urandom(4).hex()}"
        fs.mkdir(bucket)
        yield fs, f"s3://{bucket}"


def make_tiny_dataset(tmp: Path, classes: int = 10, per_class: int = 80, fmt: str = "jpeg") -> Path:
    """~800 tiny JPEGs in class folders, preprocessed (`fmt`) into train shards of 64 KiB (~30 for JPEG)."""
    src = tmp / "tiny"
    rng = np.random.default_rng(0)
    for c in range(classes):
        folder = src / f"{c + 1:03d}.class{c}"
        folder.mkdir(parents=True)
        for i in range(per_class):
            base = rng.integers(0, 256, size=(2, 2, 3), dtype=np.uint8)
            image = Image.fromarray(base).resize((48, 40), Image.Resampling.BILINEAR)
            image.save(folder / f"{i:04d}.jpg", quality=90)
    out = tmp / f"tiny-{fmt}.iof"
    preprocess(src, out, policy=ImagePolicy(shorter_side=32, format=fmt), shard_bytes=1 << 16, workers=1,
               progress=False)
    return out
