"""A Slurm cluster in the fine-tune wizard: its partitions read from a real Slurm (tests/slurm.py) through
the engine, the spec the Slurm settings write, Review's line, Duplicate, the planner filled from a GPU
partition, and how Runs shows a run that waits in Slurm's queue."""

from __future__ import annotations

import pytest

from app.models.jobs import cluster_text, state_text
from app.pages.new_finetune.slurm_box import partition_text
from engine.api.train_spec import TrainSpec
from tests.app.conftest import wait_connected

pytestmark = [pytest.mark.timeout(240)]
REPLY_MS = 60_000


def test_slurm_settings_read_the_cluster_and_write_the_spec(qtbot, slurm, make_window):
    window = make_window(page="new_finetune")
    wait_connected(qtbot, window)
    page = window.page("new_finetune")
    hardware = page.training_step
    box = hardware.slurm_box
    page.go_to(4)
    assert not box.isVisible()
    hardware.where_combo.setCurrentIndex(hardware.where_combo.findData("slurm"))
    assert box.isVisible() and not hardware.multi_box.isVisible()
    assert hardware.nproc_label.text() == "Processes per node"

    box.read_button.click()
    qtbot.waitUntil(lambda: bool(box.partitions) or "Could not" in box.partition_note.text(), timeout=REPLY_MS)
    assert box.partitions, box.partition_note.text()
    assert box.partition_note.text() == "debug (default): 1 node(s) (1 idle), 2 CPUs, no GPUs each, up to 1 h"
    assert [box.partition_combo.itemText(i) for i in range(box.partition_combo.count())] == ["", "debug"]
    box.partition_combo.setCurrentText("nope")
    assert box.partition_note.text() == "The cluster has no such partition; it has debug."
    box.partition_combo.setCurrentText("debug")

    hardware.nproc_spin.setValue(2)
    hardware.strategy_combo.setCurrentIndex(hardware.strategy_combo.findData("ddp"))
    box.cpus_spin.setValue(2)
    box.time_spin.setValue(30)
    box.account_edit.setText("ml-team")
    spec = page.current_spec()
    assert spec["distributed"]["slurm"] == {"cluster": "local", "partition": "debug", "nodes": 1, "gpus_per_node": 0,
                                            "cpus_per_node": 2, "time_limit": 30, "account": "ml-team", "qos": ""}
    assert spec["distributed"]["nodes"] == []
    assert page.errors == {}
    launched = page.spec_for_launch()
    assert TrainSpec.model_validate(launched).world_size() == 2
    assert hardware.fit_note.isVisible() and "partition's GPUs" in hardware.fit_note.text()

    # A spec the engine refuses shows its reason next to the Slurm settings.
    hardware.device_combo.setCurrentIndex(hardware.device_combo.findData("cuda"))
    page.current_spec()
    qtbot.waitUntil(lambda: any("gpus_per_node" in " ".join(v) for v in page.errors.values()), timeout=5000)
    hardware.device_combo.setCurrentIndex(hardware.device_combo.findData("cpu"))

    page.go_to(5)
    assert "submits it to Slurm from this machine (sbatch)" in page.review_step.command_view.toPlainText()

    # Duplicate: the Slurm settings come back as they were.
    page.load_spec(launched, "dup-of-slurm")
    assert hardware.where_combo.currentData() == "slurm"
    assert box.value() == launched["distributed"]["slurm"]
    assert page.spec_for_launch() == launched

    # A GPU partition fills the planner's GPUs: nodes x GPUs per node, per machine.
    box.nodes_spin.setValue(2)
    hardware.planner.set_partition({"name": "gpu", "gpus_per_node": 8}, box.nodes_spin.value())
    assert (hardware.planner.gpus_spin.value(), hardware.planner.per_node_spin.value()) == (16, 8)


def test_runs_say_why_a_run_waits_in_slurm():
    cluster = {"job_id": "41", "state": "PENDING", "partition": "gpu", "reason": "Priority",
               "reason_text": "jobs of higher priority are ahead of it", "position": 3}
    job = {"state": "running", "cluster": cluster}
    assert state_text(job) == "pending in Slurm (#3)"
    assert cluster_text(cluster) == ("Slurm job 41 on partition gpu: pending, jobs of higher priority are ahead of "
                                     "it (number 3 in the partition's queue)")
    running = {**cluster, "state": "RUNNING", "reason_text": "", "position": None, "nodelist": "gpu[01-02]"}
    assert state_text({"state": "running", "cluster": running}) == "running"
    assert cluster_text(running) == "Slurm job 41 on partition gpu: running on gpu[01-02]"
    assert partition_text({"name": "gpu", "default": False, "up": False, "nodes": 4, "idle_nodes": 0,
                           "cpus_per_node": 64, "gpus_per_node": 8, "max_minutes": 90}) == \
        "gpu: 4 node(s) (0 idle), 64 CPUs and 8 GPUs each, up to 90 min — down"
