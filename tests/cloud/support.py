"""A real S3 wire-protocol server on loopback (moto's server mode) and a TCP relay in front of
it that records request lines and can hold a request, for the cloud sync tests (issue 21).

Nothing here reaches into an engine: devices are real homes with real daemons, and they
talk to the server over real sockets with their own S3 client.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.helpers import Cli

__all__ = ["S3Server", "HoldingRelay", "ACCESS", "SECRET", "add_account", "bucket_objects"]

ACCESS = "AKIDCLOUDTEST0001"
SECRET = "cloud-secret-CANARY-6f1d2a9b7c-do-not-leak"  # a canary: must never show up


@dataclass
class S3Server:
    """moto's ThreadedMotoServer on 127.0.0.1 with one bucket per test that asks for one."""

    server: Any = None
    endpoint: str = ""

    def start(self) -> S3Server:
        from moto.server import ThreadedMotoServer

        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3", endpoint_url=self.endpoint, region_name="us-east-1", aws_access_key_id=ACCESS, aws_secret_access_key=SECRET
        )

    def bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name


def bucket_objects(server: S3Server, bucket: str) -> dict[str, bytes]:
    s3 = server.client()
    out: dict[str, bytes] = {}
    token: dict[str, str] = {}
    while True:
        page = s3.list_objects_v2(Bucket=bucket, **token)
        for item in page.get("Contents", []):
            out[item["Key"]] = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
        if not page.get("IsTruncated"):
            return out
        token = {"ContinuationToken": page["NextContinuationToken"]}


def add_account(cli: Cli, endpoint: str, bucket: str, name: str = "team", password: str | None = None) -> dict[str, Any]:
    if password is not None:
        cli.sudo(password)
    else:
        cli.sudo()
    return cli.ok(
        "cloud",
        "add",
        "s3",
        "--name",
        name,
        "--endpoint",
        endpoint,
        "--bucket",
        bucket,
        "--keys-stdin",
        input=f"{ACCESS}\n{SECRET}\n",
    )


_REQUEST = re.compile(rb"(GET|PUT|HEAD|POST|DELETE) (\S+) HTTP/1\.[01]\r\n")


@dataclass
class HoldingRelay:
    """A loopback TCP relay to ``target``: records every request line and, once armed, holds
    the first request whose path contains ``hold_on`` until :meth:`release`."""

    target_port: int
    port: int = 0
    requests: list[tuple[str, str]] = field(default_factory=list)
    hold_on: bytes | None = None
    held: threading.Event = field(default_factory=threading.Event)
    _release: asyncio.Event | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _server: asyncio.base_events.Server | None = None

    def start(self) -> HoldingRelay:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._release = asyncio.Event()

            async def serve() -> None:
                self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
                self.port = self._server.sockets[0].getsockname()[1]
                ready.set()

            loop.run_until_complete(serve())
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def release(self) -> None:
        assert self._loop is not None and self._release is not None
        self._loop.call_soon_threadsafe(self._release.set)

    def stop(self) -> None:
        if self._loop is None:
            return
        self.release()

        loop = self._loop

        async def close() -> None:
            if self._server is not None:
                self._server.close()
            # A connection still held (a test that never releases it) ends here, not with the loop.
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            loop.stop()

        loop.call_soon_threadsafe(lambda: loop.create_task(close()))
        if self._thread is not None:
            self._thread.join(10)
        self._loop = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return

        async def client_to_server() -> None:
            while data := await reader.read(65536):
                for method, path in _REQUEST.findall(data):
                    self.requests.append((method.decode(), path.decode()))
                    if self.hold_on is not None and self.hold_on in path and not self.held.is_set():
                        self.held.set()
                        assert self._release is not None
                        await self._release.wait()
                up_writer.write(data)
                await up_writer.drain()
            up_writer.close()

        async def server_to_client() -> None:
            while data := await up_reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.close()

        try:
            await asyncio.gather(client_to_server(), server_to_client())
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
            up_writer.close()


def moto_s3() -> Iterator[S3Server]:
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()
