"""Issue 20: an HTTP answer of ``memories mcp --http`` leaves in one write (one TCP segment)."""

from __future__ import annotations

import asyncio
import socket

from engine.mcp.http import _OneSegmentTransport


class Recording(asyncio.Transport):
    """A transport that records its writes (a collaborator for the wrapper under test)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def test_writes_of_one_step_are_sent_together_and_close_sends_them_first() -> None:
    """Head and body written in one step of the handler become one write; order is kept."""

    async def run() -> tuple[list[bytes], list[bytes], bool]:
        loop = asyncio.get_running_loop()
        inner = Recording()
        outer = _OneSegmentTransport(inner, loop)
        outer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\n")
        outer.write(memoryview(b"body"))
        assert inner.writes == []  # held until the end of this step
        await asyncio.sleep(0)
        first = list(inner.writes)
        outer.write(b"late")
        outer.close()  # what is held goes out before the close
        return first, inner.writes, inner.closed

    first, writes, closed = asyncio.run(run())
    assert first == [b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nbody"]
    assert writes == [first[0], b"late"] and closed


def test_the_real_transport_answers_everything_else() -> None:
    """Reads, addresses and flow control are the real transport's."""

    async def run() -> tuple[object, bytes]:
        loop = asyncio.get_running_loop()
        left, right = socket.socketpair()
        transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, left)
        outer = _OneSegmentTransport(transport, loop)
        outer.write(b"a")
        outer.write(b"b")
        await asyncio.sleep(0.05)
        right.setblocking(False)
        received = right.recv(10)
        outer.close()
        right.close()
        return outer.get_extra_info("socket"), received

    sock, received = asyncio.run(run())
    assert sock is not None and received == b"ab"
