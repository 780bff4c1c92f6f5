"""What `ember run` prints while it follows a job, fed events recorded from real runs (engine/cli/progress.py)."""

import io
import json
import re

from engine.cli.progress import JsonLines, ProgressBar, display_for, duration, headline

RUN = "r20261203-234304-687533"
RUN_DIR = f"/home/u/.local/share/ember/runs/{RUN}"
T0 = 1796341384.16

# events.jsonl of a 6-step fine-tune of the built-in digits model (log_every 1, eval_every 3),
# with run_info's data facts and memory's ranks cut short.
FINETUNE_LINES = [
    {"t": 1796341384.50, "kind": "status", "state": "running", "pid": 27291, "world_size": 1, "restart": 0},
    {"t": 1796341388.08, "kind": "run_info", "task": "image_classification", "model": "digits-cnn", "method": "full",
     "strategy": "single", "world_size": 1, "device": "cpu", "trainable_params": 98970, "total_params": 98970,
     "total_steps": 6, "start_step": 0, "n_train": 1438, "n_val": 359, "data": {"num_labels": 10}},
    {"t": 1796341388.10, "kind": "train", "step": 1, "loss": 2.3459696769714355, "lr": 0.0004166666666666667,
     "grad_norm": 5.116570949554443, "samples_per_s": 745.5712832687725, "step_time_s": 0.021460054000272066,
     "data_wait_frac": 0.2451031577161, "epoch": 0, "progress": 0.16666666666666666, "eta_s": 0.10730027000136033,
     "tflops": 0.016331661420589002, "mfu": 0.04991596051849056},
    {"t": 1796341388.10, "kind": "memory", "step": 1, "ranks": [{"rank": 0, "host": "vm", "device": "cpu"}]},
    {"t": 1796341388.12, "kind": "train", "step": 2, "loss": 2.6261589527130127, "lr": 0.0003333333333333334,
     "grad_norm": 6.46077823638916, "samples_per_s": 1329.9811159312046, "step_time_s": 0.012030245999994804,
     "data_wait_frac": 0.3374778870543297, "epoch": 0, "progress": 0.3333333333333333, "eta_s": 0.06698060000053374},
    {"t": 1796341388.13, "kind": "train", "step": 3, "loss": 2.055859088897705, "lr": 0.00025,
     "grad_norm": 5.163349628448486, "samples_per_s": 1501.352718781699, "step_time_s": 0.01065705600012734,
     "data_wait_frac": 0.36489411330782867, "epoch": 0, "progress": 0.5, "eta_s": 0.04414735600039421},
    {"t": 1796341388.29, "kind": "eval", "step": 3, "metrics": {
        "accuracy": 0.18384401114206128, "loss": 2.2986310544452295, "balanced_accuracy": 0.18404761904761907,
        "accuracy_c0": 0.6111111111111112, "accuracy_c1": 0.0, "accuracy_c9": 0.9722222222222222}},
    {"t": 1796341388.31, "kind": "train", "step": 4, "loss": 2.278327703475952, "lr": 0.0001666666666666667,
     "grad_norm": 4.93862771987915, "samples_per_s": 822.3324947598521, "step_time_s": 0.019456849999187398,
     "data_wait_frac": 0.2171831514678665, "epoch": 0, "progress": 0.6666666666666666, "eta_s": 0.031802102999790804},
    {"t": 1796341388.32, "kind": "train", "step": 5, "loss": 2.0282018184661865, "lr": 8.333333333333332e-05,
     "grad_norm": 4.894802570343018, "samples_per_s": 962.6363528491124, "step_time_s": 0.01662102200134541,
     "data_wait_frac": 0.3889836617362325, "epoch": 0, "progress": 0.8333333333333334, "eta_s": 0.016045045600185402},
    {"t": 1796341388.33, "kind": "train", "step": 6, "loss": 2.1721651554107666, "lr": 0.0,
     "grad_norm": 5.796574592590332, "samples_per_s": 1420.6680744990608, "step_time_s": 0.011262306999924476,
     "data_wait_frac": 0.3637442134268358, "epoch": 0, "progress": 1.0, "eta_s": 0.0},
    {"t": 1796341388.43, "kind": "eval", "step": 6, "metrics": {
        "accuracy": 0.10027855153203342, "loss": 2.2983344856410968, "balanced_accuracy": 0.1}},
    {"t": 1796341388.44, "kind": "checkpoint", "step": 6, "path": f"{RUN_DIR}/checkpoints/step-00000006",
     "seconds": 0.011594084999160259},
    {"t": 1796341388.45, "kind": "artifact", "type": "model", "path": f"{RUN_DIR}/model", "step": 6},
    {"t": 1796341388.45, "kind": "status", "state": "succeeded"},
]

# jobs.get of that run once it ended (spec left out).
FINETUNE_JOB = {
    "id": RUN, "kind": "train.finetune", "name": "tiny digits", "state": "succeeded", "created_at": 1796341384.157,
    "started_at": T0, "ended_at": 1796341406.82, "pid": 32554, "exit_code": 0, "error": None,
    "run_dir": RUN_DIR, "parent_id": None, "host": "local",
    "summary": {"task": "image_classification", "model": "digits-cnn", "method": "full", "strategy": "single",
                "nproc": 1, "nodes": [], "best": {"metric": "accuracy", "value": 0.18384401114206128, "step": 3},
                "estimated_peak": 829836512, "measured_peak": 830529536}}


def as_events(lines, run=RUN, first_seq=10):
    """What a subscription delivers for events.jsonl lines (docs/protocol.md)."""
    return [{"subscription": 1, "topic": f"run/{run}/{line['kind']}", "seq": first_seq + i, "t": line["t"],
             "data": line} for i, line in enumerate(lines)]


class Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


def screen(text: str) -> list[str]:
    """The lines a terminal shows for ``text``: ``\\r`` returns to the line's start, ESC[K erases the rest."""
    lines, cur, col = [], [], 0
    for token in re.split(r"(\r|\n|\x1b\[K)", text):
        if token == "\n":
            lines.append("".join(cur))
            cur, col = [], 0
        elif token == "\r":
            col = 0
        elif token == "\x1b[K":
            del cur[col:]
        else:
            for ch in token:
                if col < len(cur):
                    cur[col] = ch
                else:
                    cur.append(ch)
                col += 1
    return lines + (["".join(cur)] if cur else [])


def play(bar, job, lines, clock=None, step_s=0.0):
    bar.started({**job, "state": "running", "ended_at": None, "summary": {**job["summary"], "best": None}})
    for ev in as_events(lines):
        if clock:
            clock.t = ev["t"] + step_s
        bar.event(ev)
    bar.finished(job)


def test_plain_output_has_no_redraws_and_prints_progress_now_and_then():
    out, clock = io.StringIO(), Clock(T0)
    play(ProgressBar(out, live=False, now=clock), FINETUNE_JOB, FINETUNE_LINES, clock)
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert lines[0] == f"started {RUN} (train.finetune), run dir {RUN_DIR}"
    progress = [ln for ln in lines if ln.startswith("step ")]
    # Steps 2 to 5 come within 10 s of step 1: only the first and the last line are printed.
    assert progress == ["step 1/6   17%  loss 2.346  746 samples/s  elapsed 0:04  ETA 0:01",
                        "step 6/6  100%  loss 2.172  1,421 samples/s  elapsed 0:04"]
    assert "eval at step 3: accuracy 18.4%, balanced_accuracy 18.4%, loss 2.299" in lines
    assert f"checkpoint at step 6: {RUN_DIR}/checkpoints/step-00000006" in lines
    assert lines[-4:] == [f"Fine-tune 'tiny digits' succeeded in 0:23 ({RUN})",
                          "  best accuracy 18.4% at step 3",
                          f"  model: {RUN_DIR}/model",
                          f"  run dir: {RUN_DIR}"]


def test_plain_output_prints_again_once_the_interval_has_passed():
    out, clock = io.StringIO(), Clock(T0)
    bar = ProgressBar(out, live=False, now=clock, every_s=10.0)
    bar.started({**FINETUNE_JOB, "state": "running"})
    for i, ev in enumerate(as_events(FINETUNE_LINES)):
        clock.t = T0 + 6 * i  # a slow run: an event every 6 s
        bar.event(ev)
    steps = [ln.split()[1] for ln in out.getvalue().splitlines() if ln.startswith("step ")]
    assert steps == ["1/6", "2/6", "4/6", "6/6"]  # 12 s, 24 s, 42 s; then the last step at once


def test_terminal_bar_is_one_line_redrawn_with_notes_above_it():
    out, clock = io.StringIO(), Clock(T0)
    bar = ProgressBar(out, live=True, now=clock, width=lambda: 120)
    warning = {"t": 1796341388.11, "kind": "warning", "step": 2, "message": "Skipped step 2: the loss was NaN or "
               "infinite", "hint": "If this repeats, lower optim.lr."}
    play(bar, FINETUNE_JOB, [*FINETUNE_LINES[:4], warning, *FINETUNE_LINES[4:]], clock)
    text = out.getvalue()
    assert text.count("\r") > 6 and "\x1b[K" in text
    shown = screen(text)
    assert shown == [
        f"started {RUN} (train.finetune), run dir {RUN_DIR}",
        "warning: Skipped step 2: the loss was NaN or infinite",
        "  hint: If this repeats, lower optim.lr.",
        "eval at step 3: accuracy 18.4%, balanced_accuracy 18.4%, loss 2.299",
        "eval at step 6: accuracy 10.0%, balanced_accuracy 10.0%, loss 2.298",
        f"checkpoint at step 6: {RUN_DIR}/checkpoints/step-00000006",
        "[####################] step 6/6  100%  loss 2.172  1,421 samples/s  elapsed 0:04",
        f"Fine-tune 'tiny digits' succeeded in 0:23 ({RUN})",
        "  best accuracy 18.4% at step 3",
        f"  model: {RUN_DIR}/model",
        f"  run dir: {RUN_DIR}",
    ]


def test_terminal_bar_fits_a_narrow_terminal_and_its_clock_moves_between_events():
    out, clock = io.StringIO(), Clock(T0)
    cols = [120]
    bar = ProgressBar(out, live=True, now=clock, width=lambda: cols[0])
    bar.started({**FINETUNE_JOB, "state": "running", "ended_at": None})
    for ev in as_events(FINETUNE_LINES[:3]):
        clock.t = ev["t"]
        bar.event(ev)
    assert screen(out.getvalue())[-1] == ("[###.................] step 1/6   17%  loss 2.346  746 samples/s  "
                                          "elapsed 0:04  ETA 0:01")
    clock.t += 60
    bar.tick()  # no event for a minute: the clock moves on, the old estimate has run out but is not 0
    assert screen(out.getvalue())[-1].endswith("elapsed 1:04  ETA 0:01")
    for width, shown in ((60, "step 1/6   17%  loss 2.346  elapsed 1:04  ETA 0:01"),
                         (40, "step 1/6   17%  loss 2.346  ETA 0:01"),
                         (30, "step 1/6   17%  ETA 0:01"),
                         (20, "step 1/6   17%")):
        cols[0] = width
        bar.tick()
        assert screen(out.getvalue())[-1] == shown  # the least useful parts go first; nothing wraps


def test_eta_waits_until_it_can_be_estimated_and_is_never_zero_before_the_end():
    clock = Clock(T0 + 10)
    bar = ProgressBar(io.StringIO(), live=False, now=clock)
    bar.started({**FINETUNE_JOB, "state": "running", "started_at": T0})
    assert bar.eta() is None
    bar.event(as_events([{"t": T0 + 10, "kind": "train", "step": 1, "loss": 2.0, "samples_per_s": 50.0,
                          "progress": 0.5, "eta_s": 30.0}])[0])
    assert bar.eta() == 30.0
    clock.t += 40  # the estimate has run out, but the job has not: still a second to go, not 0
    assert bar.eta() == 1.0
    # A compression's stages are uneven: no estimate from the first few per cent.
    stage = ProgressBar(io.StringIO(), live=False, now=Clock(T0 + 4))
    stage.started({"id": "r1", "kind": "compress.quantize", "run_dir": "/r1", "state": "running", "started_at": T0})
    stage.event({"topic": "run/r1/progress", "seq": 1, "t": T0 + 1,
                 "data": {"kind": "progress", "stage": "load", "fraction": 0.02, "message": "loading run r0"}})
    assert stage.eta() is None and stage.line() == "  2%  loading run r0  elapsed 0:04"
    stage.event({"topic": "run/r1/progress", "seq": 2, "t": T0 + 4,
                 "data": {"kind": "progress", "stage": "quantize", "fraction": 0.4, "message": "quantizing: dynamic"}})
    assert stage.line() == " 40%  quantizing: dynamic  elapsed 0:04  ETA 0:06"


def test_a_probe_counts_its_samples_and_tokens_are_preferred_to_samples():
    bar = ProgressBar(io.StringIO(), live=False, now=Clock(T0 + 3))
    bar.started({"id": "r2", "kind": "system.probe", "run_dir": "/r2", "state": "running", "started_at": T0,
                 "spec": {"samples": 4, "interval_s": 0.05}})
    bar.event({"topic": "run/r2/sample", "seq": 5, "t": T0 + 3, "data": {
        "t": T0 + 3, "kind": "sample", "step": 1, "cpu_percent": 12.5, "memory_used_bytes": 2413072384,
        "memory_percent": 14.2}})
    assert bar.line() == "sample 2/4   50%  CPU 12%, memory 14%  elapsed 0:03  ETA 0:03"
    lm = ProgressBar(io.StringIO(), live=False, now=Clock(T0))
    lm.event(as_events([{"t": T0, "kind": "train", "step": 10, "loss": 3.25, "samples_per_s": 8.0,
                         "tokens_per_s": 4096.0, "progress": 0.1, "eta_s": 90.0}])[0])
    assert "step 10/100" in lm.line() and "4,096 tokens/s" in lm.line() and "samples/s" not in lm.line()


def test_a_failure_is_said_once_in_words_with_its_hint():
    out = io.StringIO()
    bar = ProgressBar(out, live=False, now=Clock(T0))
    error = {"t": T0 + 2, "kind": "error", "message": "No column 'text' in train.csv (columns: msg, category)",
             "hint": "Set data.text_column to one of: msg, category."}
    failed = {**FINETUNE_JOB, "state": "failed", "ended_at": T0 + 3, "exit_code": 1,
              "summary": {**FINETUNE_JOB["summary"], "best": None},
              "error": {"message": error["message"], "hint": error["hint"]}}
    bar.started({**failed, "state": "running", "error": None})
    for ev in as_events([FINETUNE_LINES[0], error, {"t": T0 + 2, "kind": "status", "state": "failed",
                                                    "message": error["message"], "hint": error["hint"]}]):
        bar.event(ev)
    bar.finished(failed)
    text = out.getvalue()
    assert text.count("No column 'text'") == 1
    assert "error: No column 'text' in train.csv (columns: msg, category)\n  hint: Set data.text_column" in text
    assert f"Fine-tune 'tiny digits' failed after 0:03 ({RUN})" in text and "best" not in text
    # Told only by the job record (the job died before writing its error event): the summary says it.
    out = io.StringIO()
    ProgressBar(out, live=False).finished(failed)
    assert "  error: No column 'text'" in out.getvalue() and "  hint: Set data.text_column" in out.getvalue()


def test_quiet_prints_only_problems_and_the_summary():
    out = io.StringIO()
    warning = {"t": T0 + 1, "kind": "warning", "message": "Checkpoint step-4 is damaged; continuing from step-2"}
    play(ProgressBar(out, live=True, quiet=True, now=Clock(T0)), FINETUNE_JOB, [*FINETUNE_LINES, warning])
    text = out.getvalue()
    assert "\r" not in text and "step 6/6" not in text and "eval at" not in text
    assert "warning: Checkpoint step-4 is damaged" in text and "succeeded in 0:23" in text


def test_json_lines_are_the_events_as_sent_between_the_job_records():
    out = io.StringIO()
    play(JsonLines(out), FINETUNE_JOB, FINETUNE_LINES)
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert rows[0]["job"]["state"] == "running" and rows[-1] == {"job": FINETUNE_JOB}
    assert [r["data"]["kind"] for r in rows[1:-1]] == [line["kind"] for line in FINETUNE_LINES]
    assert all(set(r) == {"topic", "seq", "t", "data"} for r in rows[1:-1])


def test_the_display_follows_the_output():
    assert isinstance(display_for(io.StringIO(), as_json=True), JsonLines)
    plain = display_for(io.StringIO())
    assert isinstance(plain, ProgressBar) and not plain.live

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    assert display_for(Terminal()).live
    assert duration(7.4) == "0:07" and duration(754) == "12:34" and duration(3723) == "1:02:03"


def test_a_stopped_run_says_where_it_stopped_and_how_to_continue():
    out, clock = io.StringIO(), Clock(T0)
    stopped = {**FINETUNE_JOB, "state": "stopped", "summary": {**FINETUNE_JOB["summary"], "best": None}}
    bar = ProgressBar(out, live=True, now=clock, width=lambda: 120)
    bar.started({**stopped, "state": "running", "ended_at": None})
    for ev in as_events([*FINETUNE_LINES[:3],
                         {"t": T0 + 5, "kind": "stopped", "step": 1,
                          "checkpoint": f"{RUN_DIR}/checkpoints/step-00000001"},
                         {"t": T0 + 5, "kind": "status", "state": "stopped"}]):
        clock.t = ev["t"]
        bar.event(ev)
    clock.t += 30
    bar.tick()
    bar.finished(stopped)
    lines = screen(out.getvalue())
    assert f"stopped at step 1; checkpoint {RUN_DIR}/checkpoints/step-00000001" in lines
    assert "[###.................] step 1/6   17%  loss 2.346  746 samples/s  elapsed 0:35" in lines  # no ETA now
    assert lines[-3:] == [f"Fine-tune 'tiny digits' stopped after 0:23 ({RUN})", f"  run dir: {RUN_DIR}",
                          f"  continue it with `ember resume {RUN}`"]


def test_an_evaluation_in_progress_says_what_it_does_until_its_result():
    out, clock = io.StringIO(), Clock(T0)
    bar = ProgressBar(out, live=True, now=clock, width=lambda: 140)
    bar.started({**FINETUNE_JOB, "state": "running", "ended_at": None})
    bar.event({"topic": f"run/{RUN}/train", "data": {"t": T0, "step": 20, "loss": 1.5, "progress": 0.5}})
    bar.event({"topic": f"run/{RUN}/evaluating", "data": {"t": T0, "step": 20, "what": "generating answers",
                                                         "done": 5, "total": 30}})
    assert "step 20/40" in bar.line() and "evaluating: generating answers 5/30" in bar.line()
    bar.event({"topic": f"run/{RUN}/eval", "data": {"t": T0, "step": 20, "metrics": {"exact_match": 0.5}}})
    assert "evaluating" not in bar.line()


def test_eval_lines_lead_with_the_tasks_own_scores():
    assert headline({"perplexity": 5.2, "loss": 1.65, "exact_match": 0.5, "token_f1": 0.61, "rouge_l": 0.6}) == \
        "exact_match 50.0%, token_f1 61.0%, perplexity 5.2, loss 1.65"
    assert headline({"loss": 0.6, "reward_accuracy": 0.75, "reward_margin": 0.42, "reward_chosen": 0.1}) == \
        "reward_accuracy 75.0%, reward_margin 0.42, loss 0.6"


def test_a_serve_job_started_with_ember_run_says_its_address_once():
    out = io.StringIO()
    bar = ProgressBar(out, live=False)
    bar.started({**FINETUNE_JOB, "kind": "serve.model", "state": "running", "ended_at": None})
    first = {"t": T0, "url": "http://127.0.0.1:8000/v1", "model": "tiny-llama", "load_s": 1.5}
    bar.event({"topic": f"run/{RUN}/serving", "data": first})
    bar.event({"topic": f"run/{RUN}/serving", "data": {**first, "requests": 3, "tokens_per_s": 12.0}})
    assert out.getvalue().count("serving tiny-llama at http://127.0.0.1:8000/v1 (OpenAI-compatible)") == 1


def test_ember_serve_says_queued_with_the_reason_then_loading():
    from engine.cli.serve import wait_listening

    class Client:  # the engine's answers as the job leaves the queue and starts listening
        def __init__(self):
            self.states = ["queued", "queued", "running", "running"]

        def call(self, method, **params):
            if method == "jobs.get":
                return {"state": self.states.pop(0) if len(self.states) > 1 else self.states[0]}
            if method == "queue.get":
                return {"jobs": [{"id": "j1", "reason": "needs 1 CPU core; 0 of 2 free on this machine"}]}
            if method == "events.query":
                done = not self.states or self.states == ["running"]
                return {"events": [{"data": {"url": "http://127.0.0.1:8000/v1", "model": "m"}}] if done else []}
            raise AssertionError(method)

    lines: list[str] = []
    seen = wait_listening(Client(), "j1", lines.append)
    assert seen and lines == ["queued: needs 1 CPU core; 0 of 2 free on this machine", "loading the model..."]


def test_the_set_up_before_the_first_step_is_said_stage_by_stage():
    out = io.StringIO()
    bar = ProgressBar(out, live=False)
    bar.started({**FINETUNE_JOB, "state": "running", "ended_at": None})
    for stage in ("reading the data", "loading the model (smollm2-135m-instruct)"):
        bar.event({"topic": f"run/{RUN}/setup", "data": {"t": T0, "stage": stage}})
    assert "setting up: reading the data\nsetting up: loading the model (smollm2-135m-instruct)" in out.getvalue()
