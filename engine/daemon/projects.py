"""Projects: what groups jobs, data folders and hosts, and whom each is for (docs/security.md).

Every job belongs to one project (``jobs.start``'s ``project``, by default the user's first). An admin may
give a project data folders and hosts (``projects.set``): a file under a project's data folder is that
project's, and only that project's jobs, and looks by its members (``data.preview``, ``data.inspect``), may
read it; a host given to projects runs only their jobs and is listed only to their members. A folder or a
host that no project claims is everyone's, so the single-user engine needs no setup. Kept in the store's
settings (``projects``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.api.job_terms import EVALUATE, EXPORT, FINETUNE, PII_SCAN, PII_SCRUB, SERVE, SWEEP
from engine.api.protocol import FORBIDDEN, RpcError

SETTING = "projects"
TRAINING = (FINETUNE, SWEEP)


def all_projects(store: Any) -> dict[str, dict[str, list[str]]]:
    return dict(store.get_setting(SETTING) or {})


def _folder(text: str) -> str:
    return str(Path(text).expanduser().resolve())


def set_project(store: Any, name: str, data_folders: list[str], hosts: list[str],
                endpoints: list[str] | None = None) -> dict[str, Any]:
    """A project's data folders and hosts; ``endpoints`` (None: kept as they are) are the served models' URLs
    its members may chat with besides their own serve jobs (docs/security.md)."""
    projects = all_projects(store)
    kept = projects.get(name, {}).get("endpoints", []) if endpoints is None else sorted(set(endpoints))
    projects[name] = {"data_folders": sorted({_folder(f) for f in data_folders}), "hosts": sorted(set(hosts)),
                      "endpoints": kept}
    store.set_setting(SETTING, projects)
    return projects[name]


def remove_project(store: Any, name: str) -> None:
    projects = all_projects(store)
    projects.pop(name, None)
    store.set_setting(SETTING, projects)


def owner_of(projects: dict[str, dict[str, list[str]]], path: Path) -> str | None:
    """The project whose data folder holds ``path`` (the deepest such folder), or None: nobody's."""
    best: tuple[int, str] | None = None
    for name, project in projects.items():
        for folder in project.get("data_folders", []):
            if (Path(folder) == path or Path(folder) in path.parents) and (best is None or len(folder) > best[0]):
                best = (len(folder), name)
    return best[1] if best else None


def host_projects(projects: dict[str, dict[str, list[str]]], host: str) -> set[str]:
    """The projects a host is given to (empty: everyone's)."""
    return {name for name, project in projects.items() if host in project.get("hosts", [])}


def _resolved(paths: list[Any]) -> list[Path]:
    out = []
    for p in paths:
        if not p:
            continue
        try:
            out.append(Path(str(p)).expanduser().resolve())
        except (OSError, ValueError, RuntimeError):
            continue  # not a usable path: the job fails on it with its own message
    return out


def data_paths(kind: str, spec: Any) -> list[Path]:
    """The data files a job of ``kind`` reads (a validated spec): what a project's folders and the data
    policy apply to."""
    train = spec.base if kind == SWEEP else spec if kind == FINETUNE else None
    if train is not None:
        data = getattr(train, "data", None)
        if data is None or getattr(data, "builtin", None):
            return []
        return _resolved([data.path, data.val_path])
    if kind in (PII_SCAN, PII_SCRUB):
        return _resolved([spec.path])
    if kind in (EXPORT, EVALUATE):
        return _resolved([getattr(spec, "data", None)])
    return []


def spec_data_paths(spec: dict[str, Any]) -> list[Path]:
    """The data files of a raw fine-tune spec (``data.preview`` and ``data.inspect`` take one)."""
    data = spec.get("data") if isinstance(spec, dict) else None
    if not isinstance(data, dict):
        return []
    return _resolved([data.get("path"), data.get("val_path")])


def spec_hosts(kind: str, spec: Any) -> list[str]:
    """The hosts (Hosts page profiles) a job runs on or deploys to."""
    train = spec.base if kind == SWEEP else spec if kind == FINETUNE else None
    hosts: list[str] = []
    if train is not None:
        dist = train.distributed
        hosts += [n.host for n in (dist.nodes or [])]
        if dist.slurm is not None:
            hosts.append(dist.slurm.cluster)
    elif kind in (EXPORT, SERVE) and getattr(spec, "host", None):
        hosts.append(spec.host)
    return [h for h in hosts if h != "local"]


def check_data(projects: dict[str, dict[str, list[str]]], project: str, paths: list[Path]) -> None:
    """Refuse a job of ``project`` that reads another project's data."""
    for path in paths:
        owner = owner_of(projects, path)
        if owner is not None and owner != project:
            raise RpcError(FORBIDDEN, f"{path.name} is in a data folder of project {owner!r}; this job belongs to "
                           f"project {project!r}", {"path": str(path), "owner": owner, "project": project,
                                                    "hint": f"Start it in project {owner!r} (if you belong to it), "
                                                            "or ask an admin to give the data to your project "
                                                            "(ember projects set)."})


def check_hosts(projects: dict[str, dict[str, list[str]]], project: str, hosts: list[str]) -> None:
    """Refuse a job of ``project`` on a host given to other projects only."""
    for host in hosts:
        given = host_projects(projects, host)
        if given and project not in given:
            raise RpcError(FORBIDDEN, f"Host {host!r} belongs to project(s) {', '.join(sorted(given))}; this job "
                           f"belongs to project {project!r}",
                           {"host": host, "projects": sorted(given),
                            "hint": "Pick one of your project's hosts, or ask an admin to share this one "
                                    "(ember projects set)."})


def check_look(projects: dict[str, dict[str, list[str]]], user: Any, paths: list[Path]) -> None:
    """Refuse a user's look at data (preview, inspect) in a folder of a project they are not in."""
    if user.sees_all:
        return
    for path in paths:
        owner = owner_of(projects, path)
        if owner is not None and owner not in user.projects:
            # Not "it exists, but": a member of no such project learns nothing about what lies there.
            raise RpcError(FORBIDDEN, f"{user.name} may not read {path}",
                           {"hint": "Its folder belongs to a project you are not in; ask an admin."})


def visible_hosts(projects: dict[str, dict[str, list[str]]], user: Any, hosts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The host records a user may see: everyone's hosts and their projects' ones."""
    if user.sees_all:
        return hosts
    return [h for h in hosts if not (given := host_projects(projects, h["name"])) or given & set(user.projects)]
