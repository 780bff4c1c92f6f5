import asyncio
import json

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


def strict_loads(data: bytes):
    """json.loads that refuses NaN and Infinity, as a strict JSON parser in another language would."""
    def refuse(name):
        raise ValueError(f"{name} is not JSON")
    return json.loads(data.decode("utf-8"), parse_constant=refuse)


@pytest.mark.parametrize("line", [
    b"[" * 1100 + b"]" * 1100,  # json.loads alone raises RecursionError
    b"[" * (protocol.MAX_DEPTH + 1) + b"]" * (protocol.MAX_DEPTH + 1),
    b'{"a":' * 70 + b"1" + b"}" * 70,
    b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}',  # a lone surrogate, escaped
    b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"\\udfff":1}}',  # in a key
    b'{"jsonrpc":"2.0","id":"\xed\xa0\x80","method":"ping"}',  # a surrogate written as (invalid) UTF-8
    b'{"jsonrpc":"2.0","id":1,"method":"p\xffing"}',
    b'{"jsonrpc":"2.0","id":NaN,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":-Infinity,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"ping"}',  # over Python's int digit limit
    '{"jsonrpc":"2.0","id":1,"method":"ping"}'.encode("utf-16"),
])
def test_decode_turns_every_hostile_frame_into_a_parse_error(line):
    with pytest.raises(RpcError) as exc:
        protocol.decode(line)
    assert exc.value.code == protocol.PARSE_ERROR and exc.value.hint


def test_decode_keeps_what_is_valid():
    assert protocol.decode(b"[" * protocol.MAX_DEPTH + b"]" * protocol.MAX_DEPTH)
    assert protocol.decode(b'{"a":"\\ud83d\\ude00 \\u00fc","b":"[[[[' + b"[" * 100 + b'"}') == \
        {"a": "\U0001f600 ü", "b": "[[[[" + "[" * 100}  # a pair is a character; brackets in strings are text


@pytest.mark.parametrize("req_id", [float("inf"), float("-inf"), float("nan"), "\ud800", "a\udfffb", True, [1], {}])
def test_ids_that_cannot_be_echoed_are_invalid(req_id):
    with pytest.raises(RpcError) as exc:
        protocol.parse_request({"jsonrpc": "2.0", "id": req_id, "method": "ping"})
    assert exc.value.code == protocol.INVALID_REQUEST
    assert protocol.request_id({"id": req_id}) is None


def test_a_non_string_method_is_an_invalid_request():
    for method in ({}, [], 1, None, ""):
        with pytest.raises(RpcError) as exc:
            protocol.parse_request({"jsonrpc": "2.0", "id": 1, "method": method})
        assert exc.value.code == protocol.INVALID_REQUEST


def test_encode_writes_only_strict_json_in_valid_utf8():
    line = protocol.encode(protocol.result(1, {"loss": float("nan"), "hi": [float("inf"), -float("inf"), 0.5],
                                               "text": "bad \ud800 surrogate", float("nan"): 1}))
    assert strict_loads(line) == {"jsonrpc": "2.0", "id": 1, "result": {
        "loss": None, "hi": [None, None, 0.5], "text": "bad \ufffd surrogate", "nan": 1}}
    assert protocol.encode({"a": 1.5}) == b'{"a":1.5}\n'  # the common case as before


def test_strict_json_text_leaves_strict_text_alone_and_fixes_the_rest():
    same = '{"loss":0.5,"note":"finite"}'
    assert protocol.strict_json_text(same) is same
    assert json.loads(protocol.strict_json_text('{"loss":NaN,"g":[Infinity,-Infinity],"s":"\\udc00"}')) == \
        {"loss": None, "g": [None, None], "s": "\ufffd"}
    assert protocol.strict_json_text('{"broken": NaN') == '{"broken": NaN'  # not JSON: left to the caller


def test_events_are_stored_and_sent_as_strict_json(tmp_path):
    """A job's events.jsonl may hold NaN (Python's json writes it) or a lone surrogate: the store and the
    subscribers get strict JSON all the same, and a stored NaN from an older engine is fixed on replay."""
    from engine.daemon.eventbus import EventBus
    from engine.daemon.store import Store

    store = Store(tmp_path / "ember.db")
    sent: list[bytes] = []

    async def scenario():
        bus = EventBus(store)
        bus.subscribe(["run/*"], sent.append, None)
        bus.publish_json("run/r1/train", '{"kind":"train","loss":NaN,"lr":Infinity,"note":"\\udc80"}', t=float("nan"))
        bus.publish("run/r1/eval", {"kind": "eval", "metrics": {"loss": float("-inf")}}, t=True)
        bus.flush()
        store.commit_events([(bus.last_seq + 1, "run/r1/old", 1.0, "r1", '{"loss":NaN}')], {})
        bus.last_seq += 1
        replayed: list[bytes] = []
        sub, upto = bus.subscribe(["run/*"], replayed.append, 0)

        async def drain():
            return None

        await bus.replay(sub, 0, upto, drain)
        return replayed

    replayed = asyncio.run(scenario())
    live = [strict_loads(line) for chunk in sent for line in chunk.splitlines()]
    assert [e["params"]["data"] for e in live] == [
        {"kind": "train", "loss": None, "lr": None, "note": "\ufffd"}, {"kind": "eval", "metrics": {"loss": None}}]
    assert all(e["params"]["t"] > 1e9 for e in live)  # a time that is no number is the time of publishing
    assert [json.loads(r[3]) for r in store.query_events(["run/*"], 0)][:2] == [e["params"]["data"] for e in live]
    old = [strict_loads(line) for chunk in replayed for line in chunk.splitlines()][-1]
    assert old["params"]["data"] == {"loss": None}
