import pytest

from engine.api import protocol
from engine.api.protocol import RpcError


def test_encode_is_one_line_and_round_trips():
    msg = protocol.request(7, "jobs.start", {"kind": "system.probe", "spec": {"note": "a\nb ü"}})
    line = protocol.encode(msg)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert protocol.decode(line) == msg


def test_decode_rejects_garbage_with_a_hint():
    with pytest.raises(RpcError) as exc:
        protocol.decode(b"{not json\n")
    assert exc.value.code == protocol.PARSE_ERROR
    assert "one UTF-8 JSON object per line" in exc.value.hint


def test_decode_rejects_oversized_frame():
    with pytest.raises(RpcError) as exc:
        protocol.decode(b"[" + b"1," * protocol.MAX_FRAME_BYTES + b"1]\n")
    assert exc.value.code == protocol.FRAME_TOO_LARGE


@pytest.mark.parametrize(
    ("msg", "code"),
    [
        ([], protocol.INVALID_REQUEST),
        ({"jsonrpc": "1.0", "id": 1, "method": "ping"}, protocol.INVALID_REQUEST),
        ({"jsonrpc": "2.0", "id": 1}, protocol.INVALID_REQUEST),
        ({"jsonrpc": "2.0", "id": True, "method": "ping"}, protocol.INVALID_REQUEST),
        ({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": "bar"}, protocol.INVALID_REQUEST),
        ({"jsonrpc": "2.0", "id": [1], "method": "ping"}, protocol.INVALID_REQUEST),
    ],
)
def test_parse_request_rejects_invalid_requests(msg, code):
    with pytest.raises(RpcError) as exc:
        protocol.parse_request(msg)
    assert exc.value.code == code


def test_parse_request_accepts_missing_params():
    assert protocol.parse_request({"jsonrpc": "2.0", "id": "a", "method": "ping"}) == ("a", "ping", {})


def test_parse_request_accepts_positional_params_and_any_json_rpc_id():
    # Whether a method takes an array is the method's business (INVALID_PARAMS), not the request's.
    assert protocol.parse_request({"jsonrpc": "2.0", "id": 1.5, "method": "sum", "params": [1, 2]}) == \
        (1.5, "sum", [1, 2])
    assert protocol.parse_request({"jsonrpc": "2.0", "id": None, "method": "ping"}) == (None, "ping", {})


def test_standard_codes_carry_the_specifications_message_and_embers_beside_it():
    wire = protocol.error(3, RpcError(protocol.METHOD_NOT_FOUND, "Unknown method 'x'", {"hint": "h"}))
    assert wire == {"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found",
                                                "data": {"detail": "Unknown method 'x'", "hint": "h"}}, "id": 3}
    back = RpcError.from_json(wire["error"])
    assert (back.message, back.data) == ("Unknown method 'x'", {"hint": "h"})
    own = RpcError(protocol.NOT_FOUND, "No job 'r1'").to_json()  # Ember's own codes keep their message
    assert own == {"code": protocol.NOT_FOUND, "message": "No job 'r1'"}


def test_error_round_trip_keeps_hint_and_fields():
    err = RpcError(protocol.INVALID_PARAMS, "bad", {"hint": "fix it", "fields": [{"field": "x"}]})
    back = RpcError.from_json(protocol.error(1, err)["error"])
    assert (back.code, back.message, back.hint, back.data["fields"]) == (err.code, "bad", "fix it", [{"field": "x"}])
