"""Job files (`ember run file.yaml`): any YAML gives a clear SpecError, never a traceback, a hang or code execution."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.api.specs import MAX_JOB_FILE_BYTES, SpecError, load_job_file
from tests.conftest import ROOT

pytestmark = pytest.mark.timeout(120)


def _load(tmp_path: Path, text: str | bytes) -> tuple[str, object, str] | SpecError:
    f = tmp_path / "job.yaml"
    f.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    try:
        return load_job_file(f)
    except SpecError as exc:
        assert exc.args[0] and isinstance(exc.hint, str) and exc.hint
        assert isinstance(exc.fields, list)
        str(exc)  # the CLI prints it: must not raise
        return exc


def test_python_tags_are_refused_and_never_run(tmp_path):
    marker = tmp_path / "PWNED"
    payloads = [
        f"!!python/object/apply:os.system ['touch {marker}']",
        f"kind: system.probe\nspec: !!python/object/apply:os.system ['touch {marker}']\n",
        f"kind: !!python/object/new:subprocess.check_output [['touch', '{marker}']]\n",
        "kind: !!python/name:os.system\n",
        "kind: system.probe\nname: !!python/object:engine.api.specs.ProbeSpec {samples: 1}\n",
    ]
    for text in payloads:
        got = _load(tmp_path, text)
        assert isinstance(got, SpecError) and "not valid YAML" in got.args[0], text
    assert not marker.exists()


def test_billion_laughs_is_refused_quickly(tmp_path):
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        refs = ",".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    bomb = "\n".join(lines)
    t0 = time.monotonic()
    # Hidden under each place a value is read: top level, kind, name, deep in the spec.
    for text in (bomb + "\nkind: system.probe\n", "kind: &k x\n" + bomb.replace("a0: ", "name: ", 1),
                 "kind: train.finetune\nspec:\n  method:\n    target_modules: &t [a, b]\n" +
                 "\n".join("  " + line for line in bomb.splitlines()).replace("  a0:", "  x0:")):
        got = _load(tmp_path, text)
        assert isinstance(got, SpecError), text[:80]
    # The alias bomb as kind/name values directly:
    got = _load(tmp_path, "x: " + bomb.replace("\n", "\nx").replace("a9: &a9", "kind: &a9"))
    assert isinstance(got, SpecError)
    assert time.monotonic() - t0 < 10
    # A self-referencing alias (a recursive list) is refused too.
    assert isinstance(_load(tmp_path, "kind: &r [*r]\n"), SpecError)


def test_oversized_deep_and_binary_files_are_refused(tmp_path):
    assert "at most" in _load(tmp_path, "kind: system.probe\n#" + "x" * MAX_JOB_FILE_BYTES).args[0]
    assert isinstance(_load(tmp_path, "[" * 50_000 + "]" * 50_000), SpecError)
    assert isinstance(_load(tmp_path, b"\xff\xfe\x00kind"), SpecError)
    d = tmp_path / "adir.yaml"
    d.mkdir()
    with pytest.raises(SpecError, match="folder"):
        load_job_file(d)


def test_wrong_types_name_every_field(tmp_path):
    got = _load(tmp_path, "kind: train.finetune\nname: [1, 2]\nspec: {}\n")
    assert isinstance(got, SpecError) and got.fields[0]["field"] == "name"
    got = _load(tmp_path, "kind: 7\n")
    assert isinstance(got, SpecError) and got.fields[0]["field"] == "kind"
    got = _load(tmp_path, "kind: train.finetune\nspec:\n  batch_size: lots\n  max_steps: -1\n  method: {kind: magic}\n")
    assert isinstance(got, SpecError)
    assert {f["field"] for f in got.fields} == {"batch_size", "max_steps", "method.kind"}
    got = _load(tmp_path, "kind: train.finetune\nspec: [1, 2]\n")
    assert isinstance(got, SpecError) and got.fields[0]["field"] == "spec"
    assert isinstance(_load(tmp_path, "kind: system.probe\nextra: 1\n"), SpecError)


yaml_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30)
yaml_values = st.recursive(yaml_scalars, lambda c: st.lists(c, max_size=4) |
                           st.dictionaries(st.text(max_size=12) | st.integers(), c, max_size=4), max_leaves=15)
spec_keys = st.sampled_from(["task", "model", "data", "method", "distributed", "optim", "batch_size", "max_steps",
                             "epochs", "device", "path", "nodes", "samples", "interval_s", "source_run", "formats"])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["train.finetune", "system.probe", "export.model", "compress.prune", "nope"]) | yaml_values,
       spec=st.dictionaries(spec_keys, yaml_values, max_size=5) | yaml_values,
       name=yaml_values, raw=st.text(max_size=200))
def test_random_job_files_load_or_fail_cleanly(tmp_path, kind, spec, name, raw):
    doc = yaml.safe_dump({"kind": kind, "spec": spec, "name": name}, allow_unicode=True)
    for text in (doc, raw, doc + raw, raw + "\n" + doc):
        got = _load(tmp_path, text)
        if not isinstance(got, SpecError):
            k, model, n = got
            assert isinstance(k, str) and isinstance(n, str)
            model.model_dump(mode="json")


def test_cli_shows_a_message_not_a_traceback(tmp_path):
    marker = tmp_path / "PWNED"
    job = tmp_path / "job.yaml"
    job.write_text(f"kind: system.probe\nspec: !!python/object/apply:os.system ['touch {marker}']\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), EMBER_HOME=str(tmp_path / "home"))
    out = subprocess.run([sys.executable, "-m", "engine.cli.main", "run", str(job)], capture_output=True, text=True,
                         timeout=60, env=env)
    assert out.returncode == 2 and "not valid YAML" in out.stderr and "hint:" in out.stderr
    assert "Traceback" not in out.stderr and not marker.exists()
    assert not (tmp_path / "home" / "ember.db").exists()  # refused before an engine was even started
