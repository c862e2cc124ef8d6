"""OneDrive through Microsoft Graph v1.0, in the app folder (``/me/drive/special/approot``),
with plain aiohttp (CL-4; docs/cloud.md).

A key ``a/b/c`` is the item at that path under the app folder (Graph creates the folders on
upload). Small objects are one ``PUT …:/content``; larger ones go through an upload session
(``createUploadSession``, then byte ranges to the session URL). Downloads follow the item's
``@microsoft.graph.downloadUrl``; listings follow ``@odata.nextLink`` pages.
"""

from __future__ import annotations

import json
from urllib.parse import quote

from engine.cloud.chunks import ONEDRIVE_UNIT, chunk_bytes, simple_max
from engine.cloud.oauth import Authorizer, OAuthClient, Provider, Tokens
from engine.cloud.transport import MAX_OBJECT_BYTES, Counters
from engine.errors import MemoriesError

__all__ = ["OneDriveTransport"]

_PAGE = 200


def _failed(status: int) -> MemoriesError:
    if status in (401, 403):
        return MemoriesError("cloud_denied", "OneDrive refused this account's token or app folder.")
    return MemoriesError("cloud_unreachable", f"OneDrive answered HTTP {status}; what was sent stays queued.")


class OneDriveTransport:
    def __init__(self, p: Provider, tokens: Tokens) -> None:
        self.counters = Counters()
        self.client = OAuthClient(Authorizer(p, tokens))
        self._root = p.api + "/me/drive/special/approot"

    def _item(self, key: str) -> str:
        return f"{self._root}:/{quote(key.strip('/'), safe='/')}:"

    async def put(self, key: str, data: bytes, replace: bool = False) -> None:
        # Graph's PUT …:/content and an upload session with conflictBehavior "replace" both
        # replace an existing item: ``replace`` changes nothing here.
        if len(data) <= simple_max():
            answer = await self.client.authed(
                "PUT", self._item(key) + "/content", headers={"Content-Type": "application/octet-stream"}, data=data
            )
            if answer.status not in (200, 201):
                raise _failed(answer.status)
            self.counters.puts += 1
        else:
            await self._session_upload(key, data)
        self.counters.sent_bytes += len(data)

    async def _session_upload(self, key: str, data: bytes) -> None:
        body = json.dumps({"item": {"@microsoft.graph.conflictBehavior": "replace"}}).encode()
        answer = await self.client.authed(
            "POST", self._item(key) + "/createUploadSession", headers={"Content-Type": "application/json"}, data=body
        )
        if answer.status != 200:
            raise _failed(answer.status)
        url = answer.json().get("uploadUrl")
        if not isinstance(url, str) or not url.startswith(("https://", "http://")):
            raise MemoriesError("cloud_unreachable", "OneDrive gave no upload session URL.")
        step, total = chunk_bytes(ONEDRIVE_UNIT), len(data)
        for start in range(0, total, step):
            chunk = data[start : start + step]
            headers = {"Content-Range": f"bytes {start}-{start + len(chunk) - 1}/{total}"}
            # The session URL is pre-authorized: Graph documents that no bearer token is sent.
            answer = await self.client.plain("PUT", url, headers=headers, data=chunk)
            self.counters.puts += 1
            last = start + len(chunk) >= total
            if answer.status not in ((200, 201) if last else (202,)):
                raise _failed(answer.status)

    async def get(self, key: str, max_bytes: int = MAX_OBJECT_BYTES) -> bytes | None:
        self.counters.gets += 1
        answer = await self.client.authed("GET", self._item(key).rstrip(":"))
        if answer.status == 404:
            return None
        if answer.status != 200:
            raise _failed(answer.status)
        item = answer.json()
        size, url = item.get("size"), item.get("@microsoft.graph.downloadUrl")
        if not isinstance(size, int) or not isinstance(url, str):
            return None  # a folder, or not an object this engine wrote
        if size > max_bytes:
            raise MemoriesError("sync_invalid", "A cloud object is larger than the size bound; nothing was merged.")
        got = await self.client.plain("GET", url, max_bytes=max_bytes)
        if got.status == 404:
            return None
        if got.status != 200:
            raise _failed(got.status)
        self.counters.received_bytes += len(got.body)
        return got.body

    async def list_after(self, prefix: str, after: str | None, limit: int) -> list[str]:
        folder = prefix.rstrip("/")
        url: str | None = f"{self._item(folder)}/children?$top={_PAGE}&$select=name,file,size"
        keys: list[str] = []
        while url:
            answer = await self.client.authed("GET", url)
            self.counters.lists += 1
            if answer.status == 404:
                return []
            if answer.status != 200:
                raise _failed(answer.status)
            page = answer.json()
            for item in page.get("value", []):
                if isinstance(item, dict) and "file" in item and isinstance(item.get("name"), str):
                    key = f"{folder}/{item['name']}"
                    if after is None or key > after:
                        keys.append(key)
            link = page.get("@odata.nextLink")
            url = link if isinstance(link, str) and link.startswith(self._root.split("/v1.0")[0]) else None
        return sorted(keys)[:limit]

    async def check(self) -> None:
        answer = await self.client.authed("GET", self._root)
        if answer.status != 200:
            raise _failed(answer.status)

    async def aclose(self) -> None:
        await self.client.aclose()
