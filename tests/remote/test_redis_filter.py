"""PX-3/PX-2: the Redis proxy's request filter and the PostgreSQL session's row parsers, in process and fuzzed.

The central property: whatever bytes a local client sends, the stream that reaches the
server never contains an identity-changing command other than the credential's own AUTH
(checked with a parser that reads requests the way Redis does).
"""

from __future__ import annotations

import asyncio
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import MemoriesError
from engine.remote.proxy.redis import REFUSED, RequestFilter, _QuitReplyDropper, resp_array, split_inline, strip_hello_auth
from engine.remote.sessions.postgres import decode_cell, parse_data_row, parse_row_description

CREDENTIAL_AUTH = [b"AUTH", b"reader", b"reader-pw"]


def rewrite(args: list[bytes]) -> list[bytes]:
    """The proxy's policy (RedisProxy.rewrite) with a fixed credential."""
    name = args[0].upper()
    if name == b"AUTH":
        return list(CREDENTIAL_AUTH)
    if name == b"HELLO":
        return strip_hello_auth(args)
    return [REFUSED, b"RESET refused"]


def feed_all(chunks: list[bytes]) -> tuple[bytes, RequestFilter]:
    f = RequestFilter(rewrite)
    return b"".join(f.feed(c) for c in chunks), f


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for p in points:
        pieces.append(data[last:p])
        last = p
    pieces.append(data[last:])
    return pieces


_LL = re.compile(rb"0|-?[1-9][0-9]*")


def redis_requests(stream: bytes) -> list[list[bytes]]:
    """Complete multibulk requests as Redis's processMultibulkBuffer reads them; stops where Redis
    would answer a protocol error (and close) or wait for more bytes. The filter only ever emits multibulk."""
    commands: list[list[bytes]] = []
    pos = 0
    while pos < len(stream):
        if stream[pos : pos + 1] != b"*":
            break  # Redis would read an inline request; the filter never forwards one
        cr = stream.find(b"\r", pos)
        if cr < 0 or not _LL.fullmatch(stream[pos + 1 : cr]):
            break
        count, pos = int(stream[pos + 1 : cr]), cr + 2
        args: list[bytes] = []
        for _ in range(max(count, 0)):
            if stream[pos : pos + 1] != b"$":
                return commands
            cr = stream.find(b"\r", pos)
            if cr < 0 or not _LL.fullmatch(stream[pos + 1 : cr]) or int(stream[pos + 1 : cr]) < 0:
                return commands
            size, pos = int(stream[pos + 1 : cr]), cr + 2
            if pos + size + 2 > len(stream):
                return commands
            args.append(stream[pos : pos + size])
            pos += size + 2
        if args:
            commands.append(args)
    return commands


def assert_identity_kept(forwarded: bytes) -> None:
    for args in redis_requests(forwarded):
        name = args[0].upper()
        if name == b"AUTH":
            assert args == CREDENTIAL_AUTH, args
        elif name == b"HELLO":
            assert _hello_has_no_auth_clause(args), args
        assert name != b"RESET", args


def _hello_has_no_auth_clause(args: list[bytes]) -> bool:
    """Redis's helloCommand option loop; stricter: any well-formed AUTH clause counts, even if a later
    option would make Redis reject the whole command."""
    j = 2
    while j < len(args):
        option, more = args[j].upper(), len(args) - j - 1
        if option == b"AUTH" and more >= 2:
            return False
        if option == b"SETNAME" and more >= 1:
            j += 2
            continue
        return True  # a syntax error: Redis authenticates nobody
    return True


# -- examples ------------------------------------------------------------------------------------------
def test_ordinary_commands_pass_byte_for_byte() -> None:
    stream = resp_array([b"SET", b"k", b"v" * 70000]) + resp_array([b"GET", b"k"]) + b"*0\r\n" + resp_array([b"x" * 40, b"y"])
    for size in (1, 3, 5000, len(stream)):
        assert feed_all([stream[i : i + size] for i in range(0, len(stream), size)])[0] == stream


def test_filtered_commands_are_replaced_in_place() -> None:
    stream = (
        resp_array([b"PING"])
        + resp_array([b"auth", b"other", b"pw"])
        + resp_array([b"HELLO", b"3", b"AUTH", b"u", b"p", b"SETNAME", b"n"])
        + resp_array([b"ReSeT"])
        + b'AUTH "x y"\r\n'
        + b"\r\n"
        + b"ping\n"
    )
    out, f = feed_all([stream])
    assert f.error is None
    assert out == (
        resp_array([b"PING"])
        + resp_array(CREDENTIAL_AUTH)
        + resp_array([b"HELLO", b"3", b"SETNAME", b"n"])
        + resp_array([REFUSED, b"RESET refused"])
        + resp_array(CREDENTIAL_AUTH)
        + resp_array([b"ping"])
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([b"HELLO"], [b"HELLO"]),
        ([b"HELLO", b"3"], [b"HELLO", b"3"]),
        ([b"HELLO", b"2", b"auth", b"a", b"b"], [b"HELLO", b"2"]),
        ([b"HELLO", b"3", b"SETNAME", b"AUTH", b"AUTH", b"u", b"p"], [b"HELLO", b"3", b"SETNAME", b"AUTH"]),
        ([b"HELLO", b"3", b"AUTH", b"u"], [REFUSED, b"HELLO with an option this proxy cannot check"]),
        ([b"HELLO", b"3", b"BOGUS"], [REFUSED, b"HELLO with an option this proxy cannot check"]),
    ],
)
def test_hello_loses_only_its_auth_clause(args: list[bytes], expected: list[bytes]) -> None:
    assert strip_hello_auth(args) == expected


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b"set a b", [b"set", b"a", b"b"]),
        (b'  "AUTH"  x\t"y z"  ', [b"AUTH", b"x", b"y z"]),
        (b'"\\x41\\n\\q"', [b"A\nq"]),
        (b"'it\\'s' ''", [b"it's", b""]),
        (b'a"b c"', [b"ab c"]),
        (b"", []),
    ],
)
def test_inline_split_matches_redis(line: bytes, expected: list[bytes]) -> None:
    assert split_inline(line) == expected


@pytest.mark.parametrize(
    "bad",
    [
        b"*1\r\n$04\r\nPING\r\n",  # leading zero
        b"*+1\r\n",  # sign
        b"*1\r\n:4\r\nPING\r\n",  # not '$'
        b"*1\r\n$4\r\nPINGxx",  # no CRLF after a held bulk
        b"*1\rX$4\r\n",  # CR without LF
        b'"unbalanced\r\n',
        b'"closing quote glued"to-a-word\r\n',
        b"a\x00b\r\n",
        b"x" * 70000,  # an inline request without end
        b"*2\r\n$4\r\nAUTH\r\n$70000\r\n",  # a filtered command too large to hold
    ],
)
def test_malformed_requests_end_the_stream(bad: bytes) -> None:
    out, f = feed_all([resp_array([b"PING"]) + bad])
    assert f.error is not None and "Protocol error" in f.error
    assert out.startswith(resp_array([b"PING"]))
    assert out.endswith(resp_array([b"QUIT"])) and REFUSED in out
    assert f.feed(resp_array([b"AUTH", b"x", b"y"])) == b""  # nothing after the error
    assert_identity_kept(out)


# -- properties ------------------------------------------------------------------------------------------
_names = st.sampled_from([b"AUTH", b"auth", b"HELLO", b"hello", b"RESET", b"GET", b"SET", b"PING", b"ACL", b"MULTI"])
_arg = st.one_of(st.sampled_from([b"AUTH", b"SETNAME", b"3", b"2", b"u", b"p"]), st.binary(max_size=40))
_command = st.tuples(_names, st.lists(_arg, max_size=6)).map(lambda t: [t[0], *t[1]])
_word = st.from_regex(rb"[A-Za-z0-9]{1,8}", fullmatch=True)
_inline = st.tuples(_names, st.lists(_word, max_size=5)).map(lambda t: [t[0], *t[1]])


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.one_of(_command.map(lambda a: ("bulk", a)), _inline.map(lambda a: ("inline", a))), max_size=12),
    st.lists(st.integers(0, 10**6), max_size=8),
)
def test_any_split_gives_the_same_rewritten_stream(commands: list[tuple[str, list[bytes]]], cuts: list[int]) -> None:
    """PX-3: however the bytes are split into reads, the forwarded stream is the commands with exactly
    the filtered ones rewritten (ordinary multibulk byte for byte, inline re-encoded)."""
    stream = b"".join(resp_array(a) if kind == "bulk" else b" ".join(a) + b"\r\n" for kind, a in commands)
    expected = b"".join(
        resp_array(rewrite(a)) if a[0].upper() in {b"AUTH", b"HELLO", b"RESET"} else resp_array(a) for _, a in commands
    )
    out, f = feed_all(split(stream, cuts))
    assert f.error is None
    assert out == expected
    assert_identity_kept(out)


# Request-grammar fragments, so random streams often come close to (in)valid requests.
_PIECES = [b"*", b"$", b"\r", b"\n", b"\r\n", b"0", b"1", b"2", b"3", b"4", b"5", b"-", b" ", b'"', b"'", b"\\", b"x", b"\x00"]
_fragment = st.lists(st.sampled_from([*_PIECES, b"AUTH", b"auth", b"HELLO", b"RESET", b"SETNAME"]), max_size=40).map(b"".join)


@settings(max_examples=600, deadline=None)
@given(
    st.lists(st.one_of(st.binary(max_size=60), _fragment, _command.map(resp_array)), max_size=8),
    st.lists(st.integers(0, 10**6), max_size=6),
)
def test_arbitrary_bytes_never_smuggle_an_identity_change(parts: list[bytes], cuts: list[int]) -> None:
    """PX-3: for any client bytes the server sees no AUTH but the credential's, no HELLO … AUTH and no
    RESET; the filter never raises, and how the bytes are split into reads changes nothing."""
    stream = b"".join(parts)
    out, _ = feed_all(split(stream, cuts))
    assert_identity_kept(out)
    assert out == feed_all([stream])[0]


# -- PostgreSQL session rows (RM-5 results) ----------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_pg_row_parsers_never_crash(data: bytes) -> None:
    """Every parser of server bytes raises only protocol_error on garbage."""
    for parse in (parse_row_description, parse_data_row):
        try:
            parse(data)
        except MemoriesError as exc:
            assert exc.code == "protocol_error"


def test_pg_cells_decode_by_type() -> None:
    assert decode_cell(None, 23) is None
    assert decode_cell(b"42", 23) == 42 and decode_cell(b"-7", 20) == -7
    assert decode_cell(b"t", 16) is True and decode_cell(b"f", 16) is False
    assert decode_cell(b"\\x00ff", 17) == "00ff"
    assert decode_cell(b"1.50", 1700) == "1.50" and decode_cell(b"caf\xc3\xa9", 25) == "café"
    row = b"\x00\x03" + b"\x00\x00\x00\x02hi" + b"\xff\xff\xff\xff" + b"\x00\x00\x00\x00"
    assert parse_data_row(row) == [b"hi", None, b""]


class _Collect(asyncio.Protocol):
    def __init__(self) -> None:
        self.data = b""

    def data_received(self, data: bytes) -> None:
        self.data += data


@given(
    st.lists(st.sampled_from([b"+OK\r\n", b"+PONG\r\n", b"$2\r\nOK\r\n", b":1\r\n"]), max_size=6),
    st.lists(st.integers(min_value=1, max_value=8), max_size=12),
    st.booleans(),
)
def test_quit_reply_is_dropped_however_the_replies_are_split(earlier: list[bytes], cuts: list[int], failed: bool) -> None:
    """PX-2: after a protocol error, the server's last +OK (the proxy's own QUIT) never reaches the client and
    every earlier reply does, whatever the chunking; without an error every byte passes unchanged."""
    request_filter = RequestFilter(lambda args: args)
    if failed:
        request_filter.feed(b'"unbalanced\r\n')
        assert request_filter.error is not None
    error = b"-ERR unknown command 'MEMORIES-PROXY-REFUSED'\r\n"
    stream = b"".join(earlier) + (error + b"+OK\r\n" if failed else b"")
    sink = _Collect()
    dropper = _QuitReplyDropper(sink, request_filter)
    pos = 0
    for cut in cuts:
        dropper.data_received(stream[pos : pos + cut])
        pos += cut
    dropper.data_received(stream[pos:])
    assert sink.data == (stream[: -len(b"+OK\r\n")] if failed else stream)
