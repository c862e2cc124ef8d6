"""Request types of devices that join and leave (ID-1..ID-5, PO-2; issue 13).

``whoami`` and ``devices`` read; ``device_request`` and ``device_join`` run on a new device's
home that has no store yet; ``device_request_show``, ``device_approve`` and ``device_revoke``
run on a trusted, unlocked device and need elevation.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from engine.service.requests import Password, Request

__all__ = [
    "Whoami",
    "InviteNew",
    "Devices",
    "DeviceRequest",
    "DeviceRequestShow",
    "DeviceApprove",
    "DeviceJoin",
    "DeviceRevoke",
]

DeviceId = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
DeviceName = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
RequestText = Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]
ApprovalText = Annotated[str, msgspec.Meta(min_length=1, max_length=64 * 1024 * 1024)]
Fingerprint = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]  # checked by invite.parse_fingerprint
DeviceRef = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class Whoami(Request, tag="whoami"):
    pass


class InviteNew(Request, tag="invite_new"):
    """An invitation for another person's vault (PO-3): this user and its devices, pinning the
    inviting Owner's full user fingerprint; the pin is kept here until it expires."""

    owner: Fingerprint
    name: DeviceName | None = None
    hours: Annotated[int, msgspec.Meta(ge=1, le=168)] = 24


class Devices(Request, tag="devices"):
    pass


class DeviceRequest(Request, tag="device_request"):
    """On a home without a store: make a join request and seal the new keys under ``password``."""

    approver: DeviceId
    password: Password
    name: DeviceName | None = None


class DeviceRequestShow(Request, tag="device_request_show"):
    request: RequestText


class DeviceApprove(Request, tag="device_approve"):
    request: RequestText
    # CT-1: with a [[centers]] entry, a Center-signed device ticket naming the joining device.
    ticket: Annotated[str, msgspec.Meta(min_length=1, max_length=8192)] | None = None


class DeviceJoin(Request, tag="device_join"):
    approval: ApprovalText
    password: Password


class DeviceRevoke(Request, tag="device_revoke"):
    device: DeviceRef
