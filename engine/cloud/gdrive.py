"""Google Drive v3 in the hidden application data folder (``appDataFolder``), with plain
aiohttp (CL-4; docs/cloud.md).

Each key is one file in ``appDataFolder`` named by the whole key, with the app property
``dir`` = the key's folder part, so a listing is one ``files.list`` query
(``appProperties has {key='dir' and value='…'}``) followed through ``nextPageToken``. Small
objects are one multipart upload, larger ones a resumable upload in chunks; reads are
``files.get?alt=media``. Every key this engine writes always carries the same bytes (objects
are named by their hash, descriptors are fixed before any I/O), so a key that exists is not
written again, except with ``replace`` (the delivery marks, and an upload again of a bundle a
receiver could not take, CL-5): a media update (``PATCH``) of the file, or for a large object a
delete and a new upload.
"""

from __future__ import annotations

import json
import secrets
from typing import Any
from urllib.parse import urlencode

from engine.cloud.chunks import DRIVE_UNIT, chunk_bytes, simple_max
from engine.cloud.oauth import Authorizer, OAuthClient, Provider, Tokens
from engine.cloud.transport import MAX_OBJECT_BYTES, Counters
from engine.errors import MemoriesError

__all__ = ["DriveTransport"]

_PAGE = 1000


def _failed(status: int) -> MemoriesError:
    if status in (401, 403):
        return MemoriesError("cloud_denied", "Google Drive refused this account's token or app data folder.")
    return MemoriesError("cloud_unreachable", f"Google Drive answered HTTP {status}; what was sent stays queued.")


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class DriveTransport:
    def __init__(self, p: Provider, tokens: Tokens) -> None:
        self.counters = Counters()
        self.client = OAuthClient(Authorizer(p, tokens))
        self._files = p.api + "/files"
        self._upload = p.upload + "/files"

    async def _query(self, q: str, token: str | None, size: int, fields: str) -> dict[str, Any]:
        params = {"spaces": "appDataFolder", "q": q, "pageSize": str(size), "fields": fields}
        if token:
            params["pageToken"] = token
        answer = await self.client.authed("GET", f"{self._files}?{urlencode(params)}")
        self.counters.lists += 1
        if answer.status != 200:
            raise _failed(answer.status)
        return answer.json()

    async def _find(self, key: str) -> dict[str, Any] | None:
        q = f"name = {_quote(key)} and 'appDataFolder' in parents and trashed = false"
        files = (await self._query(q, None, 10, "files(id,name,size)")).get("files", [])
        return files[0] if files and isinstance(files[0], dict) else None

    async def put(self, key: str, data: bytes, replace: bool = False) -> None:
        found = await self._find(key)
        if found is not None and not replace:
            return  # same key, same bytes (see the module docstring)
        if found is not None and isinstance(found.get("id"), str):
            # The delivery marks, or an upload again over bytes a receiver refused (CL-5).
            if len(data) <= simple_max():
                answer = await self.client.authed(
                    "PATCH",
                    f"{self._upload}/{found['id']}?uploadType=media&fields=id",
                    headers={"Content-Type": "application/octet-stream"},
                    data=data,
                )
                self.counters.puts += 1
                if answer.status != 200:
                    raise _failed(answer.status)
                self.counters.sent_bytes += len(data)
                return
            answer = await self.client.authed("DELETE", f"{self._files}/{found['id']}")
            if answer.status not in (200, 204, 404):
                raise _failed(answer.status)
        folder = key.rsplit("/", 1)[0] if "/" in key else ""
        meta = json.dumps({"name": key, "parents": ["appDataFolder"], "appProperties": {"dir": folder}}).encode()
        if len(data) <= simple_max():
            boundary = "memories-" + secrets.token_hex(12)
            body = b"".join(
                [
                    f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(),
                    meta,
                    f"\r\n--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n".encode(),
                    data,
                    f"\r\n--{boundary}--\r\n".encode(),
                ]
            )
            answer = await self.client.authed(
                "POST",
                f"{self._upload}?uploadType=multipart&fields=id",
                headers={"Content-Type": f"multipart/related; boundary={boundary}"},
                data=body,
            )
            self.counters.puts += 1
            if answer.status not in (200, 201):
                raise _failed(answer.status)
        else:
            await self._resumable(meta, data)
        self.counters.sent_bytes += len(data)

    async def _resumable(self, meta: bytes, data: bytes) -> None:
        answer = await self.client.authed(
            "POST",
            f"{self._upload}?uploadType=resumable&fields=id",
            headers={
                "Content-Type": "application/json; charset=UTF-8",
                "X-Upload-Content-Type": "application/octet-stream",
                "X-Upload-Content-Length": str(len(data)),
            },
            data=meta,
        )
        location = answer.headers.get("location", "")
        if answer.status != 200 or not location.startswith(self._upload.split("/upload/")[0]):
            raise _failed(answer.status if answer.status != 200 else 502)
        step, total = chunk_bytes(DRIVE_UNIT), len(data)
        for start in range(0, total, step):
            chunk = data[start : start + step]
            headers = {"Content-Range": f"bytes {start}-{start + len(chunk) - 1}/{total}"}
            answer = await self.client.authed("PUT", location, headers=headers, data=chunk)
            self.counters.puts += 1
            last = start + len(chunk) >= total
            if answer.status not in ((200, 201) if last else (308,)):
                raise _failed(answer.status)

    async def get(self, key: str, max_bytes: int = MAX_OBJECT_BYTES) -> bytes | None:
        self.counters.gets += 1
        found = await self._find(key)
        if found is None or not isinstance(found.get("id"), str):
            return None
        if int(found.get("size", 0) or 0) > max_bytes:
            raise MemoriesError("sync_invalid", "A cloud object is larger than the size bound; nothing was merged.")
        answer = await self.client.authed("GET", f"{self._files}/{found['id']}?alt=media", max_bytes=max_bytes)
        if answer.status == 404:
            return None
        if answer.status != 200:
            raise _failed(answer.status)
        self.counters.received_bytes += len(answer.body)
        return answer.body

    async def list_after(self, prefix: str, after: str | None, limit: int) -> list[str]:
        folder = prefix.rstrip("/")
        q = f"'appDataFolder' in parents and appProperties has {{ key='dir' and value={_quote(folder)} }} and trashed = false"
        keys: list[str] = []
        token: str | None = None
        while True:
            page = await self._query(q, token, _PAGE, "nextPageToken,files(name)")
            for item in page.get("files", []):
                name = item.get("name") if isinstance(item, dict) else None
                if isinstance(name, str) and name.startswith(folder + "/") and (after is None or name > after):
                    keys.append(name)
            nxt = page.get("nextPageToken")
            if not isinstance(nxt, str) or not nxt:
                break
            token = nxt
        return sorted(keys)[:limit]

    async def check(self) -> None:
        await self._query("'appDataFolder' in parents", None, 1, "files(id)")

    async def aclose(self) -> None:
        await self.client.aclose()
