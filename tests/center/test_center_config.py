"""`[[centers]]` in config.toml (CT-1, saas): typed refusals, and a bad section fails closed."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.config import CenterConfig, Paths, load_config, parse_centers
from engine.errors import MemoriesError

KEY = base64.b64encode(bytes(range(32))).decode()


def entry(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"url": "https://center.example:8443", "key": KEY, "mode": "tickets"}
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def refused(*entries: dict[str, Any]) -> str:
    with pytest.raises(MemoriesError) as info:
        parse_centers({"centers": list(entries)})
    assert info.value.code == "invalid_config"
    return info.value.message


def test_good_entries_parse() -> None:
    (c,) = parse_centers({"centers": [entry(url="https://center.example:8443/")]})
    assert c == CenterConfig(url="https://center.example:8443", key=bytes(range(32)), mode="tickets")
    urlsafe = base64.urlsafe_b64encode(bytes(range(32))).decode().rstrip("=")
    saas, loop = parse_centers(
        {
            "centers": [
                entry(mode="saas", token_env="MEMORIES_CENTER_TOKEN", ca="/etc/ca.pem", key=urlsafe),
                entry(url="http://127.0.0.1:9000"),
            ]
        }
    )
    assert (saas.mode, saas.token_env, saas.ca, saas.key) == ("saas", "MEMORIES_CENTER_TOKEN", "/etc/ca.pem", bytes(range(32)))
    assert loop.url == "http://127.0.0.1:9000"
    assert parse_centers({}) == ()


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"url": "http://center.example:8443"}, "https"),
        ({"url": "ftp://center.example"}, "https"),
        ({"url": "https://user:pw@center.example"}, "no path, query or user"),
        ({"url": "https://center.example/api"}, "no path"),
        ({"url": "https://center.example:99999"}, "not a valid URL"),
        ({"url": 5}, "https URL"),
        ({"key": "short"}, "Ed25519 public key"),
        ({"key": base64.b64encode(bytes(31)).decode()}, "Ed25519 public key"),
        ({"key": base64.b64encode(bytes(33)).decode()}, "Ed25519 public key"),
        ({"mode": "hosted"}, '"tickets" or "saas"'),
        ({"mode": "saas"}, "token_env"),
        ({"mode": "saas", "token_env": "BAD-NAME"}, "token_env"),
        ({"token_env": "X"}, "only for saas"),
        ({"ca": "relative.pem"}, "absolute path"),
        ({"mdoe": "tickets"}, "unknown key 'mdoe'"),
    ],
)
def test_bad_entries_are_refused_with_a_sentence(overrides: dict[str, Any], words: str) -> None:
    message = refused(entry(**overrides))
    assert words in message and message.startswith("[[centers]] entry 1")


def test_at_most_one_saas_and_no_duplicate_urls() -> None:
    saas = entry(mode="saas", token_env="T")
    assert "At most one" in refused(saas, {**saas, "url": "https://other.example"})
    assert "same URL" in refused(entry(), entry())
    with pytest.raises(MemoriesError):
        parse_centers({"centers": {"url": "x"}})


def test_a_bad_section_fails_closed(tmp_path: Path) -> None:
    """A typo must not read as "no Center": the error is kept and every gated op refuses."""
    paths = Paths(tmp_path)
    paths.config_file.write_text(
        f'[engine]\nidle_lock_minutes = 3\n[[centers]]\nurl = "http://10.0.0.1"\nkey = "{KEY}"\nmode = "tickets"\n'
    )
    config = load_config(paths)
    assert config.idle_lock_seconds == 180 and config.centers == ()
    with pytest.raises(MemoriesError) as info:
        config.require_centers()
    assert info.value.code == "invalid_config" and "https" in info.value.message


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(
        st.sampled_from(["url", "key", "mode", "ca", "token_env", "x"]),
        st.one_of(st.text(max_size=60), st.integers(), st.booleans()),
    )
)
def test_any_entry_parses_or_is_invalid_config(raw: dict[str, Any]) -> None:
    try:
        centers = parse_centers({"centers": [raw]})
    except MemoriesError as exc:
        assert exc.code == "invalid_config"
    else:
        assert len(centers) == 1 and len(centers[0].key) == 32
