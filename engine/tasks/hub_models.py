"""Models named by a Hugging Face Hub id (``model.hub``): found in the standard cache, or downloaded into it.

A cached model is used without any network request (``local_files_only``), so it works offline.
One that is not cached is downloaded by the fine-tune before it starts (engine/tasks/hub_download.py,
the same code as the ``model.download`` job); the checks before launch only ask the Hub whether it
can be downloaded. Every failure becomes a JobFailed (or an Issue) saying what to do:
gated and not granted, no such model or revision, offline, full disk. See docs/hub.md.

Datasets (``data.hub``, engine/tasks/hub_data.py) go through the same functions with
``repo_type="dataset"``: the same cache, downloader, progress and messages.
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


def model_page(repo_id: str, repo_type: str = "model") -> str:
    """The model's (or dataset's) page, where access to a gated repo is requested."""
    return f"{hub_endpoint()}/{'datasets/' if repo_type == 'dataset' else ''}{repo_id}"


def _noun(repo_type: str) -> str:
    return "dataset" if repo_type == "dataset" else "model"


def cache_dir() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def cached_folder(repo_id: str, revision: str | None, repo_type: str = "model") -> Path | None:
    """The complete cached snapshot of the repo at ``revision`` (default: main), found without the network."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, repo_type=repo_type, revision=revision, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):
        return None


def offline_failure(repo_id: str, why: str, repo_type: str = "model") -> JobFailed:
    instead = ("the dataset's files to this machine and set data.path to its training file" if repo_type == "dataset"
               else "the model folder to this machine and set model.path to it")
    return JobFailed(f"{repo_id} is not in the Hugging Face cache ({cache_dir()}) and the Hub cannot be reached "
                     f"({why})",
                     "Connect to the network and start again (the download continues where it stopped); or copy "
                     f"{instead}. Once a {_noun(repo_type)} is cached it is "
                     "used offline, and HF_HUB_OFFLINE=1 keeps every look-up on this machine.")


def explain(exc: BaseException, repo_id: str, revision: str | None, repo_type: str = "model") -> JobFailed | None:
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

    noun, page = _noun(repo_type), model_page(repo_id, repo_type)
    if isinstance(exc, JobFailed):
        return exc
    if isinstance(exc, GatedRepoError):
        status = exc.response.status_code if exc.response is not None else None
        why = ("no Hugging Face access token is saved on this machine" if status == 401
               else "the saved access token has not been granted access")
        return JobFailed(f"{repo_id} is a gated {noun} and {why}",
                         f"Request access on the {noun}'s page, {page}; once it is granted, save a "
                         "token that can read it (`ember hub login`, or Save token… on the Models page) and start "
                         "again.")
    if isinstance(exc, RevisionNotFoundError):
        return JobFailed(f"{repo_id} has no revision {revision!r}",
                         f"Use a branch, tag or commit of that {noun} (see its page, "
                         f"{page}), or leave revision empty for main.")
    if isinstance(exc, RepositoryNotFoundError):
        return JobFailed(f"No {noun} {repo_id} on the Hugging Face Hub ({hub_endpoint()})",
                         f"Check the id (owner/name, as on the {noun}'s page); a private {noun} needs a saved token "
                         "with access to it (`ember hub login`).")
    if isinstance(exc, OfflineModeIsEnabled):
        return offline_failure(repo_id, "HF_HUB_OFFLINE is set", repo_type)
    if isinstance(exc, (httpx2.TransportError, LocalEntryNotFoundError)):
        return offline_failure(repo_id, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}",
                               repo_type)
    full = disk_full(exc, cache_dir(), f"downloading {repo_id}")
    if full is not None:
        return JobFailed(str(full), "Free space on that disk, or set HF_HOME to a folder on a bigger disk, and "
                                    "start again: the download continues where it stopped.")
    if isinstance(exc, HfHubHTTPError):
        return JobFailed(f"The Hugging Face Hub refused {repo_id}: {str(exc).splitlines()[0][:300]}",
                         f"Try again later; if it persists, check the {noun}'s page: " + page)
    return None


def download(repo_id: str, revision: str | None, report: Callable[[dict[str, Any]], None] | None = None,
             should_stop: Callable[[], bool] = lambda: False,
             log: Callable[[str], None] = lambda _m: None, repo_type: str = "model") -> Path | None:
    """Download into the cache (continuing any partial file); the snapshot folder, or None when stopped."""
    from engine.tasks import hub_download

    if offline():
        raise offline_failure(repo_id, "HF_HUB_OFFLINE is set", repo_type)
    try:
        return hub_download.download(repo_id, revision, report, should_stop, log, repo_type)
    except hub_download.Stopped:
        return None
    except Exception as exc:  # noqa: BLE001 - the Hub's and the disk's errors become messages with a fix
        failure = explain(exc, repo_id, revision, repo_type)
        if failure is None:
            raise
        raise failure from exc


def ensure(repo_id: str, revision: str | None, report: Callable[[dict[str, Any]], None] | None = None,
           should_stop: Callable[[], bool] = lambda: False,
           log: Callable[[str], None] = lambda _m: None, repo_type: str = "model") -> Path | None:
    """The cached snapshot folder; downloaded first when it is not cached (None: stopped during the download)."""
    folder = cached_folder(repo_id, revision, repo_type)
    if folder is not None:
        return folder
    log(f"{repo_id} is not cached yet: downloading it from {hub_endpoint()}")
    return download(repo_id, revision, report, should_stop, log, repo_type)


def probe_issues(repo_id: str, revision: str | None, repo_type: str = "model") -> list[Issue]:
    """Before launch, for a repo that is not cached: can it be downloaded? (its info and one file's headers)."""
    from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url

    field = "data.hub" if repo_type == "dataset" else "model.hub"
    if offline():
        failure = offline_failure(repo_id, "HF_HUB_OFFLINE is set", repo_type)
        return [Issue(f"{field}: {failure}", failure.hint)]
    try:
        info = HfApi().repo_info(repo_id, repo_type=repo_type, revision=revision, timeout=PROBE_TIMEOUT_S)
        names = [s.rfilename for s in info.siblings or []]
        probe = "config.json" if repo_type == "model" else next((n for n in names if not n.startswith(".")), None)
        if probe in names:  # a gated repo's files answer 401/403; its info does not
            get_hf_file_metadata(hf_hub_url(repo_id, probe, repo_type=repo_type, revision=info.sha),
                                 timeout=PROBE_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - every Hub error is an issue with a fix
        failure = explain(exc, repo_id, revision, repo_type)
        if failure is None:
            failure = JobFailed(f"Could not look up {repo_id} on the Hugging Face Hub: {type(exc).__name__}: {exc}",
                                f"Try again; the fine-tune downloads the {_noun(repo_type)} when it starts.")
        return [Issue(f"{field}: {failure}", failure.hint)]
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
    """A fine-tune's first step: its ``model.hub`` and ``data.hub`` cached, downloaded with progress events
    when not. False when the job was asked to stop during a download."""
    for part, repo_type, event in (("model", "model", "hub_model"), ("data", "dataset", "hub_data")):
        m = getattr(spec, part, None)
        if m is None or not getattr(m, "hub", None):
            continue
        folder = ensure(m.hub, m.revision, lambda fields: emit("progress", **fields), should_stop, log, repo_type)
        if folder is None:
            return False
        emit(event, repo_id=m.hub, revision=m.revision or "main", commit=folder.name, path=str(folder))
    return True
