"""Secret comparisons stay constant-time (issue 27: "every hmac.compare_digest kept").

A comparison that leaks how many leading bytes matched lets a caller guess a bearer token, a
sync token or an OAuth state byte by byte, and replacing ``hmac.compare_digest(a, b)`` with
``a == b`` changes no behaviour any other test can see. Two lint rules over the source of
engine/ and desktop/ (read with ``ast``, nothing imported):

1. every function pinned below still calls ``compare_digest`` (hmac's or secrets') at least as
   often as it does today: a new one may be added freely; when a pinned function is renamed or
   moved, move its pin with it;
2. no ``==``/``!=`` anywhere has an operand named like a token, secret or MAC, except the listed
   password confirmations (both sides typed by the same person at the same prompt: no oracle).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# (file, function qualified by its class) -> compare_digest calls it makes.
PINNED: dict[tuple[str, str], int] = {
    ("engine/agents/grants.py", "authenticate"): 1,  # MCP grant token hash
    ("engine/crypto/envelope.py", "open_envelope"): 2,  # recipient and expected sender
    ("engine/mcp/http.py", "BearerGuard._token_ok"): 1,  # MCP HTTP bearer token
    ("engine/service/handlers/cloud.py", "cloud_login_complete"): 1,  # OAuth state
    ("engine/service/handlers/devices.py", "_join_records"): 1,  # the exchange key a join names
    ("engine/sync/relay.py", "Relay._authorized"): 1,  # relay token
    ("engine/sync/tokens.py", "find_token"): 1,  # sync token digest
    ("engine/vault/joining.py", "make_request"): 1,
    ("engine/vault/joining.py", "decode_request"): 1,
    ("engine/vault/joining.py", "parse_request"): 1,
    ("engine/vault/joining.py", "make_approval"): 1,
    ("engine/vault/joining.py", "open_approval"): 3,  # device key, request ID
    ("desktop/dashboard/security.py", "Guard.token_ok"): 1,  # dashboard session token
}

# Names that hold something secret when compared (whole identifier parts, so ``token_id`` or a
# ``tokens`` count are not secret, and ``format``/``machine`` do not match ``mac``).
SECRET_NAME = re.compile(
    r"(?:^|_)(?:token|secret|hmac|mac|password|passphrase)(?:$|_(?!id$|ids$|count$|kind$|name$))", re.IGNORECASE
)

# (file, the comparison as ast.unparse prints it): password confirmations at one prompt.
ALLOWED_EQUALITY: set[tuple[str, str]] = {
    ("engine/cli/password.py", "again != password"),  # "Repeat the password" at the terminal
    ("desktop/tray/unlock.py", "password != again"),  # the tray's two create fields
    ("desktop/tray/unlock.py", "self._warned != password"),  # the same weak password typed again
    ("engine/crypto/libsodium.py", "len(secret_key) != bindings.crypto_sign_SECRETKEYBYTES"),  # a length, not the key
}


def _sources() -> list[Path]:
    return sorted(p for top in ("engine", "desktop") for p in (ROOT / top).rglob("*.py"))


class _Calls(ast.NodeVisitor):
    def __init__(self) -> None:
        self.scope: list[str] = []
        self.counts: dict[str, int] = {}

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "compare_digest":
            if isinstance(func.value, ast.Name) and func.value.id in ("hmac", "secrets"):
                name = ".".join(self.scope)
                self.counts[name] = self.counts.get(name, 0) + 1
        self.generic_visit(node)


def _compare_digest_calls(relative: str) -> dict[str, int]:
    visitor = _Calls()
    visitor.visit(ast.parse((ROOT / relative).read_text(encoding="utf-8")))
    return visitor.counts


@pytest.mark.parametrize(("where", "count"), sorted(PINNED.items()), ids=lambda v: v if isinstance(v, int) else "::".join(v))
def test_each_pinned_secret_comparison_still_uses_compare_digest(where: tuple[str, str], count: int) -> None:
    path, function = where
    assert (ROOT / path).is_file(), f"{path} is gone: move its pin in this test with the function"
    found = _compare_digest_calls(path).get(function, 0)
    assert found >= count, (
        f"{path}:{function} calls compare_digest {found} time(s), {count} pinned: a secret comparison "
        "became == (a timing oracle); use hmac.compare_digest, or move the pin if the function moved"
    )


def _names(node: ast.expr) -> list[str]:
    out = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.append(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.append(sub.attr)
    return out


def _secret_equalities(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare) or not any(isinstance(op, (ast.Eq, ast.NotEq)) for op in node.ops):
            continue
        operands = [node.left, *node.comparators]
        if any(isinstance(o, ast.Constant) for o in operands):
            continue  # against a literal (None, "", a kind name): no secret on the other side
        if any(SECRET_NAME.search(name) for operand in operands for name in _names(operand)):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_secret_is_compared_with_equality() -> None:
    offenders = []
    for path in _sources():
        relative = str(path.relative_to(ROOT))
        for line, text in _secret_equalities(ast.parse(path.read_text(encoding="utf-8"))):
            if (relative, text) not in ALLOWED_EQUALITY:
                offenders.append(f"{relative}:{line}: {text}")
    assert not offenders, "secret compared with ==/!= (use hmac.compare_digest):\n" + "\n".join(offenders)


def test_the_lint_rules_see_what_they_look_for() -> None:
    """The rules themselves can fail: a token compared with == is found, and a pinned call that
    became == is no longer counted."""
    tree = ast.parse("def check(given, self):\n    return given == self._token or sync_secret != other\n")
    assert sorted(text for _, text in _secret_equalities(tree)) == ["given == self._token", "sync_secret != other"]
    assert _secret_equalities(ast.parse("if token_id == wanted or machine == other or token is None: pass")) == []
    visitor = _Calls()
    visitor.visit(ast.parse("class G:\n    def ok(self, a):\n        return hmac.compare_digest(a, self.t) and a == b\n"))
    assert visitor.counts == {"G.ok": 1}
