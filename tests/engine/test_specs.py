import pytest

from engine.api.specs import ProbeSpec, SpecError, dump_job_yaml, load_job_file, validate_spec


def test_every_error_is_reported_at_once_with_hints():
    with pytest.raises(SpecError) as exc:
        validate_spec("system.probe", {"samples": "many", "interval_s": -1, "extra": 1})
    fields = {f["field"]: f for f in exc.value.fields}
    assert set(fields) == {"samples", "interval_s", "extra"}
    assert fields["samples"]["hint"] == "write a whole number, such as 8"
    assert fields["extra"]["hint"] == "remove it, or check its spelling"


def test_unknown_kind_names_the_known_ones():
    with pytest.raises(SpecError) as exc:
        validate_spec("train.magic", {})
    assert "system.probe" in exc.value.fields[0]["hint"]


def test_job_file_round_trip(tmp_path):
    f = tmp_path / "job.yaml"
    f.write_text(dump_job_yaml("system.probe", ProbeSpec(samples=3), name="check"))
    assert load_job_file(f) == ("system.probe", ProbeSpec(samples=3), "check")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: [unclosed", "is not valid YAML"),
        ("spec: {}", "has no 'kind'"),
        ("kind: system.probe\nsamples: 3", "unknown top-level keys"),
        ("kind: system.probe\nspec: [1, 2]", "Invalid spec"),
    ],
)
def test_bad_job_files_say_what_is_wrong(tmp_path, text, message):
    f = tmp_path / "job.yaml"
    f.write_text(text)
    with pytest.raises(SpecError, match=message.replace("[", r"\[")):
        load_job_file(f)


def test_yaml_is_loaded_safely(tmp_path):
    f = tmp_path / "job.yaml"
    f.write_text("kind: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_job_file(f)


def test_an_image_too_small_for_the_built_in_cnn_is_refused_before_launch():
    with pytest.raises(SpecError) as err:
        validate_spec("train.finetune", {"task": "image_classification", "data": {"image_size": 8}})
    assert any(f["field"] == "data.image_size" for f in err.value.fields), err.value.fields
    validate_spec("train.finetune", {"task": "image_classification", "data": {"image_size": 16}})
