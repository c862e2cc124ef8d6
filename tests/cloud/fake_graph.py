"""A loopback Microsoft Graph (OneDrive app folder) for the cloud tests (issue 21; CL-4).

The used subset, in Graph's wire format: ``/v1.0/me/drive/special/approot`` and path
addressing ``approot:/a/b:`` (item metadata with ``size`` and
``@microsoft.graph.downloadUrl``; ``:/children`` paged with ``$top`` and ``@odata.nextLink``;
``:/content`` simple upload; ``:/createUploadSession`` and byte-range PUTs to the session URL,
fragments a multiple of 320 KiB except the last, ``202`` with ``nextExpectedRanges`` until the
last); pre-authorized ``/download/…`` URLs. Folders are implied by the paths of files.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from tests.cloud.fake_oauth import FakeOAuth

__all__ = ["FakeGraph"]

_ROOT = "/v1.0/me/drive/special/approot"
_UNIT = 320 * 1024
_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")


@dataclass
class FakeGraph(FakeOAuth):
    rotate_refresh: bool = True  # Microsoft rotates refresh tokens
    files: dict[str, bytes] = field(default_factory=dict)
    sessions: dict[str, dict[str, Any]] = field(default_factory=dict)
    downloads: dict[str, str] = field(default_factory=dict)
    session_puts: list[tuple[int, int]] = field(default_factory=list)

    def routes(self, app: web.Application) -> None:
        app.router.add_route("*", _ROOT + "{rest:.*}", self._approot)
        app.router.add_put("/session/{sid}", self._session_put)
        app.router.add_get("/download/{token}", self._download)

    def _item(self, path: str) -> dict[str, Any] | None:
        if path in self.files:
            token = secrets.token_urlsafe(12)
            self.downloads[token] = path
            return {
                "id": path,
                "name": path.rsplit("/", 1)[-1],
                "size": len(self.files[path]),
                "file": {"mimeType": "application/octet-stream"},
                "@microsoft.graph.downloadUrl": f"{self.base}/download/{token}",
            }
        if any(k.startswith(path + "/") for k in self.files):
            return {"id": path, "name": path.rsplit("/", 1)[-1], "folder": {"childCount": 0}}
        return None

    async def _approot(self, request: web.Request) -> web.StreamResponse:
        rest = request.match_info["rest"]
        if rest == "":
            return web.json_response({"id": "approot", "name": "Memories", "folder": {"childCount": len(self.files)}})
        m = re.fullmatch(r":/([^:]+)(?::(/children|/content|/createUploadSession)?)?", unquote(rest))
        if m is None:
            return web.json_response({"error": {"code": "invalidRequest"}}, status=400)
        path, action = m.group(1).strip("/"), m.group(2) or ""
        if request.method == "GET" and action == "":
            item = self._item(path)
            return web.json_response(item) if item else web.json_response({"error": {"code": "itemNotFound"}}, status=404)
        if request.method == "GET" and action == "/children":
            return self._children(request, path)
        if request.method == "PUT" and action == "/content":
            self.files[path] = await request.read()
            return web.json_response(self._item(path), status=201)
        if request.method == "POST" and action == "/createUploadSession":
            sid = secrets.token_urlsafe(12)
            self.sessions[sid] = {"path": path, "data": bytearray(), "total": None}
            return web.json_response({"uploadUrl": f"{self.base}/session/{sid}", "expirationDateTime": "2099-01-01T00:00:00Z"})
        return web.json_response({"error": {"code": "invalidRequest"}}, status=400)

    def _children(self, request: web.Request, folder: str) -> web.Response:
        if self._item(folder) is None:
            return web.json_response({"error": {"code": "itemNotFound"}}, status=404)
        names = sorted({k[len(folder) + 1 :].split("/", 1)[0] for k in self.files if k.startswith(folder + "/")})
        top = max(1, min(200, self.max_page, int(request.query.get("$top", "200"))))
        skip = int(request.query.get("$skiptoken", "0"))
        page = names[skip : skip + top]
        body: dict[str, Any] = {"value": [self._item(f"{folder}/{n}") for n in page]}
        if skip + top < len(names):
            body["@odata.nextLink"] = f"{self.base}{_ROOT}:/{folder}:/children?$top={top}&$skiptoken={skip + top}"
        return web.json_response(body)

    async def _session_put(self, request: web.Request) -> web.Response:
        session = self.sessions.get(request.match_info["sid"])
        if session is None:
            return web.json_response({"error": {"code": "itemNotFound"}}, status=404)
        if "Authorization" in request.headers:  # Graph: the session URL must not get the token
            return web.json_response({"error": {"code": "invalidRequest"}}, status=401)
        m = _RANGE.fullmatch(request.headers.get("Content-Range", ""))
        data = await request.read()
        if m is None:
            return web.json_response({"error": {"code": "invalidRange"}}, status=400)
        start, end, total = (int(g) for g in m.groups())
        last = end + 1 == total
        if start != len(session["data"]) or end - start + 1 != len(data) or (not last and len(data) % _UNIT):
            return web.json_response({"error": {"code": "invalidRange"}}, status=416)
        session["data"].extend(data)
        self.session_puts.append((start, len(data)))
        if not last:
            return web.json_response({"nextExpectedRanges": [f"{end + 1}-"]}, status=202)
        path = session["path"]
        self.files[path] = bytes(session["data"])
        del self.sessions[request.match_info["sid"]]
        return web.json_response(self._item(path), status=201)

    async def _download(self, request: web.Request) -> web.Response:
        path = self.downloads.get(request.match_info["token"])
        if path is None or path not in self.files:
            return web.Response(status=404)
        return web.Response(body=self.files[path], content_type="application/octet-stream")
