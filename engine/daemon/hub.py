"""The engine's side of the Hugging Face Hub: the cache's models, the Hub's search, the access token.

Blocking functions (the handlers run them in a thread). The cache is huggingface_hub's standard one
(``HF_HOME``/``HF_HUB_CACHE``, read by ``scan_cache_dir``); the token file is the one huggingface_hub
reads (``constants.HF_TOKEN_PATH``, mode 0600). The token is written there and nowhere else: never
returned, logged or stored by Ember. Downloads are jobs (``model.download``), not done here.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

SEARCH_TIMEOUT_S = 6.0  # a search answers within seconds, also when the link is down
SEARCH_EXPAND = ("downloads", "likes", "gated", "cardData", "usedStorage", "pipeline_tag", "library_name")


class HubProblem(Exception):
    """What went wrong, in words, and what to do (``hint``); ``kind``: not_found, offline, invalid or busy."""

    def __init__(self, message: str, hint: str, kind: str):
        super().__init__(message)
        self.hint, self.kind = hint, kind


def status() -> dict[str, Any]:
    """Where the Hub and the cache are, and whether a token is set; never the token itself."""
    from huggingface_hub import constants

    from_env = bool(os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"))
    path = Path(constants.HF_TOKEN_PATH)
    from_file = path.is_file() and bool(path.read_text(encoding="utf-8", errors="replace").strip())
    return {"endpoint": constants.ENDPOINT, "offline": bool(constants.HF_HUB_OFFLINE),
            "cache_dir": str(constants.HF_HUB_CACHE),
            "token": {"set": from_env or from_file,
                      "source": "environment" if from_env else "file" if from_file else None,
                      "path": str(path)}}


def save_token(token: str) -> dict[str, Any]:
    """Write the token where huggingface_hub reads it: its parent 0700, the file 0600, as `hf auth login` does."""
    from huggingface_hub import constants

    token = token.strip()
    if not token or any(c.isspace() for c in token) or not token.isprintable():
        raise HubProblem("That is not an access token (it is empty or holds spaces or line breaks)",
                         "Copy the token from your Hugging Face settings (Access Tokens) and paste it whole.",
                         "invalid")
    path = Path(constants.HF_TOKEN_PATH)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(token)
    os.chmod(path, 0o600)  # an older file keeps its mode through O_CREAT: set it
    with contextlib.suppress(OSError):
        os.chmod(path.parent, 0o700)
    return status()


def forget_token() -> dict[str, Any]:
    from huggingface_hub import constants

    Path(constants.HF_TOKEN_PATH).unlink(missing_ok=True)
    return status()


def _partial_bytes(repo_path: Path) -> int:
    with contextlib.suppress(OSError):
        return sum(p.stat().st_size for p in (repo_path / "blobs").glob("*.incomplete"))
    return 0


def cached_models() -> dict[str, Any]:
    """Every model in the cache: id, revisions (commit, refs, size), size on disk, last used, folder."""
    from huggingface_hub import constants, scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        info = scan_cache_dir()
    except CacheNotFound:
        return {"models": [], "cache_dir": str(constants.HF_HUB_CACHE)}
    models = []
    for repo in info.repos:
        if repo.repo_type != "model":
            continue
        revisions = [{"commit": r.commit_hash, "refs": sorted(r.refs), "size_bytes": r.size_on_disk,
                      "files": r.nb_files, "path": str(r.snapshot_path)}
                     for r in sorted(repo.revisions, key=lambda r: -r.last_modified)]
        models.append({"repo_id": repo.repo_id, "size_bytes": repo.size_on_disk,
                       "last_used": repo.last_accessed, "last_modified": repo.last_modified,
                       "path": str(repo.repo_path), "revisions": revisions,
                       "partial_bytes": _partial_bytes(Path(repo.repo_path))})
    # A download that never finished a file has no snapshot yet; its partial files still take space.
    listed = {m["repo_id"] for m in models}
    root = Path(constants.HF_HUB_CACHE)
    for folder in sorted(root.glob("models--*")) if root.is_dir() else []:
        repo_id = folder.name[len("models--"):].replace("--", "/")
        if repo_id not in listed and (partial := _partial_bytes(folder)):
            models.append({"repo_id": repo_id, "size_bytes": partial, "last_used": folder.stat().st_mtime,
                           "last_modified": folder.stat().st_mtime, "path": str(folder), "revisions": [],
                           "partial_bytes": partial})
    models.sort(key=lambda m: -(m["last_used"] or 0))
    return {"models": models, "cache_dir": str(root)}


def delete_model(repo_id: str, revision: str | None = None) -> dict[str, Any]:
    """Delete a cached model (every revision, partial files too), or one revision (a commit or a ref)."""
    from huggingface_hub import constants, scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    root = Path(constants.HF_HUB_CACHE)
    folder = root / ("models--" + repo_id.replace("/", "--"))
    if not folder.is_dir() or folder.resolve().parent != root.resolve():
        raise HubProblem(f"{repo_id} is not in the Hugging Face cache ({root})",
                         "models.list shows the cached models.", "not_found")
    if revision is None:
        freed = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
        shutil.rmtree(folder)
        return {"ok": True, "freed_bytes": freed}
    try:
        info = scan_cache_dir()
    except CacheNotFound:
        info = None
    repo = next((r for r in (info.repos if info else []) if r.repo_id == repo_id and r.repo_type == "model"), None)
    commits = [r.commit_hash for r in (repo.revisions if repo else []) if revision in (r.commit_hash, *r.refs)]
    if info is None or not commits:
        raise HubProblem(f"{repo_id} has no cached revision {revision!r}",
                         "models.list shows each model's cached revisions.", "not_found")
    strategy = info.delete_revisions(*commits)
    strategy.execute()
    return {"ok": True, "freed_bytes": strategy.expected_freed_size}


def search(text: str, limit: int = 20) -> dict[str, Any]:
    """Models on the Hub whose id holds ``text``, most downloaded first; a HubProblem within seconds offline."""
    import httpx2
    from huggingface_hub import constants
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    offline_hint = ("Connect to the network to search, or type a model id you know: a model already in the cache "
                    "is used offline.")
    if constants.HF_HUB_OFFLINE:
        raise HubProblem("Searching the Hugging Face Hub needs the network, and HF_HUB_OFFLINE is set",
                         offline_hint, "offline")
    params: list[tuple[str, Any]] = [("search", text), ("limit", limit), ("sort", "downloads")]
    params += [("expand", e) for e in SEARCH_EXPAND]
    try:
        response = get_session().get(f"{constants.ENDPOINT}/api/models", params=params,
                                     headers=build_hf_headers(), timeout=SEARCH_TIMEOUT_S)
        hf_raise_for_status(response)
        found = response.json()
    except (httpx2.TransportError, OfflineModeIsEnabled) as exc:
        raise HubProblem(f"The Hugging Face Hub ({constants.ENDPOINT}) cannot be reached: {type(exc).__name__}",
                         offline_hint, "offline") from None
    except (HfHubHTTPError, ValueError) as exc:
        raise HubProblem(f"The Hugging Face Hub did not answer the search: {str(exc).splitlines()[0][:200]}",
                         "Try again later.", "offline") from None
    cached = {m["repo_id"] for m in cached_models()["models"]}
    models = []
    for item in found if isinstance(found, list) else []:
        card = item.get("cardData") or {}
        models.append({"repo_id": item.get("id") or item.get("modelId"), "downloads": item.get("downloads"),
                       "likes": item.get("likes"), "license": card.get("license") if isinstance(card, dict) else None,
                       "gated": item.get("gated") or False, "size_bytes": item.get("usedStorage"),
                       "pipeline_tag": item.get("pipeline_tag"), "library": item.get("library_name"),
                       "cached": (item.get("id") or "") in cached})
    return {"models": models, "endpoint": constants.ENDPOINT}
