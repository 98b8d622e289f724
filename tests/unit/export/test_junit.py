"""The JUnit report, validated against the schema Jenkins' xUnit plugin reads."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema

from tests.fixtures.export_runs import FINDINGS, OUTSIDE, write_export_run
from tests.fixtures.run_folders import write_run
from workbench.export.records import read_run
from workbench.export.to_junit import junit_xml, write_junit

SCHEMA = Path(__file__).resolve().parents[2] / "fixtures" / "junit" / "junit-10.xsd"


@pytest.fixture(scope="module")
def schema():
    return xmlschema.XMLSchema(SCHEMA)


def test_a_case_per_notebook_and_per_finding_blocker_fails_attention_skips(tmp_path, schema):
    run = read_run(write_export_run(tmp_path / "run"))
    path = write_junit([run], tmp_path / "junit.xml")
    schema.validate(str(path))
    suite = ET.parse(path).getroot().find("testsuite")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert set(cases) == {"01_baseline", "02_op_coverage", OUTSIDE, *(f.reason for f in FINDINGS)}
    assert cases[OUTSIDE].find("failure").get("message") == FINDINGS[0].reason
    assert cases[FINDINGS[0].reason].find("failure") is not None
    assert cases[FINDINGS[1].reason].find("skipped").get("message") == FINDINGS[1].reason
    assert list(cases["01_baseline"]) == [cases["01_baseline"].find("system-out")]  # a pass
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("5", "2", "1")


def test_attention_is_skipped_with_its_reason_and_several_runs_share_one_file(tmp_path, schema):
    runs = [
        read_run(write_run(tmp_path / name, started=f"2026-12-0{i}T00:00:00+00:00", verdict=v))
        for i, (name, v) in enumerate((("a", "attention"), ("b", "pass")), 1)
    ]
    text = junit_xml(runs)
    schema.validate(text)
    root = ET.fromstring(text)
    assert [s.get("name") for s in root] == ["workbench a", "workbench b"]
    skipped = root.find("testsuite/testcase[@name='01_baseline']/skipped")
    assert skipped.get("message") == "01_baseline judged attention"
    assert root.get("failures") == "0"


def test_a_notebook_that_did_not_finish_is_an_error(tmp_path, schema):
    run = read_run(write_run(tmp_path / "run", started="2026-12-01T00:00:00+00:00"))
    run.notebooks[0].status = "timeout"
    text = junit_xml([run])
    schema.validate(text)
    error = ET.fromstring(text).find("testsuite/testcase[@name='01_baseline']/error")
    assert error.get("type") == "timeout"
