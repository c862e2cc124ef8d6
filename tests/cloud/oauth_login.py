"""`memories cloud login` driven end to end for the OneDrive and Drive tests (CL-1).

The CLI runs as a real process with a real loopback listener; the "browser" is this module:
it fetches the authorize URL the CLI prints from the fake provider, which answers with a
redirect to the CLI's loopback listener, and follows it (or, for the refusal tests, changes
the state first).
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from tests.cloud.fake_oauth import CLIENT_ID
from tests.helpers import Cli

__all__ = ["login", "start_login", "authorize_redirect", "finish"]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def start_login(cli: Cli, kind: str, name: str) -> tuple[subprocess.Popen[str], str]:
    """Start `cloud login` and return the process and the authorize URL it printed."""
    proc = subprocess.Popen(
        cli.command("cloud", "login", kind, "--name", name, "--client-id", CLIENT_ID, "--no-browser", "--wait", "60", "--json"),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=cli.environ(),
    )
    assert proc.stderr is not None
    for _ in range(20):
        line = proc.stderr.readline()
        if line.startswith("http"):
            return proc, line.strip()
        if not line:
            break
    proc.kill()
    out, err = proc.communicate()
    raise AssertionError(f"no authorize URL: {out} {err}")


def authorize_redirect(url: str) -> str:
    """What the provider redirects the browser to (not followed)."""
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        opener.open(url, timeout=10)
    except urllib.error.HTTPError as exc:
        assert exc.code == 302, exc.code
        return str(exc.headers["Location"])
    raise AssertionError("the provider did not redirect")


def finish(proc: subprocess.Popen[str], redirect: str) -> tuple[int, dict[str, Any]]:
    with urllib.request.urlopen(redirect, timeout=10) as answer:  # the browser lands on the CLI's listener
        assert answer.status == 200
    out, err = proc.communicate(timeout=60)
    return proc.returncode, json.loads(out) if out.strip() else {"stderr": err}


def login(cli: Cli, kind: str, name: str, password: str | None = None) -> dict[str, Any]:
    if password is None:
        cli.sudo()
    else:
        cli.sudo(password)
    proc, url = start_login(cli, kind, name)
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
    assert query["code_challenge_method"] == "S256" and len(query["code_challenge"]) == 43 and "code_verifier" not in url
    code, result = finish(proc, authorize_redirect(url))
    assert code == 0, result
    result.pop("v", None)
    return result
