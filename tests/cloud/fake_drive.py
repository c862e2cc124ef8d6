"""A loopback Google Drive v3 (appDataFolder) for the cloud tests (issue 21; CL-4).

The used subset, in Drive's wire format: ``GET /drive/v3/files`` with ``spaces=appDataFolder``,
``q`` (the clauses ``name = '…'``, ``'appDataFolder' in parents``, ``appProperties has { key='…'
and value='…' }``, ``trashed = false``), ``pageSize`` and ``pageToken``/``nextPageToken``;
``GET /drive/v3/files/{id}?alt=media``; ``POST /upload/drive/v3/files?uploadType=multipart``
(multipart/related: JSON metadata, then the media) and ``uploadType=resumable`` (a session URI
in ``Location``; ``PUT`` byte ranges, multiples of 256 KiB except the last, ``308`` with
``Range`` until the last); ``PATCH /upload/drive/v3/files/{id}?uploadType=media`` (replace a
file's content) and ``DELETE /drive/v3/files/{id}``. Unknown query clauses are refused with 400, like Drive does.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.cloud.fake_oauth import FakeOAuth

__all__ = ["FakeDrive"]

_UNIT = 256 * 1024
_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)")
_STR = r"'((?:[^'\\]|\\.)*)'"
_CLAUSES = [
    ("name", re.compile(rf"name = {_STR}")),
    ("in_app", re.compile(r"'appDataFolder' in parents")),
    ("prop", re.compile(rf"appProperties has \{{ key={_STR} and value={_STR} \}}")),
    ("trashed", re.compile(r"trashed = false")),
]


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", r"\1", value)


@dataclass
class FakeDrive(FakeOAuth):
    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> {name, props, data, parents}
    uploads: dict[str, dict[str, Any]] = field(default_factory=dict)
    resumable_puts: list[tuple[int, int]] = field(default_factory=list)

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/drive/v3/files", self._list)
        app.router.add_get("/drive/v3/files/{id}", self._get)
        app.router.add_post("/upload/drive/v3/files", self._upload)
        app.router.add_put("/upload/drive/v3/files", self._resume)
        app.router.add_patch("/upload/drive/v3/files/{id}", self._update)
        app.router.add_delete("/drive/v3/files/{id}", self._delete)

    def by_name(self) -> dict[str, bytes]:
        return {f["name"]: f["data"] for f in self.files.values()}

    def _match(self, q: str) -> list[dict[str, Any]] | None:
        tests: list[Any] = []
        for clause in q.split(" and ") if "appProperties" not in q else _split(q):
            for kind, rx in _CLAUSES:
                m = rx.fullmatch(clause.strip())
                if m:
                    tests.append((kind, [_unescape(g) for g in m.groups()]))
                    break
            else:
                return None
        out = []
        for fid, f in sorted(self.files.items(), key=lambda kv: kv[1]["name"]):
            ok = True
            for kind, args in tests:
                if kind == "name":
                    ok &= f["name"] == args[0]
                elif kind == "in_app":
                    ok &= "appDataFolder" in f["parents"]
                elif kind == "prop":
                    ok &= f["props"].get(args[0]) == args[1]
            if ok:
                out.append({"id": fid, "name": f["name"], "size": str(len(f["data"]))})
        return out

    async def _list(self, request: web.Request) -> web.Response:
        q = request.query
        if q.get("spaces") != "appDataFolder":
            return web.json_response({"error": {"code": 403, "message": "appDataFolder only"}}, status=403)
        found = self._match(q.get("q", ""))
        if found is None:
            return web.json_response({"error": {"code": 400, "message": "Invalid Value"}}, status=400)
        size = max(1, min(1000, self.max_page, int(q.get("pageSize", "100"))))
        start = int(q.get("pageToken", "0") or 0)
        body: dict[str, Any] = {"files": found[start : start + size]}
        if start + size < len(found):
            body["nextPageToken"] = str(start + size)
        return web.json_response(body)

    async def _get(self, request: web.Request) -> web.StreamResponse:
        f = self.files.get(request.match_info["id"])
        if f is None:
            return web.json_response({"error": {"code": 404, "message": "File not found"}}, status=404)
        if request.query.get("alt") != "media":
            return web.json_response({"id": request.match_info["id"], "name": f["name"], "size": str(len(f["data"]))})
        return web.Response(body=f["data"], content_type="application/octet-stream")

    async def _update(self, request: web.Request) -> web.Response:
        f = self.files.get(request.match_info["id"])
        if f is None:
            return web.json_response({"error": {"code": 404, "message": "File not found"}}, status=404)
        if request.query.get("uploadType") != "media":
            return web.json_response({"error": {"code": 400}}, status=400)
        f["data"] = await request.read()
        return web.json_response({"id": request.match_info["id"]})

    async def _delete(self, request: web.Request) -> web.Response:
        if self.files.pop(request.match_info["id"], None) is None:
            return web.json_response({"error": {"code": 404, "message": "File not found"}}, status=404)
        return web.Response(status=204)

    def _create(self, meta: dict[str, Any], data: bytes) -> web.Response:
        if meta.get("parents") != ["appDataFolder"]:
            return web.json_response({"error": {"code": 403, "message": "appDataFolder only"}}, status=403)
        fid = secrets.token_urlsafe(12)
        self.files[fid] = {
            "name": str(meta["name"]),
            "props": dict(meta.get("appProperties", {})),
            "parents": ["appDataFolder"],
            "data": data,
        }
        return web.json_response({"id": fid})

    async def _upload(self, request: web.Request) -> web.Response:
        kind = request.query.get("uploadType")
        if kind == "multipart":
            m = re.fullmatch(r"multipart/related; boundary=(\S+)", request.headers.get("Content-Type", ""))
            if m is None:
                return web.json_response({"error": {"code": 400}}, status=400)
            parts = (await request.read()).split(b"--" + m.group(1).encode())
            if len(parts) != 4:
                return web.json_response({"error": {"code": 400}}, status=400)
            _meta_head, meta = parts[1].split(b"\r\n\r\n", 1)
            _media_head, media = parts[2].split(b"\r\n\r\n", 1)
            return self._create(json.loads(meta.removesuffix(b"\r\n")), media.removesuffix(b"\r\n"))
        if kind == "resumable":
            meta = json.loads(await request.read())
            uid = secrets.token_urlsafe(12)
            total = int(request.headers.get("X-Upload-Content-Length", "-1"))
            self.uploads[uid] = {"meta": meta, "data": bytearray(), "total": total}
            location = f"{self.base}/upload/drive/v3/files?uploadType=resumable&upload_id={uid}"
            return web.Response(status=200, headers={"Location": location})
        return web.json_response({"error": {"code": 400}}, status=400)

    async def _resume(self, request: web.Request) -> web.Response:
        upload = self.uploads.get(request.query.get("upload_id", ""))
        if upload is None:
            return web.json_response({"error": {"code": 404}}, status=404)
        m = _RANGE.fullmatch(request.headers.get("Content-Range", ""))
        data = await request.read()
        if m is None:
            return web.json_response({"error": {"code": 400}}, status=400)
        start, end, total = (int(g) for g in m.groups())
        last = end + 1 == total
        if total != upload["total"] or start != len(upload["data"]) or end - start + 1 != len(data):
            return web.json_response({"error": {"code": 400}}, status=400)
        if not last and len(data) % _UNIT:
            return web.json_response({"error": {"code": 400}}, status=400)
        upload["data"].extend(data)
        self.resumable_puts.append((start, len(data)))
        if not last:
            return web.Response(status=308, headers={"Range": f"bytes=0-{end}"})
        del self.uploads[request.query["upload_id"]]
        return self._create(upload["meta"], bytes(upload["data"]))


def _split(q: str) -> list[str]:
    """Split a query on top-level ``and`` (not the one inside ``appProperties has { … }``)."""
    out, depth, current = [], 0, ""
    for token in re.split(r"( and |\{|\})", q):
        if token == "{":
            depth += 1
        elif token == "}":
            depth -= 1
        if token == " and " and depth == 0:
            out.append(current)
            current = ""
        else:
            current += token
    out.append(current)
    return out
