"""Saved Playground chats (chats.*): kept in the engine's store, replaced by id, listed newest first,
still there after the engine restarts, deleted with an audit record; bad requests say what to do."""

from __future__ import annotations

import pytest

from engine.api.protocol import INVALID_PARAMS, RpcError

TINY = {"builtin": "tiny-llama"}


def _side(*turns: str, model=TINY, title="tiny-llama") -> dict:
    roles = ("user", "assistant")
    return {"model": model, "title": title,
            "messages": [{"role": roles[i % 2], "content": t} for i, t in enumerate(turns)],
            "figures": [{"new_tokens": 3, "tokens_per_s": 12.5, "ttft_s": 0.02, "seconds": 0.3, "stopped": "eos"}
                        for _ in turns[1::2]]}


def test_chats_are_saved_replaced_listed_kept_across_a_restart_and_deleted(engine_proc):
    with engine_proc.client() as c:
        assert c.call("chats.list") == {"chats": [], "total": 0}
        first = c.call("chats.save", sides=[_side("What is the capital of France?", "Paris.")],
                       settings={"system": "Be brief.", "temperature": 0})
        assert first["id"].startswith("chat-") and first["title"] == "What is the capital of France?"
        other = c.call("chats.save", id="chat-mine", title="Two models",
                       sides=[_side("Hi", "Hello"), _side("Hi", "Hey", model={"run": "r1"}, title="my run")])
        assert other["id"] == "chat-mine" and other["updated_at"] >= first["updated_at"]
        # The first chat goes on: saved again under its id, it replaces itself and comes first.
        again = c.call("chats.save", id=first["id"],
                       sides=[_side("What is the capital of France?", "Paris.", "And of Italy?", "Rome.")],
                       settings={"system": "Be brief.", "temperature": 0})
        assert again["updated_at"] >= other["updated_at"]
        listed = c.call("chats.list")
        assert listed["total"] == 2
        assert [(r["id"], r["questions"], r["models"]) for r in listed["chats"]] == [
            (first["id"], 2, ["tiny-llama"]), ("chat-mine", 1, ["tiny-llama", "my run"])]
        assert c.call("chats.list", limit=1, offset=1)["chats"][0]["id"] == "chat-mine"

        with pytest.raises(RpcError) as err:
            c.call("chats.save", sides=[_side("a")] * 3)
        assert err.value.code == INVALID_PARAMS and err.value.data["fields"][0]["field"] == "sides"
        with pytest.raises(RpcError) as err:
            c.call("chats.save", sides=[{"model": {}, "messages": []}])
        assert "name exactly one model" in str(err.value.data["fields"])
        for method in ("chats.get", "chats.delete"):
            with pytest.raises(RpcError) as err:
                c.call(method, id="chat-nope")
            assert "No saved chat 'chat-nope'" in err.value.message and "ember chats" in err.value.hint

    engine_proc.stop()
    engine_proc.restart()
    with engine_proc.client() as c:
        got = c.call("chats.get", id=first["id"])
        conversation = got["conversation"]
        assert conversation["id"] == first["id"] and conversation["settings"]["system"] == "Be brief."
        assert [m["content"] for m in conversation["sides"][0]["messages"]] == [
            "What is the capital of France?", "Paris.", "And of Italy?", "Rome."]
        assert conversation["sides"][0]["figures"][1]["tokens_per_s"] == 12.5
        assert c.call("chats.delete", id="chat-mine") == {"ok": True}
        assert [r["id"] for r in c.call("chats.list")["chats"]] == [first["id"]]
        (record,) = c.call("audit.list", action="chats.delete", ok=True)["records"]
        assert record["target"] == "chat-mine"  # the refused delete of chat-nope is on record too, as failed
