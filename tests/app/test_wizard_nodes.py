"""Several machines in the fine-tune wizard: the node editor, the spec it writes, the torchrun
lines on Review, Duplicate (load_spec), and each host's readiness from its real record.

The hosts are real: profiles added through the engine that reach a real OpenSSH server on
loopback (tests/sshd.py), trusted and probed over SSH. Nothing is launched here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt

from app.models.spec_tools import headless_commands, validate
from app.pages.new_finetune.nodes_editor import NodesEditor, host_readiness
from engine.api.train_spec import TrainSpec
from tests.app.conftest import wait_connected

pytestmark = [pytest.mark.timeout(300)]
REPLY_MS = 60_000  # a probe logs in over SSH and runs the host's Python: seconds on two busy cores
SYSTEM_PYTHON = "/usr/bin/python3"  # a Python without torch or Ember: its probe reports problems


def call(qtbot, client, method: str, params: dict[str, Any]) -> Any:
    """One request on the GUI's own client, waited for on the Qt event loop."""
    box: dict[str, Any] = {}
    client.request(method, params, lambda reply: box.setdefault("reply", reply),
                   lambda err: box.setdefault("error", err))
    qtbot.waitUntil(lambda: bool(box), timeout=REPLY_MS)
    assert "error" not in box, f"{method}: {box.get('error')}"
    return box["reply"]


def test_multi_node_commands_name_every_node_and_the_rendezvous():
    spec = {"task": "text_classification",
            "distributed": {"strategy": "ddp", "nodes": [{"host": "gpu-1", "nproc": 4}, {"host": "local", "nproc": 2}],
                            "rdzv_port": 29555}}
    lines = headless_commands("tickets run", spec).splitlines()
    assert lines[0] == "ember run tickets-run.yaml"
    torchrun = [line for line in lines if line.startswith("torchrun")]
    assert torchrun == [
        f"torchrun --nnodes 2 --nproc-per-node {k} --node-rank {i} --rdzv-backend c10d --rdzv-endpoint "
        f"{host}:29555 --rdzv-id tickets-run -m engine.recipes.finetune --config tickets-run.yaml"
        for i, (k, host) in enumerate([(4, "gpu-1"), (2, "gpu-1")])]
    # Each line follows a comment naming where it runs.
    assert "gpu-1" in lines[lines.index(torchrun[0]) - 1] and "rank 0" in lines[lines.index(torchrun[0]) - 1]
    assert "this machine" in lines[lines.index(torchrun[1]) - 1]
    # An explicit address, and the addresses of the Hosts page, win over the host's name.
    spec["distributed"]["rdzv_host"] = "10.0.0.5"
    assert "--rdzv-endpoint 10.0.0.5:29555" in headless_commands("r", spec)
    del spec["distributed"]["rdzv_host"]
    assert "--rdzv-endpoint 10.1.2.3:29555" in headless_commands("r", spec, {"gpu-1": "10.1.2.3"})
    # One process on one machine: no torchrun at all.
    assert "torchrun" not in headless_commands("r", {"distributed": {"nproc": 1}})
    # A strategy of "single" over several processes in all is named next to the strategy field.
    _normal, errors = validate({"distributed": {"nodes": [{"host": "local", "nproc": 1}, {"host": "a", "nproc": 1}]}})
    assert list(errors) == ["distributed.strategy"]


def test_node_editor_offers_training_hosts_and_says_which_are_not_ready(qtbot):
    editor = NodesEditor()
    qtbot.addWidget(editor)
    editor.set_nodes([{"host": "gone", "nproc": 2}, {"host": "local", "nproc": 1}])
    assert editor.nodes() == [{"host": "gone", "nproc": 2}, {"host": "local", "nproc": 1}]
    assert editor.rows[0].rank_label.text() == "Node 0: rank 0 / rendezvous"
    assert editor.rows[0].readiness.text() == ""  # the host list has not arrived: nothing to say yet

    problem = {"message": "torch is not installed in /usr/bin/python3", "hint": "Prepare the host"}
    editor.set_hosts([
        {"name": "ready-one", "role": "training", "facts": {"ready": True, "gpus": [{"name": "H200"}], "problems": []}},
        {"name": "broken", "role": "training", "facts": {"ready": False, "problems": [problem]}},
        {"name": "fresh", "role": "training", "facts": None},
        {"name": "orin", "role": "jetson", "facts": None},  # an export target, not a training node
    ])
    combo = editor.rows[1].host_combo
    assert [combo.itemData(i) for i in range(combo.count())] == ["local", "ready-one", "broken", "fresh"]
    assert "not on the Hosts page" in editor.rows[0].readiness.text()  # the spec's host was removed
    assert editor.nodes()[0] == {"host": "gone", "nproc": 2}  # but the spec still says what it said

    added = editor.add_node()
    assert added.host() == "ready-one"  # the first host no row uses yet
    assert added.readiness.text().startswith("✓ ready")
    with qtbot.waitSignal(editor.changed):
        added.host_combo.setCurrentIndex(added.host_combo.findData("broken"))
    assert added.readiness.text() == f"⚠ {problem['message']}"
    assert added.readiness.property("role") == "error"
    added.host_combo.setCurrentIndex(added.host_combo.findData("fresh"))
    assert "not probed yet" in added.readiness.text()
    assert editor.total_processes() == 4 and editor.largest_node() == 2

    with qtbot.waitSignal(editor.changed):
        editor.remove_node(editor.rows[0])
    assert [n["host"] for n in editor.nodes()] == ["local", "fresh"]
    assert editor.rows[0].rank_label.text() == "Node 0: rank 0 / rendezvous"
    assert host_readiness("local", None, True) == ("", "muted")  # the engine's own machine: nothing to probe


def test_several_machines_spec_review_duplicate_and_host_readiness(qtbot, make_window, sshd):
    window = make_window(page="new_finetune")
    wait_connected(qtbot, window)
    page = window.page("new_finetune")
    client = window.engine.client
    hardware = page.training_step
    editor = hardware.nodes_editor
    page.go_to(4)

    # No hosts yet: Several machines says where to add one.
    qtbot.waitUntil(lambda: editor.listed, timeout=REPLY_MS)
    hardware.where_combo.setCurrentIndex(hardware.where_combo.findData("nodes"))
    assert hardware.no_hosts_box.isVisible()
    assert editor.nodes() == [{"host": "local", "nproc": 1}]
    with qtbot.waitSignal(hardware.hosts_page_requested):
        qtbot.mouseClick(hardware.hosts_page_button, Qt.MouseButton.LeftButton)
    assert window.stack.currentWidget() is window.page("hosts")
    window.show_page("new_finetune")
    assert hardware.isVisible()

    # Two hosts added elsewhere (the Hosts page): the wizard's list follows the "hosts" events.
    assert Path(SYSTEM_PYTHON).is_file()
    for name, python in (("node-a", sys.executable), ("node-b", SYSTEM_PYTHON)):
        call(qtbot, client, "hosts.add", {"host": sshd.host(name, python=python)})
    qtbot.waitUntil(lambda: editor.host_names() == ["node-a", "node-b"], timeout=REPLY_MS)
    assert editor.addresses() == {"node-a": "127.0.0.1", "node-b": "127.0.0.1"}
    assert not hardware.no_hosts_box.isVisible()

    # node-a is node 0 with two processes, node-b node 1 with one.
    editor.rows[0].host_combo.setCurrentIndex(editor.rows[0].host_combo.findData("node-a"))
    editor.rows[0].nproc_spin.setValue(2)
    qtbot.mouseClick(editor.add_button, Qt.MouseButton.LeftButton)
    row_b = editor.rows[1]
    assert row_b.host() == "node-b"  # the first host no row uses yet
    assert "not probed yet" in row_b.readiness.text()
    hardware.rdzv_port_spin.setValue(29555)
    hardware.sync_check.setChecked(False)
    assert hardware.strategy_combo.currentData() == "ddp"  # three processes in all need a strategy
    spec = page.current_spec()
    assert spec["distributed"]["nodes"] == [{"host": "node-a", "nproc": 2}, {"host": "node-b", "nproc": 1}]
    assert (spec["distributed"]["rdzv_port"], spec["distributed"]["sync_data"]) == (29555, False)
    assert spec["distributed"]["rdzv_host"] is None
    assert page.errors == {}
    launched = page.spec_for_launch()
    assert TrainSpec.model_validate(launched).world_size() == 3
    assert hardware.estimate_spec()["distributed"]["nproc"] == 2  # the fit is one node's: the largest
    assert hardware.fit_note.isVisible() and "2 process(es)" in hardware.fit_note.text()

    # Review: ember run, and one torchrun line per node after a comment naming its host.
    page.go_to(5)
    command = page.review_step.command_view.toPlainText().splitlines()
    torchrun = [line for line in command if line.startswith("torchrun")]
    assert len(torchrun) == 2
    for rank, (host, nproc) in enumerate((("node-a", 2), ("node-b", 1))):
        line = torchrun[rank]
        assert f"--nnodes 2 --nproc-per-node {nproc} --node-rank {rank} --rdzv-backend c10d" in line
        assert ":29555 --rdzv-id " in line and "-m engine.recipes.finetune --config " in line
        assert host in command[command.index(line) - 1]

    # Duplicate: the spec goes back into the editor unchanged.
    page.load_spec(launched, "dup-of-nodes")
    assert hardware.where_combo.currentData() == "nodes"
    assert editor.nodes() == spec["distributed"]["nodes"]
    assert not hardware.sync_check.isChecked() and hardware.rdzv_port_spin.value() == 29555
    assert page.spec_for_launch() == launched

    # A probed host shows its own first problem next to its row (node-b's Python has no torch).
    call(qtbot, client, "hosts.trust", {"name": "node-b", "fingerprint": sshd.fingerprint})
    record = call(qtbot, client, "hosts.probe", {"name": "node-b"})
    problems = (record.get("facts") or {}).get("problems") or []
    assert problems and not record["facts"]["ready"]
    row_b = editor.rows[1]
    qtbot.waitUntil(lambda: problems[0]["message"] in row_b.readiness.text(), timeout=REPLY_MS)
    assert row_b.readiness.property("role") == "error"

    # Removed on the Hosts page: the row says so, and the spec still names it.
    call(qtbot, client, "hosts.remove", {"name": "node-b"})
    qtbot.waitUntil(lambda: "not on the Hosts page" in row_b.readiness.text(), timeout=REPLY_MS)
    assert editor.nodes()[1] == {"host": "node-b", "nproc": 1}

    # Back to this machine: no nodes in the spec, and no torchrun lines.
    page.go_to(4)
    hardware.where_combo.setCurrentIndex(hardware.where_combo.findData("local"))
    assert page.current_spec()["distributed"]["nodes"] == []
    assert "--nnodes" not in page.review_step.command_view.toPlainText()
