"""A remote host profile: how Ember reaches a machine over SSH and runs its recipes there.

Imports only pydantic: the GUI validates host forms with it. Passwords are never
part of a profile; a host that needs one is asked for it each time (the engine
keeps it in memory only, for reconnects while a run lasts).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

HOST_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
LOCAL = "local"  # the node name of this machine in a run's node list


class HostSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., min_length=1, max_length=80, pattern=HOST_NAME,
                      description="a short name for the host, used in run specs (distributed.nodes[].host)")
    address: str = Field(..., min_length=1, max_length=255, description="DNS name or IP address")
    port: int = Field(22, ge=1, le=65535)
    user: str = Field("", max_length=64, description="login name; empty means the same user as here")
    auth: Literal["key", "agent", "password"] = Field(
        "key", description="key: a private key file (key_path, or ~/.ssh/id_*); agent: the SSH agent; "
                           "password: asked each time, never stored")
    key_path: str = Field("", max_length=4096, description="private key file; empty tries ~/.ssh/id_ed25519, id_rsa, ...")
    python: str = Field("python3", min_length=1, max_length=4096,
                        description="the Python on the host that runs Ember (a venv's bin/python)")
    workdir: str = Field("~/ember", min_length=1, max_length=4096,
                         description="folder on the host for runs and uploads")
    role: Literal["training", "jetson"] = Field("training", description="training node, or a Jetson export target")

    @field_validator("name")
    @classmethod
    def _not_local(cls, value: str) -> str:
        if value == LOCAL:
            raise ValueError(f"{LOCAL!r} names this machine in a run's nodes; choose another name")
        return value

    @field_validator("address", "user")
    @classmethod
    def _no_spaces(cls, value: str) -> str:
        if any(c.isspace() for c in value) or value.startswith("-"):
            raise ValueError("must not contain spaces or start with '-'")
        return value
