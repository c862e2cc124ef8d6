"""Re-prompt items (issue 33): a login that asks for the vault password before every read.

Bitwarden's "master password re-prompt" moves in as the credential's public flag
``reprompt``. Reading such a credential's secret (copy, a field, an OTP code, `run`) needs
a fresh `memories sudo`, and spends it: the next read asks again. Ordinary elevation
(`sudo` lasts minutes) still covers every other item. Scheduled jobs are not asked: their
plan was approved under elevation, and a job cannot type a password.
"""

from __future__ import annotations

from collections.abc import Iterable

from engine.errors import MemoriesError
from engine.service.caller import Caller
from engine.service.service import Service
from engine.vault.core import Unlocked

__all__ = ["guard_reprompt", "is_reprompt"]


def is_reprompt(service: Service, state: Unlocked, asset_id: bytes) -> bool:
    """The credential's current revision carries the re-prompt flag."""
    entry = state.index.assets.get(asset_id)
    if entry is None or not entry.heads:
        return False
    for head in entry.heads:
        rev = state.index.revisions[head]
        public = (service.vault.summary_of(state, rev).get("credential") or {}).get("public") or {}
        if public.get("reprompt") is True:
            return True  # any head with the flag: a conflict never drops the user's choice
    return False


def guard_reprompt(service: Service, state: Unlocked, caller: Caller, assets: Iterable[bytes]) -> None:
    """Refuse unless the caller's elevation is fresh when any of ``assets`` asks to be re-prompted."""
    if not any(is_reprompt(service, state, asset) for asset in assets):
        return
    if not service.session.take_fresh(caller.namespace):
        raise MemoriesError(
            "reprompt_required",
            "This item asks for the vault password before every read (re-prompt): run `memories sudo` "
            "again, then repeat the command within a minute.",
        )
