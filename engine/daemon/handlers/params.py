"""What every area's handlers share: the params base models and their validation."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.api.protocol import INVALID_PARAMS, RpcError


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NoParams(Params):
    pass


class JobId(Params):
    id: str = Field(min_length=1, max_length=100)


def parse(model: type[BaseModel], method: str, params: dict[str, Any]) -> Any:
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        fields = [{"field": ".".join(str(p) for p in e["loc"]) or "(params)", "message": e["msg"]}
                  for e in exc.errors()]
        raise RpcError(INVALID_PARAMS, f"Invalid params for {method}",
                       {"fields": fields, "hint": "See docs/protocol.md for this method's params."}) from None
