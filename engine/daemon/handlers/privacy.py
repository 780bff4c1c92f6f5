"""The data policy's requests: pii.policy, pii.set_policy (engine/daemon/data_policy.py enforces it)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator, model_validator

from engine.daemon import data_policy
from engine.daemon.handlers.params import NoParams, Params

if TYPE_CHECKING:
    from engine.daemon.interfaces import Client, EngineView


class SetPolicy(Params):
    folder: str | None = Field(None, min_length=1, max_length=4096, description="a folder, or / for every file")
    project: str | None = Field(None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
                                description="or a project: every data file of its jobs")
    max_findings: int | None = Field(None, ge=0, le=1_000_000_000,
                                     description="findings allowed before scrubbing is required; None = a scan is enough")
    clear: bool = Field(False, description="remove this folder's rule instead")

    @field_validator("folder")
    @classmethod
    def _absolute(cls, v: str | None) -> str | None:
        if v is not None and ("\x00" in v or not (v.startswith("~") or Path(v).is_absolute())):
            raise ValueError("an absolute folder path (or / for every file)")
        return v

    @model_validator(mode="after")
    def _one(self) -> SetPolicy:
        if (self.folder is None) == (self.project is None):
            raise ValueError("give a folder or a project (one of them)")
        return self


class PrivacyHandlers:
    def __init__(self, eng: EngineView):
        self.engine = eng

    def table(self) -> dict[str, tuple[type[Params], Any]]:
        return {"pii.policy": (NoParams, self.policy), "pii.set_policy": (SetPolicy, self.set_policy)}

    async def policy(self, _s: Client, _p: NoParams) -> Any:
        return {"rules": data_policy.rules(self.engine.store)}

    async def set_policy(self, _s: Client, p: SetPolicy) -> Any:
        store = self.engine.store
        rules = data_policy.clear_rule(store, p.folder, p.project) if p.clear else \
            data_policy.set_rule(store, p.folder, p.max_findings, p.project)
        return {"rules": rules}
