"""The Variants view on canned compress.variants replies: table, Pareto front, limits, per class, exports.

The evaluation documents follow docs/compression.md and are written by hand with
figures like the real MiniLM ticket classifier's (a parent, dynamic int8, a
30% pruned model and static int8). A FakeEngineClient answers; the real engine
is exercised by the end-to-end test written elsewhere.
"""

from __future__ import annotations

import copy
import csv
import time
from typing import Any

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage

from app.models.variants import build_rows, pareto_front, recommend
from app.pages.compare.variants.table import COLUMN
from engine.api.protocol import METHOD_NOT_FOUND, RpcError
from tests.app.test_compress_wizard import LORA, fake_engine, settle

LABELS = ["billing", "bug", "login"]
PARENT_ID = LORA["id"]
MB = 1_000_000


def entry(run_id: str, label: str, accuracy: float, f1: list[float], confusion: list[list[int]],
          b1: float, bn: float, size: int, params: int, peak: int) -> dict[str, Any]:
    return {
        "run_id": run_id, "label": label, "runtime": "onnxruntime-cpu",
        "metrics": {"accuracy": accuracy, "macro_f1": round(sum(f1) / len(f1), 4), "loss": 0.3,
                    "per_class": [{"label": name, "precision": f, "recall": f, "f1": f, "support": sum(row)}
                                  for name, f, row in zip(LABELS, f1, confusion, strict=True)],
                    "confusion": confusion, "labels": LABELS},
        "latency_ms": {"b1": {"batch": 1, "p50": b1, "p95": b1 * 1.3, "mean": b1 * 1.05},
                       "bN": {"batch": 16, "p50": bn, "p95": bn * 1.2, "mean": bn * 1.04}},
        "throughput_per_s": 16 / bn * 1000, "size_bytes": size, "params": params, "macs": 1_200_000_000,
        "peak_memory_bytes": peak,
    }


PARENT_CONFUSION = [[64, 2, 1], [3, 62, 2], [2, 2, 62]]  # 188 of 200 right (accuracy 0.94 nominal)


def parent_entry(b1: float, bn: float) -> dict[str, Any]:
    """The parent as one variant's job measured it: same accuracy, its own timings."""
    return entry(PARENT_ID, "parent", 0.91, [0.93, 0.91, 0.90], PARENT_CONFUSION, b1, bn, 90_900_000,
                 22_700_000, 120 * MB)


def doc(variant: dict[str, Any], parent: dict[str, Any], agreement: float) -> dict[str, Any]:
    return {"version": 1, "task": "text_classification", "samples": 200,
            "settings": {"threads": 2, "warmup": 3, "repeats": 20, "batch_sizes": [1, 16],
                         "runtime": "onnxruntime-cpu", "seq_len": 48},
            "parent": parent, "variant": variant, "agreement": agreement,
            "delta": {"accuracy": round(variant["metrics"]["accuracy"] - parent["metrics"]["accuracy"], 4),
                      "latency_ratio": round(variant["latency_ms"]["bN"]["p50"] / parent["latency_ms"]["bN"]["p50"], 3),
                      "size_ratio": round(variant["size_bytes"] / parent["size_bytes"], 3)}}


def job(run_id: str, kind: str, name: str, spec: dict[str, Any], state: str = "succeeded") -> dict[str, Any]:
    now = time.time()
    return {"id": run_id, "kind": kind, "name": name, "state": state, "created_at": now - 200,
            "started_at": now - 190, "ended_at": now - 10 if state == "succeeded" else None,
            "pid": None, "exit_code": 0 if state == "succeeded" else None, "error": None,
            "run_dir": f"/tmp/ember/runs/{run_id}", "spec": {"source_run": PARENT_ID, **spec},
            "parent_id": PARENT_ID, "host": None, "summary": {}}


DYNAMIC = {"job": job("r-dyn", "compress.quantize", "tickets-lora-r8-int8-dynamic", {"mode": "dynamic"}),
           "evaluation": doc(entry("r-dyn", "int8 dynamic", 0.905, [0.93, 0.90, 0.89],
                                   [[64, 2, 1], [4, 61, 2], [2, 2, 62]], 1.6, 9.0, 23_000_000, 22_700_000,
                                   60 * MB),
                             parent_entry(3.0, 20.0), 0.985)}
PRUNED = {"job": job("r-prune", "compress.prune", "tickets-lora-r8-pruned-30pct",
                     {"target": "params", "ratio": 0.3}),
          "evaluation": doc(entry("r-prune", "pruned 30% params", 0.87, [0.90, 0.86, 0.85],
                                  [[62, 3, 2], [5, 58, 4], [3, 4, 59]], 2.2, 14.0, 64_000_000, 15_900_000,
                                  90 * MB),
                            parent_entry(3.2, 21.5), 0.93)}
STATIC = {"job": job("r-static", "compress.quantize", "tickets-lora-r8-int8-static",
                     {"mode": "static", "target": "cpu", "calibration": {"samples": 64, "method": "entropy"}}),
          "evaluation": doc(entry("r-static", "int8 static", 0.88, [0.91, 0.87, 0.86],
                                  [[63, 3, 1], [5, 59, 3], [3, 3, 60]], 1.2, 7.5, 22_800_000, 22_700_000,
                                  55 * MB),
                            parent_entry(3.1, 21.0), 0.95)}


def variants_reply(*variants: dict[str, Any]) -> dict[str, Any]:
    return {"parent": copy.deepcopy(LORA), "parent_evaluation": parent_entry(3.1, 21.0),
            "variants": [copy.deepcopy(v) for v in variants]}


@pytest.fixture
def view(qtbot):
    from app.pages.compare.variants import VariantsView

    state = {"reply": variants_reply(DYNAMIC, PRUNED, STATIC)}
    engine = fake_engine({"compress.variants": lambda p: copy.deepcopy(state["reply"]),
                          "jobs.list": {"jobs": [copy.deepcopy(LORA)]}})
    widget = VariantsView(engine)
    widget.state = state  # the reply the fake engine gives; tests change it
    qtbot.addWidget(widget)
    widget.resize(1150, 900)
    widget.show()
    widget.show_parent(PARENT_ID)
    settle(qtbot, engine.client)
    yield widget
    settle(qtbot, engine.client)


def texts(view, column: str) -> list[str]:
    col = COLUMN[column]
    return [view.proxy.index(r, col).data() for r in range(view.proxy.rowCount())]


def ids_in_order(view) -> list[str]:
    return [view.proxy.index(r, 0).data(Qt.ItemDataRole.UserRole) for r in range(view.proxy.rowCount())]


def test_table_shows_each_variant_against_its_own_parent(view):
    assert view._client.sent("compress.variants") == [{"id": PARENT_ID}]
    assert ids_in_order(view) == [PARENT_ID, "r-dyn", "r-prune", "r-static"]
    assert texts(view, "technique") == ["◆ parent", "◆ int8 dynamic", "pruned 30% params", "◆ int8 static (CPU form)"]
    assert texts(view, "metric") == ["0.9100", "0.9050", "0.8700", "0.8800"]
    assert texts(view, "delta") == ["—", "-0.50 pts", "-4.00 pts", "-3.00 pts"]
    assert texts(view, "agreement") == ["—", "98.5%", "93.0%", "95.0%"]
    assert texts(view, "b1") == ["3.10", "1.60", "2.20", "1.20"]
    assert texts(view, "bn") == ["21.00", "9.00", "14.00", "7.50"]
    # Speed-up and compression against the parent measured in the same job, not the parent row:
    # dynamic's own parent ran batch 16 in 20.0 ms (the parent row says 21.0).
    assert texts(view, "speedup") == ["1.00×", "2.22×", "1.54×", "2.80×"]
    assert texts(view, "compression") == ["1.00×", "3.95×", "1.42×", "3.99×"]
    assert texts(view, "size") == ["86.7 MiB", "21.9 MiB", "61.0 MiB", "21.7 MiB"]
    assert texts(view, "params") == ["22.7M", "22.7M", "15.9M", "22.7M"]
    assert texts(view, "peak") == ["114.4 MiB", "57.2 MiB", "85.8 MiB", "52.5 MiB"]
    header = view.model.headerData(COLUMN["bn"], Qt.Orientation.Horizontal)
    assert header == "p50 b16 (ms)"
    tip = view.proxy.index(1, COLUMN["speedup"]).data(Qt.ItemDataRole.ToolTipRole)
    assert "own job" in tip
    assert view.status.text() == "3 variants: 3 succeeded"


def test_sorting_by_value_with_unmeasured_rows_last(view, qtbot):
    running = {"job": job("r-qat", "compress.qat", "tickets-lora-r8-qat-int8", {"steps": 50, "target": "cpu"}, "running"),
               "evaluation": None}
    view.state["reply"] = variants_reply(DYNAMIC, PRUNED, STATIC, running)
    view.refresh()
    settle(qtbot, view._client)
    assert texts(view, "metric")[-1] == "—" and texts(view, "state")[-1] == "running"

    view.table.sortByColumn(COLUMN["b1"], Qt.SortOrder.AscendingOrder)
    assert ids_in_order(view) == ["r-static", "r-dyn", "r-prune", PARENT_ID, "r-qat"]
    view.table.sortByColumn(COLUMN["b1"], Qt.SortOrder.DescendingOrder)
    assert ids_in_order(view) == [PARENT_ID, "r-prune", "r-dyn", "r-static", "r-qat"]
    view.table.sortByColumn(COLUMN["metric"], Qt.SortOrder.DescendingOrder)
    assert ids_in_order(view) == [PARENT_ID, "r-dyn", "r-static", "r-prune", "r-qat"]
    view.table.sortByColumn(COLUMN["size"], Qt.SortOrder.AscendingOrder)
    assert ids_in_order(view) == ["r-static", "r-dyn", "r-prune", PARENT_ID, "r-qat"]


def test_pareto_front_leaves_out_the_dominated_variant(view):
    # Pruned (2.2 ms, 0.87) is slower and less accurate than static int8 (1.2 ms, 0.88).
    assert view.front() == ["r-static", "r-dyn", PARENT_ID]
    assert "r-prune" not in view.front()
    points = {p[0]: p for p in view.scatter.points()}
    assert set(points) == {PARENT_ID, "r-dyn", "r-prune", "r-static"}
    assert points["r-static"][1:3] == (1.2, 0.88)
    assert points[PARENT_ID][3] > points["r-prune"][3] > points["r-dyn"][3]  # marker size follows the file
    assert view.scatter.front_xy == [(1.2, 0.88), (1.6, 0.905), (3.1, 0.91)]

    # At batch N the order is the same here; the front is recomputed for the basis chosen.
    view.set_limits(None, None, basis="bN")
    assert view.front() == ["r-static", "r-dyn", PARENT_ID]
    assert view.scatter.plot.getPlotItem().getAxis("bottom").labelText == "latency p50 at batch N (ms)"


def test_pareto_front_on_plain_rows_and_perplexity():
    rows = build_rows(variants_reply(DYNAMIC, PRUNED, STATIC))
    # A variant as fast as another and exactly as good is not dominated by it; a worse twin is.
    twin = copy.deepcopy(STATIC)
    twin["job"].update(id="r-twin", name="twin")
    twin["evaluation"]["variant"]["metrics"]["accuracy"] = 0.87
    rows = build_rows(variants_reply(DYNAMIC, PRUNED, STATIC, twin))
    assert pareto_front(rows, "b1") == ["r-static", "r-dyn", PARENT_ID]

    # A causal LM: lower perplexity is better, and a rise is the "drop".
    lm = variants_reply(DYNAMIC, STATIC)
    lm["parent"]["summary"]["task"] = "causal_lm"
    lm["parent_evaluation"]["metrics"] = {"perplexity": 12.0, "loss": 2.48}
    for v, ppl in zip(lm["variants"], (12.4, 11.9), strict=True):
        v["evaluation"]["task"] = "causal_lm"
        v["evaluation"]["parent"]["metrics"] = {"perplexity": 12.0, "loss": 2.48}
        v["evaluation"]["variant"]["metrics"] = {"perplexity": ppl, "loss": 2.5}
    parent, dyn, static = build_rows(lm)
    assert (dyn.metric_name, dyn.higher_is_better) == ("perplexity", False)
    assert dyn.drop() == pytest.approx(0.4) and static.drop() == pytest.approx(-0.1)
    # static is faster and has lower perplexity than both: it alone is on the front.
    assert pareto_front([parent, dyn, static], "b1") == ["r-static"]
    best, text = recommend([parent, dyn, static], None, 0.2)
    assert best is static and "int8 static (CPU form)" in text


def test_constraint_box_recommends_the_smallest_file_that_meets_both(view):
    view.set_limits(2.0, 1.0)  # under 2 ms and under 1 point: only dynamic int8
    assert view.recommended_id() == "r-dyn"
    assert view.recommendation.text().startswith("Recommended: int8 dynamic (tickets-lora-r8-int8-dynamic)")
    row = view.model.row_of("r-dyn")
    assert view.model.index(row, 0).data(Qt.ItemDataRole.BackgroundRole) is not None

    view.set_limits(2.0, 3.5)  # static (22.8 MB) now qualifies too and is the smaller file
    assert view.recommended_id() == "r-static"
    assert "1 other also qualifies" in view.recommendation.text()

    view.set_limits(1.0, 1.0)  # nothing is that fast
    assert view.recommended_id() is None
    text = view.recommendation.text()
    assert text.startswith("No variant meets both limits:\n• ")
    assert "int8 static (CPU form): 1.20 ms ≥ 1 ms, accuracy drop 3.00 ≥ 1 points" in text
    assert "int8 dynamic: 1.60 ms ≥ 1 ms" in text and "pruned 30% params" in text

    view.set_limits(None, None)  # no limits: simply the smallest
    assert view.recommended_id() == "r-static"


def test_deploy_target_counts_only_figures_from_where_the_model_will_run(view, qtbot):
    """A TensorRT-form int8 timed on this CPU is shown as such and left out on a CPU; on a Jetson the
    on-device figures count and the CPU-only variants are left out."""
    trt = {"job": job("r-trt", "compress.quantize", "tickets-lora-r8-int8-trt",
                      {"mode": "static", "calibration": {"samples": 64}}),
           "evaluation": doc(entry("r-trt", "int8 static", 0.90, [0.92, 0.89, 0.89],
                                   [[64, 2, 1], [4, 61, 2], [3, 2, 61]], 0.9, 50.0, 22_800_000, 22_700_000,
                                   55 * MB), parent_entry(3.1, 21.0), 0.97),
           "deployments": [{"job": "r-exp", "state": "succeeded",
                            "device": {"host": "orin", "precision": "int8", "latency_ms": {"median": 0.42}}}]}
    trt["evaluation"]["target"] = {"runtime": "tensorrt", "label": "TensorRT (GPU server, Jetson)",
                                   "measured_on_target": False, "note": "not its target runtime"}
    view.state["reply"] = variants_reply(DYNAMIC, PRUNED, STATIC, trt)
    view.refresh()
    qtbot.waitUntil(lambda: len(view.rows()) == 5, timeout=3000)
    assert view.deploy() == "cpu"
    row = view.model.row_of("r-trt")
    b1 = view.model.index(row, COLUMN["b1"])
    assert b1.data() == "0.90 ✱" and "Not its target runtime" in b1.data(Qt.ItemDataRole.ToolTipRole)
    assert view.model.index(view.model.row_of("r-dyn"), COLUMN["b1"]).data() == "1.60"
    assert "r-trt" not in view.front()  # 0.9 ms on a CPU it is not made for does not count
    view.set_limits(None, 5.0)
    assert view.recommended_id() == "r-static"
    assert "1 variant made for another runtime left out" in view.recommendation.text()

    view.set_deploy("jetson")
    # On a Jetson: the TensorRT form with its on-device 0.42 ms and the float models; not the CPU forms.
    assert view.front() == ["r-trt"]
    assert view.recommended_id() == "r-trt"
    assert "2 variants made for another runtime left out" in view.recommendation.text()
    assert view.model.index(view.model.row_of("r-dyn"), COLUMN["b1"]).data() == "1.60 ✱"
    assert "ONNX Runtime's CPU kernels" in view.model.index(view.model.row_of("r-dyn"),
                                                            COLUMN["b1"]).data(Qt.ItemDataRole.ToolTipRole)
    view.set_deploy("cpu")
    assert "r-trt" not in view.front() and view.recommended_id() == "r-static"


def test_per_class_view_compares_the_selected_variant_with_its_parent(view):
    per_class = view.per_class
    assert "Select a variant" in per_class.note.text()
    assert view.select_run("r-dyn")
    assert per_class.title.text() == "Per class: int8 dynamic vs parent"
    f1 = per_class.f1_table
    rows = [[f1.item(r, c).text() for c in range(4)] for r in range(f1.rowCount())]
    assert rows == [["billing", "0.930", "0.930", "+0.000"], ["bug", "0.910", "0.900", "-0.010"],
                    ["login", "0.900", "0.890", "-0.010"]]
    assert per_class.diff == [[0, 0, 0], [1, -1, 0], [0, 0, 0]]
    cm = per_class.confusion_table
    assert (cm.rowCount(), cm.columnCount()) == (3, 3)
    assert cm.item(1, 0).text() == "+1" and cm.item(1, 1).text() == "-1" and cm.item(0, 0).text() == "0"
    # One more "bug" read as "billing" (off the diagonal) and one fewer right: both red.
    assert cm.item(1, 0).background().color().red() > cm.item(1, 0).background().color().green()
    assert cm.item(1, 1).background().color().red() > cm.item(1, 1).background().color().green()
    assert view.export_variant_button.isEnabled()

    view.select_run(PARENT_ID)
    assert f1.rowCount() == 0 and "Select a variant" in per_class.note.text()


def test_export_table_csv_and_chart_png(view, tmp_path):
    view.set_limits(2.0, 1.0)
    path = tmp_path / "variants.csv"
    view.save_csv(str(path))
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [r["run_id"] for r in rows] == [PARENT_ID, "r-dyn", "r-prune", "r-static"]
    dyn = rows[1]
    assert dyn["technique"] == "int8 dynamic" and dyn["metric_name"] == "accuracy"
    assert float(dyn["metric"]) == 0.905 and float(dyn["delta_vs_parent"]) == pytest.approx(-0.5)
    assert float(dyn["latency_b1_p50_ms"]) == 1.6 and int(dyn["batch_N"]) == 16
    assert float(dyn["speedup_bN"]) == pytest.approx(20.0 / 9.0)
    assert int(dyn["size_bytes"]) == 23_000_000 and dyn["recommended"] == "True" and dyn["pareto"] == "True"
    assert rows[2]["pareto"] == "False" and rows[0]["delta_vs_parent"] == ""

    view.table.sortByColumn(COLUMN["size"], Qt.SortOrder.AscendingOrder)
    view.save_csv(str(path))  # in the order shown
    with path.open(newline="", encoding="utf-8") as f:
        assert [r["run_id"] for r in csv.DictReader(f)] == ["r-static", "r-dyn", "r-prune", PARENT_ID]

    png = tmp_path / "variants.png"
    view.save_png(str(png), width=1200)
    image = QImage(str(png))
    assert png.stat().st_size > 5000 and not image.isNull() and image.width() == 1200


def test_export_this_variant_goes_to_the_export_page(view, qtbot):
    from app.pages.export import ExportPage

    chosen: list[tuple[str, dict]] = []
    view.nav.requested.connect(lambda key, args: chosen.append((args["job_id"], args["record"])))  # to Export
    assert not view.export_variant_button.isEnabled()
    view.select_run("r-static")
    with qtbot.waitSignal(view.export_requested) as signal:
        qtbot.mouseClick(view.export_variant_button, Qt.MouseButton.LeftButton)
    assert signal.args == ["r-static"] and chosen[0][0] == "r-static"

    engine = fake_engine({"jobs.get": lambda p: {**STATIC["job"], "result": {}}})
    page = ExportPage(engine)
    qtbot.addWidget(page)
    page.set_variant(*chosen[0])
    settle(qtbot, engine.client)
    facts = page.variant_facts
    assert facts.value("Run") == "tickets-lora-r8-int8-static (r-static)"
    assert facts.value("Variant") == "int8 static (CPU form)"
    assert facts.value("Model file") == "/tmp/ember/runs/r-static/model/model.onnx"
    # The export wizard starts from that run, on its formats step.
    assert page.source()["id"] == "r-static" and page.current_step() == 1


def test_a_variant_finishing_shows_up_without_a_refresh(view, qtbot):
    client = view._client
    qat_job = job("r-qat", "compress.qat", "tickets-lora-r8-qat-int8", {"steps": 50, "target": "cpu"}, "running")
    view.state["reply"] = variants_reply(DYNAMIC, PRUNED, STATIC, {"job": qat_job, "evaluation": None})
    client.publish("jobs", qat_job)  # a new child of the parent shown
    qtbot.waitUntil(lambda: len(view.rows()) == 5, timeout=3000)
    assert view.rows()[-1].state == "running"

    other = job("r-elsewhere", "compress.quantize", "other", {"mode": "fp16"})
    other["parent_id"] = "r-someone-else"
    asked = len(client.sent("compress.variants"))
    client.publish("jobs", other)  # not a child of this parent: nothing to re-read
    qtbot.wait(400)
    assert len(client.sent("compress.variants")) == asked

    done = copy.deepcopy(qat_job)
    done["state"] = "succeeded"
    qat_eval = doc(entry("r-qat", "QAT int8", 0.90, [0.92, 0.89, 0.89], [[64, 2, 1], [4, 61, 2], [3, 2, 61]],
                         1.1, 7.0, 22_900_000, 22_700_000, 56 * MB), parent_entry(3.1, 21.0), 0.98)
    view.state["reply"] = variants_reply(DYNAMIC, PRUNED, STATIC, {"job": done, "evaluation": qat_eval})
    client.publish("jobs", done)
    qtbot.waitUntil(lambda: view.rows()[-1].state == "succeeded", timeout=3000)
    assert view.rows()[-1].metric == 0.90
    assert view.front() == ["r-qat", "r-dyn", PARENT_ID]  # QAT beats static on both axes


def test_an_engine_without_compress_variants_says_so(qtbot):
    from app.pages.compare.variants import VariantsView

    engine = fake_engine({"compress.variants": RpcError(METHOD_NOT_FOUND, "Unknown method"),
                          "jobs.list": {"jobs": []}})
    view = VariantsView(engine)
    qtbot.addWidget(view)
    view.show_parent(PARENT_ID)
    settle(qtbot, engine.client)
    assert "cannot list variants yet" in view.message.text() and view.rows() == []


def test_compare_page_hosts_the_variants_tab(qtbot):
    from app.pages.compare import ComparePage

    engine = fake_engine({"compress.variants": variants_reply(DYNAMIC), "jobs.list": {"jobs": [LORA]}})
    page = ComparePage(engine)
    qtbot.addWidget(page)
    settle(qtbot, engine.client)
    assert [page.tabs.tabText(i) for i in range(page.tabs.count())] == ["Runs", "Variants", "Evaluations", "Sweeps"]
    assert page.tabs.currentIndex() == 0
    page.show_variants(PARENT_ID)
    settle(qtbot, engine.client)
    assert page.tabs.currentWidget() is page.variants
    assert [r.job_id for r in page.variants.rows()] == [PARENT_ID, "r-dyn"]
    assert page.variants.parent_combo.currentData() == PARENT_ID
    page.set_runs([])
    assert page.tabs.currentIndex() == 0


def _llm_check(ppl: float, tokens_per_s: float, em: float, rouge: float, runtime: str, agreement: float,
               peak: int) -> dict[str, Any]:
    return {"perplexity": ppl, "tokens_per_s": tokens_per_s, "token_agreement": agreement, "runtime": runtime,
            "batch": 4, "batch_tokens_per_s": 2.5 * tokens_per_s, "ttft_s": 2 / tokens_per_s,
            "peak_rss_bytes": peak, "metrics": {"exact_match": em, "rouge_l": rouge}, "prompts": 8,
            "identical_answers": 8 if agreement == 1 else 3}


SMOL_EXPORT = {  # a language-model export's deployment as engine/daemon/job_records.py lists it
    "job": "r-files", "name": "smol-files", "state": "succeeded", "ended_at": time.time(),
    "formats": ["gguf", "hf", "jetson"], "compat": None,
    "device": {"host": "orin", "runtime": "llama.cpp", "gguf_type": "q4_k_m", "tokens_per_s": 41.2, "ttft_ms": 180.4,
               "prompt_tokens": 128, "gen_tokens": 64, "prompt_tokens_per_s": 900.0, "backends": "CUDA",
               "gpu_info": "Orin", "jetpack": "6.1"},
    "llm": {"check_rows": "validation data of r-smol",
            "reference": {"perplexity": 2.0, "tokens_per_s": 20.0, "bytes": 538 * MB, "params": 134_500_000,
                          "batch": 4, "batch_tokens_per_s": 40.0, "ttft_s": 0.12,
                          "metrics": {"exact_match": 0.5, "rouge_l": 0.6}},
            "files": [
                {"format": "hf", "kind": "hf", "path": "/runs/r-files/export/hf", "bytes": 538 * MB,
                 "check": _llm_check(2.0, 19.0, 0.5, 0.6, "transformers", 1.0, 900 * MB)},
                {"format": "gguf", "kind": "f16", "path": "/runs/r-files/export/gguf/s-f16.gguf", "bytes": 270 * MB,
                 "check": _llm_check(2.01, 40.0, 0.5, 0.6, "llama.cpp", 1.0, 330 * MB)},
                {"format": "gguf", "kind": "q4_k_m", "path": "/runs/r-files/export/gguf/s-q4_k_m.gguf",
                 "bytes": 105 * MB, "check": _llm_check(2.3, 80.0, 0.375, 0.5, "llama.cpp", 0.6, 160 * MB)}]}}


def test_a_language_models_exported_files_are_compared_in_their_own_runtimes(qtbot):
    from app.pages.compare.variants import VariantsView

    smol = {**copy.deepcopy(LORA), "id": "r-smol", "name": "smol-short",
            "summary": {**LORA["summary"], "task": "causal_lm"}, "spec": {**LORA["spec"], "task": "causal_lm"}}
    reply = {"parent": smol, "parent_evaluation": None, "variants": [], "parent_deployments": [copy.deepcopy(SMOL_EXPORT)]}
    engine = fake_engine({"compress.variants": lambda p: copy.deepcopy(reply), "jobs.list": {"jobs": [smol]}})
    view = VariantsView(engine)
    qtbot.addWidget(view)
    view.resize(1150, 900)
    view.show()
    view.show_parent("r-smol")
    settle(qtbot, engine.client)

    assert ids_in_order(view) == ["r-smol", "r-files:hf/hf", "r-files:gguf/f16", "r-files:gguf/q4_k_m"]
    assert texts(view, "technique") == ["◆ parent", "merged checkpoint", "◆ GGUF f16", "◆ GGUF q4_k_m"]
    assert texts(view, "metric") == ["2.00", "2.00", "2.01", "2.30"]  # perplexity, the parent's from PyTorch
    assert texts(view, "delta") == ["—", "+0.00", "+0.01", "+0.30"]
    assert texts(view, "em") == ["50.0%", "50.0%", "50.0%", "37.5%"] and texts(view, "rouge")[3] == "50.0%"
    assert texts(view, "b1") == ["50.00", "52.63", "25.00", "12.50"]  # ms per generated token
    assert texts(view, "bn") == ["25.00", "21.05", "10.00", "5.00"]  # with 4 requests batched: all tokens together
    assert texts(view, "ttft") == ["120 ms", "105 ms", "50 ms", "25 ms"] and not view.table.isColumnHidden(COLUMN["ttft"])
    assert view.model.headerData(COLUMN["bn"], Qt.Orientation.Horizontal) == "ms/token b4"
    assert texts(view, "compression") == ["1.00×", "1.00×", "1.99×", "5.12×"]
    assert texts(view, "speedup")[3] == "4.00×"
    header = view.model.headerData(COLUMN["b1"], Qt.Orientation.Horizontal)
    assert header == "ms/token b1" and view.model.headerData(COLUMN["metric"], Qt.Orientation.Horizontal) == "Perplexity"
    assert not view.table.isColumnHidden(COLUMN["em"])
    assert "llama.cpp" in view.proxy.index(3, COLUMN["technique"]).data(Qt.ItemDataRole.ToolTipRole)
    # The q4_k_m file as timed on the Jetson by llama-bench (the export's device figures), and on the parent row.
    assert texts(view, "device") == ["41.2 tok/s · first token 180 ms", "—", "—", "41.2 tok/s · first token 180 ms"]
    assert "llama-bench" in view.proxy.index(3, COLUMN["device"]).data(Qt.ItemDataRole.ToolTipRole)
    # The smallest file within 0.5 perplexity of the source model and under 30 ms a token.
    view.set_limits(30.0, 0.5)
    assert view.recommended_id() == "r-files:gguf/q4_k_m"
    view.set_limits(30.0, 0.1)
    assert view.recommended_id() == "r-files:gguf/f16"
    assert view.latency_limit.suffix() == " ms/token"
    assert [view.basis_combo.itemText(i) for i in range(2)] == ["one request at a time", "4 requests at once"]
    # An exported file is not a run to export again: the button says what it is.
    assert view.select_run("r-files:gguf/q4_k_m") and not view.export_variant_button.isEnabled()
    assert "s-q4_k_m.gguf" in view.export_variant_button.toolTip()
    assert view.select_run("r-smol") and view.export_variant_button.isEnabled()
    assert "per generated token" in view.scatter.plot.getPlotItem().getAxis("bottom").labelText


def test_a_classifiers_table_has_no_answer_score_columns(view):
    assert view.table.isColumnHidden(COLUMN["em"]) and view.table.isColumnHidden(COLUMN["rouge"])
    assert view.table.isColumnHidden(COLUMN["ttft"])
