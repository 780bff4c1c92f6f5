"""Data desensitisation: Presidio's scan counts exactly what was planted, each scrub mode removes it, the
policy is enforced by the engine, and nothing planted reaches a run, an export, the store or the logs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from engine.api.job_terms import FINAL_STATES
from engine.api.protocol import POLICY_REFUSED, RpcError
from tests.conftest import wait_for
from tests.fixtures.planted_pii import PLANTED, expected, write_csv

pytestmark = pytest.mark.timeout(420)
SALT = b"0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def analyzer():
    from engine.pii.analyzer import Analyzer

    return Analyzer()


def _leaks(text: str) -> list[str]:
    return [v for v in PLANTED.values() if v in text]


def test_a_scan_counts_every_planted_type_exactly_and_shows_only_masked_examples(analyzer, tmp_path):
    from engine.pii import job

    data = write_csv(tmp_path / "tickets.csv", 60)
    result = job.scan(data, analyzer)
    assert result["findings"]["by_entity"] == expected(60)
    assert result["findings"]["total"] == 30 and result["rows"] == 60
    [text] = result["findings"]["columns"]  # the label column has none
    assert text["column"] == "text" and text["cells"] == 30
    assert text["examples"]["EMAIL_ADDRESS"] == ["m••••.••••••••@••••-••••.•••"]
    assert not _leaks(json.dumps(result, ensure_ascii=False))
    assert "EmailRecognizer" in result["recognizers"] and result["ner"]["ran"] is False
    assert "spaCy" in result["ner"]["why"]  # says how to look for names too


SPACY_MODEL = os.environ.get("EMBER_TEST_SPACY_MODEL", "")


# No spaCy or transformers NER model can be fetched by the test command (they come from GitHub releases and
# the Hub); set EMBER_TEST_SPACY_MODEL to an unpacked spaCy English pipeline folder (en_core_web_sm) to run it.
@pytest.mark.skipif(not SPACY_MODEL, reason="no spaCy pipeline folder (EMBER_TEST_SPACY_MODEL)")
def test_people_and_places_are_found_with_a_spacy_pipeline_folder(tmp_path):
    from engine.pii import job
    from engine.pii.analyzer import Analyzer

    people = ["John Smith", "Maria Garcia", "David Johnson", "Sarah Williams", "Michael Brown"]
    places = ["London", "Paris", "Chicago", "Berlin", "Madrid"]
    rows = [f"{person} from {place} says the invoice is wrong" for person, place in zip(people, places, strict=True)]
    data = tmp_path / "notes.csv"
    data.write_text("text,label\n" + "".join(f"{r},billing\n" for r in rows) + "the printer is broken,hardware\n")
    result = job.scan(data, Analyzer(ner_model=SPACY_MODEL))
    assert result["ner"] == {"ran": True, "model": str(Path(SPACY_MODEL).resolve()), "how": "spaCy"}
    assert "SpacyRecognizer" in result["recognizers"]
    found = result["findings"]["by_entity"]
    assert found.get("PERSON") == 5 and found.get("LOCATION") == 5, found
    assert not any(p in json.dumps(result) for p in people + places)  # masked examples only


@pytest.mark.parametrize("mode", ["mask", "tag", "fake", "hash"])
def test_each_scrub_mode_removes_every_planted_value_and_keeps_the_rest(analyzer, tmp_path, mode):
    from engine.pii import job, tables
    from engine.pii.scrub import Scrubber

    data = write_csv(tmp_path / "tickets.csv", 40)
    before = data.read_bytes()
    out = tmp_path / f"tickets.{mode}.csv"
    result = job.scrub(data, out, analyzer, Scrubber({}, mode, SALT))
    assert data.read_bytes() == before  # the original is never changed
    text = out.read_text(encoding="utf-8")
    assert not _leaks(text), mode
    assert result["replaced"]["by_entity"] == expected(40)
    assert result["output"]["sha256"] == job.sha256(out) and result["sha256"] == job.sha256(data)
    scrubbed = tables.read(out)
    assert [r[1] for r in scrubbed.rows] == [r[1] for r in tables.read(data).rows]  # labels untouched
    assert "the printer on floor 3 is broken again" in text
    if mode == "tag":
        assert "please reply to <EMAIL_ADDRESS> about the refund" in text
    if mode == "mask":
        assert "my ssn *********** is on the form" in text
    if mode in ("fake", "hash"):  # the same value becomes the same stand-in in every row
        emails = {r[0] for r in scrubbed.rows if r[0].startswith("please reply to")}
        assert len(emails) == 1, emails


def test_fakes_are_consistent_keyed_and_realistic():
    from engine.pii.scrub import Scrubber

    a, b = Scrubber({}, "fake", SALT), Scrubber({}, "fake", b"another-salt-of-sixteen-bytes!!")
    email = PLANTED["EMAIL_ADDRESS"]
    assert a.fake("EMAIL_ADDRESS", email) == Scrubber({}, "fake", SALT).fake("EMAIL_ADDRESS", email)
    assert a.fake("EMAIL_ADDRESS", email) != b.fake("EMAIL_ADDRESS", email)  # the salt keys it
    assert "@" in a.fake("EMAIL_ADDRESS", email) and a.fake("EMAIL_ADDRESS", email) != email
    serial = a.fake("US_PASSPORT", "912803456")  # no Faker provider: the same shape, other digits
    assert len(serial) == 9 and serial.isdigit() and serial != "912803456"
    with pytest.raises(ValueError, match="Unknown scrub mode"):
        Scrubber({"PERSON": "shred"}, "tag", SALT)


def test_chat_files_get_a_column_per_role_and_an_unreadable_line_is_reported_and_left_out(analyzer, tmp_path):
    from engine.pii import job
    from engine.pii.scrub import Scrubber

    email, phone = PLANTED["EMAIL_ADDRESS"], PLANTED["PHONE_NUMBER"]
    lines = [json.dumps({"messages": [{"role": "user", "content": f"my address is {email}"},
                                      {"role": "assistant", "content": f"we will call {phone}"}],
                         "meta": {"agent": "desk 4"}}),
             '{"messages": [{"role": "user", "content": "broken',  # cut off: not JSON
             json.dumps({"messages": [{"role": "user", "content": "no personal data here"}]})]
    data = tmp_path / "chats.jsonl"
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = job.scan(data, analyzer)
    columns = {c["column"]: c["entities"] for c in result["findings"]["columns"]}
    assert columns == {"messages.user": {"EMAIL_ADDRESS": 1}, "messages.assistant": {"PHONE_NUMBER": 1}}
    assert result["rows"] == 2 and result["skipped_rows"] == 1
    assert result["skipped"][0]["line"] == 2 and "not valid JSON" in result["skipped"][0]["reason"]
    out = tmp_path / "chats.scrubbed.jsonl"
    job.scrub(data, out, analyzer, Scrubber({}, "tag", SALT))
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 2 and rows[0]["messages"][0]["content"] == "my address is <EMAIL_ADDRESS>"
    assert rows[0]["meta"] == {"agent": "desk 4"}


def test_image_metadata_gps_and_serials_are_found_and_stripped(analyzer, tmp_path):
    from PIL import Image

    from engine.pii import images, job
    from engine.pii.scrub import Scrubber

    folder = tmp_path / "photos" / "cats"
    folder.mkdir(parents=True)
    im = Image.new("RGB", (32, 32), (120, 60, 30))
    exif = Image.Exif()
    exif[0x013B] = "Jane Photographer"  # Artist
    exif[0x010E] = f"sent by {PLANTED['EMAIL_ADDRESS']}"  # ImageDescription: free text, scanned
    exif.get_ifd(images.EXIF_IFD)[0xA431] = "SN-77812345"  # BodySerialNumber
    exif.get_ifd(images.GPS_IFD).update({1: "N", 2: (48.0, 51.0, 24.0), 3: "E", 4: (2.0, 21.0, 3.0)})
    im.save(folder / "a.jpg", exif=exif, quality=90)
    Image.new("RGB", (32, 32), (1, 2, 3)).save(folder / "b.png")
    result = job.scan(tmp_path / "photos", analyzer)
    found = {c["column"]: c["entities"] for c in result["findings"]["columns"]}
    assert found == {"EXIF GPS": {"LOCATION": 1}, "EXIF Artist": {"PERSON": 1},
                     "EXIF BodySerialNumber": {"DEVICE_SERIAL": 1}, "EXIF ImageDescription": {"EMAIL_ADDRESS": 1}}
    assert result["rows"] == 2 and result["format"] == "images"
    out = tmp_path / "photos.scrubbed"
    job.scrub(tmp_path / "photos", out, analyzer, Scrubber({}, "tag", SALT))
    assert sorted(p.name for p in out.rglob("*.*")) == ["a.jpg", "b.png"]
    assert list(images.metadata(out / "cats" / "a.jpg")) == []
    with Image.open(out / "cats" / "a.jpg") as clean, Image.open(folder / "a.jpg") as orig:
        assert clean.size == orig.size and max(abs(x - y) for x, y in zip(clean.getpixel((5, 5)),
                                                                           orig.getpixel((5, 5)), strict=True)) <= 2
    assert b"SN-77812345" not in (out / "cats" / "a.jpg").read_bytes()


def _finish(c, job_id: str, timeout: float = 300) -> dict:
    return wait_for(lambda: (j := c.call("jobs.get", id=job_id))["state"] in FINAL_STATES and j,
                    timeout=timeout, interval=0.3, what=f"job {job_id} to finish")


def test_the_policy_refuses_unscanned_data_and_nothing_planted_reaches_runs_exports_store_or_logs(
        engine_proc, tmp_path):
    folder = tmp_path / "customers"
    data = write_csv(folder / "tickets.csv", 40)
    train = {"task": "text_classification", "method": {"kind": "full"}, "device": "cpu", "batch_size": 8,
             "max_steps": 3, "eval_every": 3, "checkpoint_every": 3,
             "data": {"path": str(data), "text_column": "text", "label_column": "label", "max_length": 32}}
    with engine_proc.client("pii-test") as c:
        assert c.call("pii.set_policy", folder=str(folder), max_findings=0)["rules"] == \
            [{"folder": str(folder.resolve()), "max_findings": 0}]
        with pytest.raises(RpcError) as refused:
            c.call("jobs.start", kind="train.finetune", spec=train, name="unscanned")
        assert refused.value.code == POLICY_REFUSED and "has not been scanned" in refused.value.message
        assert "ember pii scan" in refused.value.hint

        scan = _finish(c, c.call("jobs.start", kind="pii.scan", spec={"path": str(data)})["id"])
        assert scan["state"] == "succeeded", scan
        assert scan["result"]["findings"]["by_entity"] == expected(40)
        with pytest.raises(RpcError) as refused:
            c.call("jobs.start", kind="train.finetune", spec=train, name="unscrubbed")
        assert "holds 20 findings" in refused.value.message and "Scrub" in refused.value.hint

        modes = {"EMAIL_ADDRESS": "fake", "CREDIT_CARD": "hash", "PHONE_NUMBER": "mask"}
        scrub = _finish(c, c.call("jobs.start", kind="pii.scrub", spec={"path": str(data), "modes": modes})["id"])
        assert scrub["state"] == "succeeded", scrub
        copy = Path(scrub["result"]["output"]["path"])
        assert copy.parent == Path(scrub["run_dir"]) and copy.name == "tickets.scrubbed.csv"
        run = _finish(c, c.call("jobs.start", kind="train.finetune", name="on-scrubbed",
                                spec={**train, "data": {**train["data"], "path": str(copy)}})["id"])
        assert run["state"] == "succeeded", run
        export = _finish(c, c.call("jobs.start", kind="export.model", name="torchscript",
                                   spec={"source_run": run["id"], "formats": ["torchscript"], "parity_samples": 4})["id"])
        assert export["state"] == "succeeded", export

        # The lineage: source file -> scrub (its modes) -> scrubbed copy -> run.
        rec = c.call("jobs.lineage", id=run["id"])
        [train_data] = [d for d in rec["data"] if d["role"] == "train"]
        assert train_data["scrubbed"]["job"] == scrub["id"]
        assert train_data["scrubbed"]["source"]["sha256"] == scan["result"]["sha256"]
        assert train_data["sha256"] == train_data["scrubbed"]["output_sha256"]
        assert any(p["id"] == scrub["id"] for p in rec["parents"])
        from engine.api.lineage_report import to_markdown

        report = to_markdown(rec)
        assert f"scrubbed copy of `{data.resolve()}`" in report and "EMAIL_ADDRESS fake" in report

        audit = c.call("audit.list", limit=100)
        assert {r["action"] for r in audit["records"]} >= {"jobs.start", "pii.set_policy"}
    assert not _leaks(json.dumps(audit, ensure_ascii=False))
    # Every byte the engine keeps: runs (scan, scrub, fine-tune, export), the store, its logs.
    engine_proc.stop()
    home = engine_proc.paths.home
    files = [p for p in home.rglob("*") if p.is_file()]
    exported = [p for p in Path(export["run_dir"]).rglob("*") if p.is_file() and p.stat().st_size > 1_000_000]
    assert exported and any(p.name == "ember.db" for p in files)  # the exported model is among what is read
    for p in files:
        raw = p.read_bytes()
        for value in PLANTED.values():
            assert value.encode() not in raw and value.encode("utf-16-le") not in raw, (p, value)
