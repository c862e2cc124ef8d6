"""Jieba's dictionary cache is private (issue 12): never read from the shared temporary
directory, never loaded unless it is our own file in our own 0700 directory, rebuilt when
it is corrupt."""

from __future__ import annotations

import hashlib
import marshal
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jieba
import pytest

from engine.search.dictcache import CACHE_NAME, load_dictionary, write_cache
from tests.helpers import Cli, require

SENTENCE = "我们的记忆库来自于长期积累"
WORDS = ["我们", "的", "记忆", "库", "来自", "于", "长期", "积累"]
# A well-formed dictionary that would change segmentation: every character becomes a token.
TINY: tuple[dict[str, int], int] = ({"x": 1}, 1)


def _fresh() -> jieba.Tokenizer:
    return jieba.Tokenizer()


def _private(tmp_path: Path) -> Path:
    directory = tmp_path / "cache"
    directory.mkdir(parents=True)
    os.chmod(directory, 0o700)
    return directory


def _as_nobody(command: list[str], data: bytes | None = None) -> None:
    subprocess.run(["runuser", "-u", "nobody", "--", *command], input=data, check=True, capture_output=True, timeout=30)


def _need_root() -> None:
    require(os.geteuid() == 0 and shutil.which("runuser") is not None, "root and runuser, to act as another user (nobody)")


def test_planted_cache_is_effective_when_trusted(tmp_path: Path) -> None:
    """Control for the tests below: a well-formed cache of ours is what the tokenizer loads."""
    directory = _private(tmp_path)
    assert write_cache(directory, *TINY)
    tok = _fresh()
    assert load_dictionary(tok, directory).source == "cache"
    assert tok.lcut(SENTENCE, HMM=False) == list(SENTENCE)


def test_group_or_other_writable_cache_is_not_loaded(tmp_path: Path) -> None:
    """Issue 12: a cache file others could have written is ignored and replaced by a rebuilt one."""
    directory = _private(tmp_path)
    for mode in (0o620, 0o602):
        assert write_cache(directory, *TINY)
        path = directory / CACHE_NAME
        os.chmod(path, mode)
        tok = _fresh()
        loaded = load_dictionary(tok, directory)
        assert (loaded.source, loaded.reason, loaded.saved) == ("built", "untrusted_file", True)
        assert tok.lcut(SENTENCE) == WORDS
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        again = _fresh()
        assert load_dictionary(again, directory).source == "cache"  # the rebuilt cache is used next time
        assert again.lcut(SENTENCE) == WORDS


def test_loose_cache_directory_is_tightened_and_its_cache_discarded(tmp_path: Path) -> None:
    """Issue 12: a cache directory of ours that others could write is made 0700 and its content not trusted."""
    directory = _private(tmp_path)
    assert write_cache(directory, *TINY)
    os.chmod(directory, 0o770)
    tok = _fresh()
    loaded = load_dictionary(tok, directory)
    assert (loaded.source, loaded.reason) == ("built", "untrusted_dir")
    assert tok.lcut(SENTENCE) == WORDS
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700


def test_symlinked_cache_is_not_followed(tmp_path: Path) -> None:
    """Issue 12: the cache file is opened without following a symlink planted in its place."""
    directory = _private(tmp_path)
    elsewhere = _private(tmp_path / "elsewhere")
    assert write_cache(elsewhere, *TINY)
    (directory / CACHE_NAME).symlink_to(elsewhere / CACHE_NAME)
    tok = _fresh()
    loaded = load_dictionary(tok, directory)
    assert (loaded.source, loaded.reason) == ("built", "untrusted_file")
    assert tok.lcut(SENTENCE) == WORDS
    assert not (directory / CACHE_NAME).is_symlink()


def _random(_: bytes) -> bytes:
    return os.urandom(4096)


def _truncated(good: bytes) -> bytes:
    return good[: len(good) // 2]


def _bad_digest(good: bytes) -> bytes:
    return good[:-1] + bytes([good[-1] ^ 1])


def _raw_marshal(_: bytes) -> bytes:
    return marshal.dumps(TINY)  # Jieba's own format, without our header and digest


def _unsigned(good: bytes) -> bytes:
    """Our header and a well-formed payload, but not the digest of it."""
    header = good[: good.index(b"\n") + 1]
    return header + bytes(32) + marshal.dumps(TINY)


def _signed(value: Any) -> Callable[[bytes], bytes]:
    """Our header and a correct digest around a payload of the wrong shape."""

    def build(good: bytes) -> bytes:
        payload = marshal.dumps(value)
        return good[: good.index(b"\n") + 1] + hashlib.sha256(payload).digest() + payload

    return build


@pytest.mark.parametrize(
    "corrupt",
    [
        _random,
        _truncated,
        _bad_digest,
        _raw_marshal,
        _unsigned,
        _signed([1, 2, 3]),
        _signed(({}, 0)),
        _signed(({"x": 1}, "1")),
        _signed(("x", 1)),
    ],
    ids=["random", "truncated", "bad_digest", "raw_marshal", "unsigned", "list", "empty", "str_total", "str_freq"],
)
def test_corrupt_cache_is_rebuilt(tmp_path: Path, corrupt: Callable[[bytes], bytes]) -> None:
    """Issue 12: an unreadable cache (garbage, truncated, wrong digest or shape) is rebuilt, not a crash."""
    directory = _private(tmp_path)
    assert write_cache(directory, *TINY)
    path = directory / CACHE_NAME
    path.write_bytes(corrupt(path.read_bytes()))
    tok = _fresh()
    loaded = load_dictionary(tok, directory)
    assert (loaded.source, loaded.reason, loaded.saved) == ("built", "corrupt", True)
    assert tok.lcut(SENTENCE) == WORDS
    again = _fresh()
    assert load_dictionary(again, directory).source == "cache"
    assert again.lcut(SENTENCE) == WORDS


def test_cache_owned_by_another_user_is_not_loaded(tmp_path: Path) -> None:
    """Issue 12: a cache file owned by another UID is ignored even with safe permissions."""
    _need_root()
    directory = _private(tmp_path)
    assert write_cache(directory, *TINY)
    path = directory / CACHE_NAME
    os.chown(path, 65534, 65534)  # nobody
    tok = _fresh()
    loaded = load_dictionary(tok, directory)
    assert (loaded.source, loaded.reason) == ("built", "untrusted_file")
    assert tok.lcut(SENTENCE) == WORDS
    assert path.stat().st_uid == os.geteuid()


def test_cache_directory_of_another_user_is_not_used(tmp_path: Path) -> None:
    """Issue 12: a cache directory that is not ours is neither read nor written."""
    _need_root()
    directory = _private(tmp_path)
    assert write_cache(directory, *TINY)
    os.chown(directory, 65534, 65534)
    os.chown(directory / CACHE_NAME, 65534, 65534)
    before = (directory / CACHE_NAME).read_bytes()
    tok = _fresh()
    loaded = load_dictionary(tok, directory)
    assert (loaded.source, loaded.reason, loaded.saved) == ("built", "untrusted_dir", False)
    assert tok.lcut(SENTENCE) == WORDS
    assert (directory / CACHE_NAME).read_bytes() == before
    assert sorted(p.name for p in directory.iterdir()) == [CACHE_NAME]


def test_hostile_jieba_cache_in_tmpdir_is_never_read(tmp_path: Path) -> None:
    """Issue 12: another user plants $TMPDIR/jieba.cache (where Jieba itself caches); the engine
    ignores it: Chinese writes and searches work, and its own cache is private."""
    _need_root()
    shared = Path(tempfile.mkdtemp(prefix="memories-shared-tmp-", dir="/tmp"))  # tmp_path is not reachable by nobody
    try:
        os.chmod(shared, 0o1777)  # like /tmp
        # Well-formed for Jieba's own loader, fatal to it: an empty dictionary with total 0.
        hostile = marshal.dumps(({}, 0))
        planted = shared / "jieba.cache"
        _as_nobody(["sh", "-c", 'cat > "$1"', "sh", str(planted)], hostile)
        assert planted.stat().st_uid == 65534
        xdg = tmp_path / "xdg"
        cli = Cli(home=tmp_path / "home", env={"TMPDIR": str(shared), "XDG_CACHE_HOME": str(xdg)})
        try:
            cli.init()
            cli.put("记忆库", "我们的记忆库来自于长期积累。")
            cli.put("天气", "今天的天气很好。")
            result = cli.ok("search", "长期积累", "--wait", "60")
            assert [r["title"] for r in result["results"]] == ["记忆库"]
            assert result["partial"] is False
        finally:
            cli.stop()
        assert planted.read_bytes() == hostile and planted.stat().st_uid == 65534
        assert sorted(p.name for p in shared.iterdir()) == ["jieba.cache"]  # nothing written to TMPDIR
        own = xdg / "memories"
        assert stat.S_IMODE(own.stat().st_mode) == 0o700 and own.stat().st_uid == os.geteuid()
        cache = own / CACHE_NAME
        assert stat.S_IMODE(cache.stat().st_mode) == 0o600 and cache.stat().st_uid == os.geteuid()
    finally:
        shutil.rmtree(shared, ignore_errors=True)
