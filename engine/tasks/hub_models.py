"""Models named by a Hugging Face Hub id (``model.hub``): found in the standard cache, or downloaded into it.

A cached model is used without any network request (``local_files_only``), so it works offline.
One that is not cached is downloaded by the fine-tune before it starts (engine/tasks/hub_download.py,
the same code as the ``model.download`` job); the checks before launch only ask the Hub whether it
can be downloaded. Every failure becomes a JobFailed (or an Issue) saying what to do:
gated and not granted, no such model or revision, offline, full disk. See docs/hub.md.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.tasks.base import Issue
from engine.training.context import JobFailed

PROBE_TIMEOUT_S = 5.0  # the checks before launch ask the Hub; a dead link must not hold the wizard up


def hub_endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def model_page(repo_id: str) -> str:
    """The model's page, where access to a gated model is requested."""
    return f"{hub_endpoint()}/{repo_id}"


def cache_dir() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def cached_folder(repo_id: str, revision: str | None) -> Path | None:
    """The complete cached snapshot of the model at ``revision`` (default: main), found without the network."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, revision=revision, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):
        return None


def offline_failure(repo_id: str, why: str) -> JobFailed:
    return JobFailed(f"{repo_id} is not in the Hugging Face cache ({cache_dir()}) and the Hub cannot be reached "
                     f"({why})",
                     "Connect to the network and start again (the download continues where it stopped); or copy "
                     "the model folder to this machine and set model.path to it. Once a model is cached it is "
                     "used offline, and HF_HUB_OFFLINE=1 keeps every look-up on this machine.")


def explain(exc: BaseException, repo_id: str, revision: str | None) -> JobFailed | None:
    """A JobFailed for the Hub's errors a user can act on; None for anything else."""
    import httpx2
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    from engine.training.context import disk_full

    if isinstance(exc, JobFailed):
        return exc
    if isinstance(exc, GatedRepoError):
        status = exc.response.status_code if exc.response is not None else None
        why = ("no Hugging Face access token is saved on this machine" if status == 401
               else "the saved access token has not been granted access")
        return JobFailed(f"{repo_id} is a gated model and {why}",
                         f"Request access on the model's page, {model_page(repo_id)}; once it is granted, save a "
                         "token that can read it (`ember hub login`, or Save token… on the Models page) and start "
                         "again.")
    if isinstance(exc, RevisionNotFoundError):
        return JobFailed(f"{repo_id} has no revision {revision!r}",
                         "Use a branch, tag or commit of that model (see its page, "
                         f"{model_page(repo_id)}), or leave revision empty for main.")
    if isinstance(exc, RepositoryNotFoundError):
        return JobFailed(f"No model {repo_id} on the Hugging Face Hub ({hub_endpoint()})",
                         "Check the id (owner/name, as on the model's page); a private model needs a saved token "
                         "with access to it (`ember hub login`).")
    if isinstance(exc, OfflineModeIsEnabled):
        return offline_failure(repo_id, "HF_HUB_OFFLINE is set")
    if isinstance(exc, (httpx2.TransportError, LocalEntryNotFoundError)):
        return offline_failure(repo_id, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
    full = disk_full(exc, cache_dir(), f"downloading {repo_id}")
    if full is not None:
        return JobFailed(str(full), "Free space on that disk, or set HF_HOME to a folder on a bigger disk, and "
                                    "start again: the download continues where it stopped.")
    if isinstance(exc, HfHubHTTPError):
        return JobFailed(f"The Hugging Face Hub refused {repo_id}: {str(exc).splitlines()[0][:300]}",
                         "Try again later; if it persists, check the model's page: " + model_page(repo_id))
    return None


def download(repo_id: str, revision: str | None, report: Callable[[dict[str, Any]], None] | None = None,
             should_stop: Callable[[], bool] = lambda: False,
             log: Callable[[str], None] = lambda _m: None) -> Path | None:
    """Download into the cache (continuing any partial file); the snapshot folder, or None when stopped."""
    from engine.tasks import hub_download

    if offline():
        raise offline_failure(repo_id, "HF_HUB_OFFLINE is set")
    try:
        return hub_download.download(repo_id, revision, report, should_stop, log)
    except hub_download.Stopped:
        return None
    except Exception as exc:  # noqa: BLE001 - the Hub's and the disk's errors become messages with a fix
        failure = explain(exc, repo_id, revision)
        if failure is None:
            raise
        raise failure from exc


def ensure(repo_id: str, revision: str | None, report: Callable[[dict[str, Any]], None] | None = None,
           should_stop: Callable[[], bool] = lambda: False,
           log: Callable[[str], None] = lambda _m: None) -> Path | None:
    """The cached snapshot folder; downloaded first when it is not cached (None: stopped during the download)."""
    folder = cached_folder(repo_id, revision)
    if folder is not None:
        return folder
    log(f"{repo_id} is not cached yet: downloading it from {hub_endpoint()}")
    return download(repo_id, revision, report, should_stop, log)


def probe_issues(repo_id: str, revision: str | None) -> list[Issue]:
    """Before launch, for a model that is not cached: can it be downloaded? (model info and one file's headers)."""
    from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url

    if offline():
        failure = offline_failure(repo_id, "HF_HUB_OFFLINE is set")
        return [Issue(f"model.hub: {failure}", failure.hint)]
    try:
        info = HfApi().model_info(repo_id, revision=revision, timeout=PROBE_TIMEOUT_S)
        names = [s.rfilename for s in info.siblings or []]
        if "config.json" in names:  # a gated model's files answer 401/403; its info does not
            get_hf_file_metadata(hf_hub_url(repo_id, "config.json", revision=info.sha), timeout=PROBE_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - every Hub error is an issue with a fix
        failure = explain(exc, repo_id, revision)
        if failure is None:
            failure = JobFailed(f"Could not look up {repo_id} on the Hugging Face Hub: {type(exc).__name__}: {exc}",
                                "Try again; the fine-tune downloads the model when it starts.")
        return [Issue(f"model.hub: {failure}", failure.hint)]
    return []


def not_downloaded_issue(repo_id: str) -> Issue:
    return Issue(f"model.hub: {repo_id} is not downloaded yet, so it cannot be measured",
                 "The fine-tune downloads it as it starts; or download it now (Models page, "
                 f"`ember models download {repo_id}`) and look again.")


def resolve(repo_id: str, revision: str | None) -> tuple[Path | None, list[Issue]]:
    """(the cached snapshot folder, []) or (None, why it cannot be downloaded); (None, []) when it will be
    downloaded as the fine-tune starts."""
    folder = cached_folder(repo_id, revision)
    if folder is not None:
        return folder, []
    return None, probe_issues(repo_id, revision)


def ensure_for_spec(spec: Any, emit: Callable[..., None], should_stop: Callable[[], bool],
                    log: Callable[[str], None]) -> bool:
    """A fine-tune's first step: its ``model.hub`` cached, downloaded with progress events when not.
    False when the job was asked to stop during the download."""
    m = getattr(spec, "model", None)
    if m is None or not getattr(m, "hub", None):
        return True
    folder = ensure(m.hub, m.revision, lambda fields: emit("progress", **fields), should_stop, log)
    if folder is None:
        return False
    emit("hub_model", repo_id=m.hub, revision=m.revision or "main", commit=folder.name, path=str(folder))
    return True
