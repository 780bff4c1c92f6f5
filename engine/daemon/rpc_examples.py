"""The JSON-RPC 2.0 specification's example methods (its section 7), for conformance tests.

They exist only in an engine started with EMBER_RPC_EXAMPLES=1, so the specification's
examples can be sent byte for byte to a real engine (tests/engine/test_jsonrpc.py). They are
not in protocol.METHODS and never in a normal engine: their names are the specification's,
not Ember's (subtract, sum, ...).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from numbers import Real
from typing import Any

from engine.api.protocol import INVALID_PARAMS, RpcError

ENV = "EMBER_RPC_EXAMPLES"

Params = dict[str, Any] | list[Any]


def enabled() -> bool:
    return os.environ.get(ENV) == "1"


def _number(value: Any) -> float | int:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise RpcError(INVALID_PARAMS, f"{value!r} is not a number", {"hint": "Send numbers."})
    return value


def _numbers(params: Params) -> list[float | int]:
    if not isinstance(params, list):
        raise RpcError(INVALID_PARAMS, "Send the numbers as an array", {"hint": 'For example "params": [1, 2, 4].'})
    return [_number(v) for v in params]


def subtract(params: Params) -> float | int:
    """minuend - subtrahend, by position ([42, 23]) or by name ({"minuend": 42, "subtrahend": 23})."""
    if isinstance(params, list) and len(params) == 2:
        minuend, subtrahend = params
    elif isinstance(params, dict) and set(params) == {"minuend", "subtrahend"}:
        minuend, subtrahend = params["minuend"], params["subtrahend"]
    else:
        raise RpcError(INVALID_PARAMS, "subtract takes [minuend, subtrahend] or {minuend, subtrahend}")
    return _number(minuend) - _number(subtrahend)


def total(params: Params) -> float | int:
    return sum(_numbers(params))


def get_data(params: Params) -> list[Any]:
    return ["hello", 5]


def ignore(params: Params) -> None:
    """The specification only ever sends these as notifications: nothing to answer."""


METHODS: dict[str, Callable[[Params], Any]] = {
    "subtract": subtract,
    "sum": total,
    "notify_hello": ignore,
    "notify_sum": total,
    "get_data": get_data,
    "update": ignore,
}
