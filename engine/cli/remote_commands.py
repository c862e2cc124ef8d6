"""credential, remote and proxy commands (SPEC §9). Secrets come from stdin or files, never argv."""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from typing import Any

from engine.cli.context import Context, UsageError
from engine.cli.password import read_password
from engine.errors import MemoriesError
from engine.terminal_text import one_line

TYPES = {
    "postgres": "postgres",
    "mysql": "mysql",
    "redis": "redis",
    "ssh": "ssh",
    "ftp": "ftp",
    "tcp": "tcp",
    "tls-ca": "tls_ca",
    "ssh-key": "ssh_key",
    "tls-cert": "tls_cert",
    "openpgp": "openpgp",
}


def _read_file(path: str, limit: int = 1024 * 1024) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read(limit + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {exc.__class__.__name__}") from None
    if len(text) > limit:
        raise UsageError(f"{path} is too large")
    return text


def _read_binary(path: str, limit: int) -> str:
    """A binary file as base64 for the request (the engine decodes and checks it)."""
    import base64

    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.__class__.__name__}") from None
    if len(data) > limit:
        raise UsageError(f"{path} is too large")
    return base64.b64encode(data).decode("ascii")


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    cred = sub.add_parser("credential", parents=[common], help="server logins and keys (SSH, TLS, OpenPGP)")
    csub = cred.add_subparsers(dest="credential_command", metavar="ACTION", parser_class=type(cred))

    p = csub.add_parser("new", parents=[common], help="store a server login or a key (SSH, TLS, OpenPGP) by name")
    p.add_argument("type", choices=sorted(TYPES), help="the kind of server or key")
    p.add_argument("--name", required=True, help="a unique name to refer to it by")
    p.add_argument("--host", help="the server's host name or address")
    p.add_argument("--port", type=int, help="the server's port (default: the protocol's)")
    p.add_argument("--user", help="the user to log in as")
    p.add_argument("--database", help="the database to connect to")
    p.add_argument("--tls", choices=["required", "disabled"], help="require TLS (default for most types) or not")
    p.add_argument("--tls-ca", help="a tls-ca credential whose PEM is added to the trust store")
    p.add_argument("--tls-cert", help="postgres/mysql/redis: a tls-cert credential presented as the TLS client certificate")
    p.add_argument("--allow-host", action="append", default=[], help="repeatable; default: --host")
    p.add_argument(
        "--allow-auth",
        action="append",
        default=[],
        choices=["md5", "cleartext"],
        help="weak upstream auth a proxy may accept (default: SCRAM only)",
    )
    p.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    p.add_argument("--identity-file", help="import an OpenSSH private key file")
    p.add_argument("--key", help="ssh: an ssh-key credential to log in with; tls-cert: reuse this tls-cert's key")
    p.add_argument("--certificate-file", help="ssh: an OpenSSH certificate for the key; tls-cert: the PEM certificate")
    p.add_argument("--host-key", help="pinned server host key (OpenSSH public key line)")
    p.add_argument("--known-hosts-file", help="known_hosts entries for the server")
    p.add_argument("--pem-file", help="tls-ca: the CA certificate (PEM)")
    p.add_argument("--key-file", help="tls-cert: the certificate's private key (PEM); openpgp: an armored OpenPGP key")
    p.add_argument(
        "--pkcs12-file",
        help="tls-cert: a PKCS#12 bundle (.p12, .pfx, or a PKCS12 Java/Android keystore) with the key and its certificate chain",
    )
    p.add_argument(
        "--key-passphrase-stdin",
        action="store_true",
        help="read the passphrase of an --identity-file, --key-file or --pkcs12-file from standard input (else prompted)",
    )
    p.set_defaults(func=cmd_new)

    p = csub.add_parser("generate", parents=[common], help="generate an SSH key or TLS certificate (needs sudo)")
    p.add_argument("kind", choices=["ssh", "tls"], help="an SSH key pair or a TLS certificate")
    p.add_argument("--name", required=True, help="a unique name to refer to it by")
    p.add_argument("--comment", default="", help="ssh: the public key's comment")
    p.add_argument("--cn", default="", help="tls: the certificate's common name")
    p.add_argument("--days", type=int, default=365, help="tls: days the certificate is valid (default 365)")
    p.add_argument("--san", action="append", default=[], help="tls: a subject alternative name (repeatable)")
    p.add_argument("--csr", action="store_true", help="also produce a certificate signing request")
    p.set_defaults(func=cmd_generate)

    p = csub.add_parser(
        "public", parents=[common], help="print the public key or certificate (ssh credentials: under sudo, key line + cert)"
    )
    p.add_argument("id", help="the credential's name or ID")
    p.set_defaults(func=cmd_public)

    p = csub.add_parser("list", parents=[common], help="list credentials (never their secrets)")
    p.add_argument("--type", help="only credentials of this type")
    p.add_argument(
        "--all",
        action="store_true",
        help="also the credentials behind protected cards, logins and protected secrets (listed under their items)",
    )
    p.set_defaults(func=cmd_list)

    p = csub.add_parser("show", parents=[common], help="show a credential's public fields")
    p.add_argument("id", help="the credential's name or ID")
    p.set_defaults(func=cmd_show)

    remote = sub.add_parser("remote", parents=[common], help="remote sessions with approval tickets")
    rsub = remote.add_subparsers(dest="remote_command", metavar="ACTION", parser_class=type(remote))
    p = rsub.add_parser("open", parents=[common], help="open a session; prints its ID")
    p.add_argument("credential", help="the credential's name or ID")
    p.add_argument("--host", help="another host from the credential's allowlist")
    p.set_defaults(func=cmd_open)
    p = rsub.add_parser("propose", parents=[common], help="propose an instruction; prints ticket and fingerprint")
    p.add_argument("session", help="the session's ID or a unique prefix of it")
    p.add_argument("instruction", help="a query, command or action in the session's language")
    p.add_argument("--data-file", help="ftp put / tcp: the bytes to send")
    p.set_defaults(func=cmd_propose)
    p = rsub.add_parser("approve", parents=[common], help="approve one ticket (needs sudo)")
    p.add_argument("ticket", help="the ticket's ID or a unique prefix of it")
    p.add_argument("--fingerprint", help="refuse unless the ticket has this fingerprint")
    p.set_defaults(func=cmd_approve)
    p = rsub.add_parser("reject", parents=[common], help="reject a ticket")
    p.add_argument("ticket", help="the ticket's ID or a unique prefix of it")
    p.set_defaults(func=cmd_reject)
    p = rsub.add_parser("exec", parents=[common], help="run an approved ticket")
    p.add_argument("ticket", help="the ticket's ID or a unique prefix of it")
    p.add_argument("--output", help="ftp get / tcp: write the received bytes to this new file")
    p.set_defaults(func=cmd_exec)
    p = rsub.add_parser("close", parents=[common], help="close a session")
    p.add_argument("session", help="the session's ID or a unique prefix of it")
    p.set_defaults(func=cmd_close)
    p = rsub.add_parser("list", parents=[common], help="open sessions, pending tickets and proxies")
    p.set_defaults(func=cmd_remote_list)

    proxy = sub.add_parser("proxy", parents=[common], help="local credential-injecting proxies")
    psub = proxy.add_subparsers(dest="proxy_command", metavar="ACTION", parser_class=type(proxy))
    p = psub.add_parser("start", parents=[common], help="start a loopback proxy; prints 127.0.0.1:PORT")
    p.add_argument("credential", help="the credential's name or ID")
    p.add_argument("--port", type=int, default=0, help="the loopback port (default: a free one)")
    p.add_argument("--host", help="another host from the credential's allowlist")
    p.add_argument("--forward", metavar="HOST:PORT", help="ssh: the destination reached through the server")
    p.set_defaults(func=cmd_proxy_start)
    p = psub.add_parser("stop", parents=[common], help="stop a proxy and wait for its connections")
    p.add_argument("id", help="the proxy's ID (from `memories proxy list`)")
    p.set_defaults(func=cmd_proxy_stop)
    p = psub.add_parser("list", parents=[common], help="running proxies")
    p.set_defaults(func=cmd_proxy_list)


def cmd_new(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "credential_new", "name": args.name, "type": TYPES[args.type]}
    for key in ("host", "port", "user", "database", "tls", "tls_ca", "tls_cert", "key", "host_key"):
        value = getattr(args, key)
        if value is not None:
            body[key] = value
    if args.allow_host:
        body["allow_hosts"] = args.allow_host
    if args.allow_auth:
        body["allow_auth"] = args.allow_auth
    if args.password_stdin and args.key_passphrase_stdin:
        raise UsageError("standard input carries one secret: give --password-stdin or --key-passphrase-stdin")
    if args.password_stdin:
        body["password"] = read_password(True)
    if args.key_passphrase_stdin:
        body["key_passphrase"] = read_password(True, flag="--key-passphrase-stdin")
    if args.identity_file and args.key_file:
        raise UsageError("give --identity-file or --key-file, not both")
    if args.identity_file or args.key_file:
        body["private_key"] = _read_file(args.identity_file or args.key_file, 64 * 1024)
    if args.certificate_file:
        body["certificate"] = _read_file(args.certificate_file, 64 * 1024)
    if args.known_hosts_file:
        body["known_hosts"] = _read_file(args.known_hosts_file, 64 * 1024)
    if args.pem_file:
        body["pem"] = _read_file(args.pem_file, 64 * 1024)
    if args.pkcs12_file:
        body["pkcs12"] = _read_binary(args.pkcs12_file, 256 * 1024)
    try:
        result = ctx.request(body)
    except MemoriesError as exc:
        # An encrypted key file: ask for its passphrase at the terminal, as ssh-add does.
        if exc.code != "key_encrypted" or "key_passphrase" in body or not sys.stdin.isatty():
            raise
        what = "PKCS#12 file" if args.pkcs12_file else "private key"
        body["key_passphrase"] = read_password(False, prompt=f"Passphrase of the {what}: ", flag="--key-passphrase-stdin")
        result = ctx.request(body)
    ctx.emit(result, f"{result['short_id']}  {result['type']}  {one_line(result['name'])}")
    return 0


def cmd_generate(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {
        "op": "credential_generate",
        "kind": args.kind,
        "name": args.name,
        "comment": args.comment,
        "cn": args.cn,
        "days": args.days,
        "san": args.san,
        "csr": args.csr,
    }
    result = ctx.request(body)
    ctx.emit(result, f"{result['short_id']}  {result['type']}  {one_line(result['name'])}  (private key stored, not shown)")
    return 0


def cmd_public(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "credential_public", "id": args.id})
    if result.get("type") == "ssh":
        # authorized_keys line first, then the OpenSSH certificate line when one is stored.
        parts = [result["public_key"], result.get("certificate", "")]
    else:
        parts = [result.get("public_key") or result.get("certificate", ""), result.get("csr", "")]
    ctx.emit(result, "\n".join(str(p).rstrip("\n") for p in parts if p))
    return 0


def cmd_list(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "credential_list"}
    if args.type:
        body["type"] = TYPES.get(args.type, args.type)
    if args.all:
        body["all"] = True
    result = ctx.request(body)
    lines = [
        f"{c['short_id']}  {c['type']:<9} {one_line(c['name'])}  {one_line(c['public'].get('host', ''))}" for c in result["items"]
    ]
    ctx.emit(result, "\n".join(lines) or "(no credentials)")
    return 0


def cmd_show(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "credential_show", "id": args.id})
    ctx.emit(result, json.dumps(result, indent=2, sort_keys=True))
    return 0


def cmd_open(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "remote_open", "credential": args.credential}
    if args.host:
        body["host"] = args.host
    result = ctx.request(body, timeout=60)
    ctx.emit(result, f"{result['session']}  {result['type']}  {one_line(result['target'])}@{one_line(result['host'])}")
    return 0


def _ticket_text(t: dict[str, Any]) -> str:
    instruction = one_line(t["instruction"])  # the engine's display text (engine/remote/tickets.py)
    return (
        f"ticket      {t['ticket']}  ({t['state']})\nsession     {t['session']}  #{t['seq']}  {one_line(t['target'])}\n"
        f"fingerprint {t['fingerprint']}\ninstruction {instruction}"
    )


def cmd_propose(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "remote_propose", "session": args.session, "instruction": args.instruction}
    if args.data_file:
        try:
            with open(args.data_file, "rb") as handle:
                body["data_b64"] = base64.b64encode(handle.read(1024 * 1024 + 1)).decode("ascii")
        except OSError as exc:
            raise UsageError(f"cannot read {args.data_file}: {exc.__class__.__name__}") from None
    result = ctx.request(body)
    ctx.emit(result, None if ctx.json_output else _ticket_text(result))
    return 0


def cmd_approve(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "remote_approve", "ticket": args.ticket}
    if args.fingerprint:
        body["fingerprint"] = args.fingerprint
    result = ctx.request(body)
    ctx.emit(result, None if ctx.json_output else _ticket_text(result))
    return 0


def cmd_reject(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "remote_reject", "ticket": args.ticket})
    ctx.emit(result, f"{result['ticket']}  {result['state']}")
    return 0


def _write_new(path: str, data: bytes) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise UsageError(f"cannot create {path}: {exc.__class__.__name__}") from None
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _cell(value: object) -> str:
    """One tab-separated cell: NULL empty, text escaped (tabs and line feeds too), other
    JSON values as JSON rather than Python reprs."""
    if value is None:
        return ""
    if isinstance(value, str):
        return one_line(value)
    return one_line(json.dumps(value, ensure_ascii=False, sort_keys=True))


def _result_text(result: dict[str, Any]) -> str:
    if "rows" in result:
        lines = ["\t".join(one_line(c) for c in result["columns"])] if result["columns"] else []
        lines += ["\t".join(_cell(c) for c in row) for row in result["rows"]]
        if result.get("status") and not result["rows"]:
            lines.append(one_line(result["status"]))
        if result.get("truncated"):
            lines.append(f"(truncated; {result['row_count']} rows)")
        return "\n".join(lines)
    if "reply" in result:
        return json.dumps(result["reply"], ensure_ascii=False)
    if "output" in result:
        return str(result["output"]).rstrip("\n") + ("\n(truncated)" if result.get("truncated") else "")
    return json.dumps(result, sort_keys=True)


def cmd_exec(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "remote_exec", "ticket": args.ticket}, timeout=120)
    inner = result["result"]
    if args.output and "data_b64" in inner:
        _write_new(args.output, base64.b64decode(inner["data_b64"]))
    ctx.emit(result, _result_text(inner))
    exit_status = inner.get("exit_status")
    return int(exit_status) if isinstance(exit_status, int) and 0 <= exit_status < 256 else 0


def cmd_close(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "remote_close", "session": args.session})
    ctx.emit(result, f"{result['session']}  closed")
    return 0


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def cmd_remote_list(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "remote_list"})
    lines = [f"session {s['session']}  {s['type']}  {one_line(s['target'])}@{one_line(s['host'])}" for s in result["sessions"]]
    for t in result["tickets"]:
        instruction = _short(one_line(t["instruction"]))
        lines.append(f"ticket  {t['ticket']}  {t['state']}  {t['fingerprint'][:16]}…  {instruction}")
    lines += [f"proxy   {p['proxy']}  {p['type']}  127.0.0.1:{p['port']}  {one_line(p['target'])}" for p in result["proxies"]]
    ctx.emit(result, "\n".join(lines) or "(nothing open)")
    return 0


def cmd_proxy_start(ctx: Context, args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"op": "proxy_start", "credential": args.credential, "port": args.port}
    if args.host:
        body["host"] = args.host
    if args.forward:
        host, sep, port = args.forward.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise UsageError("--forward takes HOST:PORT")
        body["forward_host"], body["forward_port"] = host.strip("[]"), int(port)
    result = ctx.request(body, timeout=60)
    ctx.emit(result, f"{result['address']}  (proxy {result['proxy']})")
    return 0


def cmd_proxy_stop(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "proxy_stop", "proxy": args.id}, timeout=60)
    ctx.emit(result, f"{result['proxy']}  stopped")
    return 0


def cmd_proxy_list(ctx: Context, args: argparse.Namespace) -> int:
    result = ctx.request({"op": "proxy_list"})
    lines = [
        f"{p['proxy']}  {p['type']}  127.0.0.1:{p['port']}  {one_line(p['target'])}  clients={p['clients']}"
        for p in result["proxies"]
    ]
    ctx.emit(result, "\n".join(lines) or "(no proxies)")
    return 0
