"""Typed errors shared by every surface (SPEC API-8).

Each error has a stable machine ``code`` and one human sentence. The same code
travels over IPC, the CLI (``--json`` and text), HTTP and MCP. Messages never
contain secrets: callers pass only non-secret context.

This module is imported by the lean CLI client, so it must stay stdlib-only.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` stays off the CLI's start path (issue 20)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["MemoriesError", "CODES", "error_from_wire"]

# code -> default sentence. The code is the contract; the sentence may improve.
CODES: dict[str, str] = {
    "already_initialized": "A vault already exists in this data directory; it was not touched.",
    "not_initialized": "No vault exists here yet; run `memories init` (or `memories device join` if this device asked to join).",
    "locked": "The vault is locked; run `memories unlock`.",
    "wrong_password": "The password is wrong; nothing was changed.",
    "rate_limited": "Too many password attempts; wait a minute and try again.",
    "elevation_required": "This needs elevation; run `memories sudo` first.",
    "reprompt_required": "This item asks for the vault password before every read; run `memories sudo` again first.",
    "invalid_request": "The request is malformed.",
    "unknown_op": "The request names an operation this engine does not know.",
    "unknown_field": "The request has a field this operation does not accept.",
    "invalid_json": "The frame is not valid JSON.",
    "frame_too_large": "The frame exceeds the size limit.",
    "unsupported_wire_version": "The wire version is not supported by this engine.",
    "busy": "The engine has too many open connections; try again.",
    "not_found": "No memory, card, credential or file matches that ID.",
    "ambiguous_id": "That ID prefix matches more than one item; type more characters.",
    "conflict": "This item has conflicting versions; resolve with `memories edit ID --resolve`.",
    "stale_base": "The base revision is not a current head of this item.",
    "store_in_use": "Another engine already holds this data directory.",
    "store_corrupt": "The store failed verification; it was not modified.",
    "store_version": "The store holds records written by a newer Memories; update Memories to open it. Nothing was changed.",
    "daemon_unavailable": "The engine is not running and could not be reached.",
    "timeout": "The engine did not answer in time.",
    "backup_invalid": "The backup file is damaged, truncated or not a Memories backup; nothing was written.",
    "backup_version": "The backup file has a format version this Memories cannot read; nothing was written.",
    "invalid_input": "The input is invalid.",
    "permission_denied": "The caller is not allowed to do this.",
    "io_error": "A file could not be read or written.",
    "internal": "The engine hit an unexpected error; nothing was changed.",
    "disk_full": "The disk is full; nothing was changed. Free some space and try again.",
    "file_changed": "The file changed while it was read; nothing was saved. Add it again once nothing writes to it.",
    "committed_with_errors": "The change was saved, but a follow-up step failed; do not repeat it.",
    "index_update_failed": "The change was saved, but updating an in-memory index failed; it is rebuilt at the next unlock.",
    # -- remote sessions, tickets and proxies (SPEC §9) --
    "host_not_allowed": "That host is not on the credential's allowlist; nothing was opened.",
    "remote_unreachable": "The remote server could not be reached.",
    "remote_auth_failed": "The remote server rejected the credential.",
    "remote_tls_failed": "The remote server's TLS certificate or hostname did not verify.",
    "key_encrypted": "The private key is passphrase-protected; give its passphrase (prompted, or --key-passphrase-stdin).",
    "wrong_key_passphrase": "The passphrase does not open that private key; nothing was stored.",
    "host_key_unknown": "The SSH server's host key is not the one pinned in the credential.",
    "remote_error": "The remote server reported an error for this instruction.",
    "protocol_error": "The remote server broke the protocol; the connection was closed.",
    "ticket_not_approved": "The ticket has not been approved; run `memories remote approve`.",
    "ticket_used": "The ticket was already approved or executed; propose the instruction again.",
    "session_closed": "The remote session is closed or was dropped by lock or idle expiry.",
    "proxy_limit": "Too many proxies are running; stop one first.",
    # desktop dashboard (DT-5)
    "dashboard_unauthorized": "The dashboard token is missing or wrong; open the dashboard from the tray or its printed URL.",
    "dashboard_forbidden": "The request came from another site or host name; it was refused and nothing changed.",
    # MCP grants (AG-2)
    "unauthorized": "The MCP token is missing, wrong or revoked.",
    "scope_denied": "The MCP grant's scope does not allow this operation.",
    "grant_exists": "An active MCP grant with that name already exists; revoke it first.",
    # -- cards and secrets (SPEC §7) --
    "invalid_metadata": "The card metadata does not match its type's schema; nothing was changed.",
    "invalid_otpauth": "The otpauth URI or OTP secret is invalid; nothing was created.",
    "secret_map_mismatch": "A generic write cannot create, change or drop secret references.",
    "nothing_to_copy": "That reference holds no secret value to copy.",
    "clipboard_unavailable": "No clipboard is reachable (no display or no clipboard tool).",
    "http_error": "The HTTP server answered with an error status; its response body was suppressed.",
    # -- search, retrieval and answers (SPEC §6) --
    "provider_not_configured": "No model provider is configured for this; add it under [rag] in config.toml.",
    "provider_error": "The model provider answered with an error; nothing was delivered.",
    "provider_timeout": "The model provider did not answer in time; nothing was delivered.",
    "invalid_config": "config.toml has an invalid [rag] setting.",
    "sources_changed": "A source changed while the model was working; the answer was dropped. Ask again.",
    # -- vault policy history (SPEC §3 PO-1, PO-2) --
    "policy_invalid": "The vault policy is malformed, badly signed or breaks a policy rule; nothing was changed.",
    "policy_forbidden": "Your role in the vault does not allow this policy change; nothing was changed.",
    "policy_stale": "The policy change does not follow the current policy; nothing was changed.",
    "read_only": "Your role in this vault does not allow writing; nothing was changed.",
    # -- identity, envelopes and joining devices (SPEC §2) --
    "envelope_invalid": (
        "The envelope is damaged, not for this device or purpose, or not from the expected device; nothing was opened."
    ),
    "join_request_invalid": "The join request is damaged or not signed by the device it names; nothing was changed.",
    "join_request_expired": "The join request has expired; make a new one on the new device.",
    "join_request_used": "That join request was already approved; make a new one on the new device.",
    "join_wrong_approver": (
        "The join request pins another approving device; make it again with the key `memories whoami` shows here."
    ),
    "join_approval_invalid": (
        "The approval is damaged, not for this request or not from the pinned approving device; nothing was changed."
    ),
    "join_approval_expired": "The approval has expired; approve the request again on the approving device.",
    "join_no_request": "This data home has no pending join request; run `memories device request` here first.",
    "invite_invalid": "The invitation is damaged, not signed by the user it names or malformed; nothing was changed.",
    "invite_expired": "The invitation has expired; ask for a new one (`memories whoami --invite` on their device).",
    "invite_wrong_owner": (
        "The invitation pins another user's fingerprint; ask for a new one made with yours from `memories whoami`."
    ),
    "device_not_found": "No device of this vault has that name, fingerprint or ID; see `memories devices`.",
    "device_ambiguous": "More than one device matches; give more hex digits of the fingerprint.",
    "confirmation_required": "This needs a confirmation: run it in a terminal, or pass --yes after checking the fingerprint.",
    # -- sync domain: verification, quarantine, forks (SPEC SY-1, SY-2, SY-3) --
    "sync_invalid": "The sync data is malformed or exceeds a size bound; nothing was merged.",
    "sync_rejected": "The sync data failed verification; nothing was merged.",
    "policy_fork": "The peer holds another signed branch of this vault's policy; an Owner must resolve it. Nothing was merged.",
    # -- sync transport (SPEC SY-4, API-4, API-5) --
    "sync_unauthorized": "The sync token or the peer device is missing, wrong or revoked; nothing was exchanged.",
    "sync_unreachable": "The sync peer or relay could not be reached or closed the connection; nothing was merged.",
    "sync_timeout": "The sync peer did not answer in time; the connection was closed and nothing was merged.",
    # -- cloud object sync (SPEC CL-1 … CL-4) --
    "cloud_denied": "The storage refused this account's credentials, bucket or token; sign in or fix the keys.",
    "cloud_unreachable": "The storage could not be reached or kept failing; what was sent stays queued for the next sync.",
    "cloud_login_required": "The sign-in for this cloud account expired or was revoked; run `memories cloud login` again.",
    "cloud_login_refused": "The browser sign-in was refused, expired or did not match this login; nothing was stored.",
    # -- cloud delivery that cannot be silently blocked (SPEC CL-5) --
    "cloud_object_missing": (
        "An object a cloud bundle lists is not in the storage, or not its bytes; it is looked for again on every sync."
    ),
    "cloud_bundle_missing": (
        "A bundle is missing from the storage though a later one, or its sender, says it was sent; "
        "it is looked for again on every sync."
    ),
    # -- crypto jobs (SPEC JB-1 … JB-3) --
    "job_input_changed": "An input file changed since the plan was made (its SHA-256 differs); nothing was run or published.",
    "job_tool_changed": "A tool of the plan changed or moved since the plan was made; nothing was run. Make a new plan.",
    "job_tool_missing": "A tool this job needs is not installed on this machine.",
    "job_output_exists": "An output path of the plan already exists; a job never overwrites a file. Nothing was published.",
    "job_step_failed": "A step of the job failed; nothing was published and the workspace was removed.",
    "job_plan_stale": "A credential of the plan changed since the plan was made; nothing was run. Make a new plan.",
    "job_cancelled": "The job was cancelled (the vault locked or the engine stopped); nothing was published.",
    "unsupported_platform": "This is not supported on this platform.",
    # -- the Center: tickets, hosted mode, standby (SPEC CT-1 … CT-4; docs/center.md) --
    "ticket_invalid": "The Center ticket is damaged, not signed by the pinned Center or malformed; nothing was changed.",
    "ticket_expired": "The Center ticket has expired; ask the Center's operator for a new one.",
    "ticket_replayed": "That Center ticket was already applied on this device; ask the Center's operator for a new one.",
    "ticket_revoked": "The Center revoked this ticket's grant; nothing was changed.",
    "stale_generation": "This comes from an older credential generation of the Center (a standby took over); it was refused.",
    "center_managed": "This vault is managed by a Center; devices and grants come from its signed tickets.",
    "center_locked": "The Center's hosted store is locked; its operator must unlock it.",
    "center_behind": "The standby has not copied everything from the primary yet; nothing was changed.",
    "center_unavailable": "The Center could not be reached or is not serving; nothing was changed.",
    "too_large": "The request body exceeds the size limit; nothing was changed.",
}


class MemoriesError(Exception):
    """An error with a stable code and one clear, secret-free sentence."""

    def __init__(self, code: str, message: str | None = None, **details: Any) -> None:
        if code not in CODES:
            # An unknown code is itself a programming error; keep the contract closed.
            message = f"{message or ''} (unregistered code {code})".strip()
            code = "internal"
        self.code = code
        self.message = message or CODES[code]
        self.details = details
        super().__init__(self.message)

    def to_wire(self) -> dict[str, Any]:
        wire: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            wire["details"] = self.details
        return wire


def error_from_wire(obj: object) -> MemoriesError:
    """Rebuild an error received over IPC; malformed payloads become ``internal``."""
    if isinstance(obj, dict):
        code = obj.get("code")
        message = obj.get("message")
        details = obj.get("details")
        if isinstance(code, str) and isinstance(message, str):
            extra = details if isinstance(details, dict) else {}
            return MemoriesError(code if code in CODES else "internal", message, **extra)
    return MemoriesError("internal", "The engine sent a malformed error.")
