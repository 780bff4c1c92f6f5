"""A Hugging Face Hub stand-in for tests: a small threaded HTTP server on 127.0.0.1.

It answers the requests huggingface_hub 2.4 makes for models, in the shapes it parses:

- ``GET /api/models/{repo_id}`` and ``/api/models/{repo_id}/revision/{rev}``: model info (sha, siblings with
  sizes, gated, downloads, likes, cardData.license, usedStorage);
- ``GET /api/models/{repo_id}/tree/{rev}``: the file listing snapshot_download reads (oid, size, lfs);
- ``GET /api/models?search=TEXT&limit=N``: search;
- ``HEAD`` and ``GET /{repo_id}/resolve/{rev}/{path}``: files, with ETag (X-Linked-Etag for LFS files),
  X-Repo-Commit, Content-Length, Accept-Ranges and ``Range: bytes=N-`` answered with 206;
- datasets (``add_dataset``) the same way under ``/api/datasets/{repo_id}...`` (info, revision, tree, search)
  and ``/datasets/{repo_id}/resolve/{rev}/{path}``, as huggingface_hub asks for ``repo_type="dataset"``.

Errors carry the ``X-Error-Code`` header huggingface_hub turns into exceptions: ``RepoNotFound`` (404),
``RevisionNotFound`` (404) and ``GatedRepo`` (401 without a token, 403 with a token that was not granted).
No Xet headers are ever sent, so huggingface_hub downloads over plain HTTP. ``drop_once(repo, path)``
makes the next full GET of that file stop half way and close the connection; ``throttle_bps`` slows
file bodies down (so a test can stop a download midway); ``requests`` records
every request (method, path, Range, whether a token was sent) for assertions.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf", ".onnx", ".parquet", ".arrow")


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Repo:
    repo_id: str
    files: dict[str, bytes]
    gated: str | bool = False  # "manual" or "auto" for a gated repo
    granted: set[str] = field(default_factory=set)  # tokens that were given access
    downloads: int = 0
    likes: int = 0
    license: str | None = "apache-2.0"
    repo_type: str = "model"  # or "dataset"
    sha: str = ""

    def __post_init__(self) -> None:
        digest = hashlib.sha1()
        for path in sorted(self.files):
            digest.update(path.encode() + b"\0" + git_blob_sha1(self.files[path]).encode())
        self.sha = digest.hexdigest()

    def is_lfs(self, path: str) -> bool:
        return path.endswith(LFS_SUFFIXES)

    def etag(self, path: str) -> str:
        data = self.files[path]
        return hashlib.sha256(data).hexdigest() if self.is_lfs(path) else git_blob_sha1(data)

    def tree_entry(self, path: str) -> dict[str, Any]:
        data = self.files[path]
        entry: dict[str, Any] = {"type": "file", "oid": git_blob_sha1(data), "size": len(data), "path": path}
        if self.is_lfs(path):
            entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        return entry

    def info(self) -> dict[str, Any]:
        doc = {
            "_id": self.sha[:24], "id": self.repo_id, "author": self.repo_id.split("/")[0],
            "sha": self.sha, "private": False, "disabled": False, "gated": self.gated,
            "downloads": self.downloads, "likes": self.likes,
            "lastModified": "2026-01-02T03:04:05.000Z", "createdAt": "2026-01-01T00:00:00.000Z",
            "cardData": {"license": self.license} if self.license else {},
            "usedStorage": sum(len(d) for d in self.files.values()),
            "siblings": [self.sibling(p) for p in sorted(self.files)],
        }
        if self.repo_type == "dataset":
            return doc | {"tags": ["size_categories:n<1K"], "description": ""}
        return doc | {"modelId": self.repo_id, "library_name": "transformers", "pipeline_tag": "text-generation",
                      "tags": ["transformers", "safetensors"]}

    def sibling(self, path: str) -> dict[str, Any]:
        entry = self.tree_entry(path)
        doc: dict[str, Any] = {"rfilename": path, "size": entry["size"], "blobId": entry["oid"]}
        if "lfs" in entry:
            doc["lfs"] = {"sha256": entry["lfs"]["oid"], "size": entry["size"], "pointerSize": 134}
        return doc


class HubStandin:
    """``with HubStandin() as hub: hub.add_folder("org/name", folder)``; ``hub.url`` is the HF_ENDPOINT."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.datasets: dict[str, Repo] = {}
        self.requests: list[dict[str, Any]] = []
        self._drops: set[tuple[str, str]] = set()
        self.throttle_bps: float | None = None  # file bodies sent at about this rate (to stop a download midway)
        self._lock = threading.Lock()
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:  # quiet: the test output is for assertions
                pass

            def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
                standin._answer(self, head=True)

            def do_GET(self) -> None:  # noqa: N802
                standin._answer(self, head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread: threading.Thread | None = None

    # ---- set-up
    def add_repo(self, repo_id: str, files: dict[str, bytes], **kw: Any) -> Repo:
        repo = Repo(repo_id, dict(files), **kw)
        self.repos[repo_id] = repo
        return repo

    def add_dataset(self, repo_id: str, files: dict[str, bytes], **kw: Any) -> Repo:
        repo = Repo(repo_id, dict(files), repo_type="dataset", **kw)
        self.datasets[repo_id] = repo
        return repo

    def add_folder(self, repo_id: str, folder: Path, **kw: Any) -> Repo:
        files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(Path(folder).rglob("*"))
                 if p.is_file()}
        return self.add_repo(repo_id, files, **kw)

    def drop_once(self, repo_id: str, path: str) -> None:
        """The next GET of this file from its first byte sends half of it, then closes the connection."""
        with self._lock:
            self._drops.add((repo_id, path))

    def start(self) -> HubStandin:
        self._thread = threading.Thread(target=self.server.serve_forever, name="hub-standin", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> HubStandin:
        return self.start()

    def __exit__(self, *_exc: Any) -> None:
        self.stop()

    def file_requests(self, path: str, method: str = "GET") -> list[dict[str, Any]]:
        return [r for r in self.requests if r["method"] == method and r["path"].endswith("/" + path)
                and "/resolve/" in r["path"]]

    # ---- answers
    def _answer(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        parts = urlsplit(h.path)
        path = unquote(parts.path)
        auth = h.headers.get("Authorization") or ""
        token = auth[7:] if auth.lower().startswith("bearer ") else None
        with self._lock:
            self.requests.append({"method": h.command, "path": path, "query": parts.query,
                                  "range": h.headers.get("Range"), "token": bool(token)})
        if path == "/api/models":
            return self._search(h, parse_qs(parts.query), self.repos)
        if path.startswith("/api/models/"):
            return self._api(h, path[len("/api/models/"):], self.repos)
        if path == "/api/datasets":
            return self._search(h, parse_qs(parts.query), self.datasets)
        if path.startswith("/api/datasets/"):
            return self._api(h, path[len("/api/datasets/"):], self.datasets)
        if path.startswith("/datasets/") and "/resolve/" in path:
            return self._file(h, path[len("/datasets/"):], token, head, self.datasets)
        if "/resolve/" in path:
            return self._file(h, path.lstrip("/"), token, head, self.repos)
        self._error(h, 404, "EntryNotFound", "Not found")

    def _send_json(self, h: BaseHTTPRequestHandler, doc: Any, status: int = 200) -> None:
        body = json.dumps(doc).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def _error(self, h: BaseHTTPRequestHandler, status: int, code: str, message: str,
               commit: str | None = None) -> None:
        body = json.dumps({"error": message}).encode()
        h.send_response(status)
        h.send_header("X-Error-Code", code)
        h.send_header("X-Error-Message", message)
        if commit:
            h.send_header("X-Repo-Commit", commit)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(body)

    def _repo_and_rest(self, path: str, repos: dict[str, Repo]) -> tuple[Repo | None, str]:
        for repo_id in sorted(repos, key=len, reverse=True):
            if path == repo_id or path.startswith(repo_id + "/"):
                return repos[repo_id], path[len(repo_id):].lstrip("/")
        return None, path

    def _revision_ok(self, repo: Repo, rev: str) -> bool:
        return rev in ("main", repo.sha)

    def _api(self, h: BaseHTTPRequestHandler, rest: str, repos: dict[str, Repo]) -> None:
        repo, tail = self._repo_and_rest(rest, repos)
        if repo is None:
            return self._error(h, 404, "RepoNotFound", "Repository not found")
        if tail == "":
            return self._send_json(h, repo.info())
        kind, _, rev = tail.partition("/")
        rev = rev.rstrip("/")
        if kind in ("revision", "tree"):
            if not self._revision_ok(repo, rev):
                return self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {rev}")
            if kind == "revision":
                return self._send_json(h, repo.info())
            return self._send_json(h, [repo.tree_entry(p) for p in sorted(repo.files)])
        self._error(h, 404, "EntryNotFound", "Not found")

    def _search(self, h: BaseHTTPRequestHandler, query: dict[str, list[str]], repos: dict[str, Repo]) -> None:
        text = (query.get("search") or [""])[0].lower()
        limit = int((query.get("limit") or ["20"])[0])
        found = [r for r in repos.values() if text in r.repo_id.lower()]
        found.sort(key=lambda r: -r.downloads)
        docs = []
        for r in found[:limit]:
            info = r.info()
            docs.append({k: info[k] for k in ("_id", "id", "downloads", "likes", "gated", "cardData",
                                               "usedStorage", "library_name", "pipeline_tag", "private")
                         if k in info})
        self._send_json(h, docs)

    def _file(self, h: BaseHTTPRequestHandler, path: str, token: str | None, head: bool,
              repos: dict[str, Repo]) -> None:
        repo, tail = self._repo_and_rest(path, repos)
        if repo is None:
            return self._error(h, 404, "RepoNotFound", "Repository not found")
        _, _, rest = tail.partition("resolve/")
        rev, _, name = rest.partition("/")
        if not self._revision_ok(repo, rev):
            return self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {rev}")
        if repo.gated and token not in repo.granted:
            page = f"{self.url}/{repo.repo_id}"
            if token is None:
                return self._error(h, 401, "GatedRepo", f"Access to {repo.repo_type} {repo.repo_id} is restricted. "
                                   "You must have access to it and be authenticated to access it. Please log in.",
                                   repo.sha)
            return self._error(h, 403, "GatedRepo", f"Access to {repo.repo_type} {repo.repo_id} is restricted and "
                               f"you are not in the authorized list. Visit {page} to ask for access.", repo.sha)
        if name not in repo.files:
            return self._error(h, 404, "EntryNotFound", f"{name} does not exist", repo.sha)
        data = repo.files[name]
        start = 0
        wanted = h.headers.get("Range")
        if wanted and wanted.startswith("bytes="):
            first, _, _last = wanted[len("bytes="):].partition("-")
            start = int(first or 0)
        h.send_response(206 if start else 200)
        h.send_header("Content-Length", str(len(data) - start))
        h.send_header("Accept-Ranges", "bytes")
        h.send_header("ETag", f'"{repo.etag(name)}"')
        if repo.is_lfs(name):
            h.send_header("X-Linked-Etag", f'"{repo.etag(name)}"')
            h.send_header("X-Linked-Size", str(len(data)))
        h.send_header("X-Repo-Commit", repo.sha)
        h.send_header("Content-Type", "application/octet-stream")
        if start:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.end_headers()
        if head:
            return
        with self._lock:
            drop = start == 0 and (repo.repo_id, name) in self._drops
            self._drops.discard((repo.repo_id, name))
        if drop:  # half the body, then the link goes down
            h.wfile.write(data[: len(data) // 2])
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)
            return
        if not self.throttle_bps:
            h.wfile.write(data[start:])
            return
        step = 32 * 1024
        for at in range(start, len(data), step):
            try:
                h.wfile.write(data[at:at + step])
                h.wfile.flush()
            except OSError:  # the client went away (a stopped download)
                return
            time.sleep(step / self.throttle_bps)


def point_huggingface_hub_at(standin: HubStandin, hf_home: Path, monkeypatch: Any) -> None:
    """HF_ENDPOINT and HF_HOME for processes started from now on (the engine, its jobs), and the same in
    this process's huggingface_hub, which read them once at import; no token and no offline switch."""
    from huggingface_hub import constants

    env = {"HF_ENDPOINT": standin.url, "HF_HOME": str(hf_home), "HF_HUB_DISABLE_TELEMETRY": "1",
           "HF_HUB_DISABLE_XET": "1"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    for key in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE",
                "HF_TOKEN_PATH"):
        monkeypatch.delenv(key, raising=False)
    for name, value in (("ENDPOINT", standin.url), ("HF_HOME", str(hf_home)),
                        ("HF_HUB_CACHE", str(hf_home / "hub")), ("HF_TOKEN_PATH", str(hf_home / "token")),
                        ("HF_HUB_OFFLINE", False),
                        ("HUGGINGFACE_CO_URL_TEMPLATE", standin.url + "/{repo_id}/resolve/{revision}/{filename}")):
        monkeypatch.setattr(constants, name, value)
