"""The codecs' wire output is byte-identical to the golden files in tests/golden/: every
captured codec-test input and every recorded corpus item, toward every protocol (see
tests/golden/generate.py for what is recorded and how ids and clocks are pinned).

A failure prints the first differing (case, target) as a diff. When the change of wire
output is intended, regenerate with `python tests/golden/generate.py` and review the diff.
"""
from __future__ import annotations

import difflib
import gzip
import json

import orjson
import pytest

from golden import generate as G


def _pretty(line: dict) -> list[str]:
    if "error" in line:
        return ["error: " + json.dumps(line["error"], ensure_ascii=False)]
    wire = line["wire"]
    if wire.startswith(("{", "[")):
        return json.dumps(json.loads(wire), indent=1, ensure_ascii=False).splitlines()
    return wire.splitlines()


def first_difference(expected: list[dict], actual: list[dict]) -> str | None:
    """None when equal, else a report on how many lines differ and a diff of the first."""
    want = {(line["case"], line["to"]): line for line in expected}
    got = {(line["case"], line["to"]): line for line in actual}
    missing, extra = sorted(want.keys() - got.keys()), sorted(got.keys() - want.keys())
    changed = [key for key in want if key in got and want[key] != got[key]]
    if not (missing or extra or changed):
        return None
    report = [f"{len(changed)} changed, {len(missing)} missing, {len(extra)} new (case, target) outputs"]
    if changed:
        case, to = changed[0]
        report.append(f"first change: case {case!r} toward {to}:")
        report += difflib.unified_diff(_pretty(want[changed[0]]), _pretty(got[changed[0]]),
                                       "golden", "now", lineterm="", n=2)
        if _pretty(want[changed[0]]) == _pretty(got[changed[0]]):
            report.append("(same JSON value: the bytes differ in key order or spacing)")
            report.append(f"golden: {want[changed[0]]['wire'][:400]}")
            report.append(f"now:    {got[changed[0]]['wire'][:400]}")
    if missing:
        report.append(f"first missing: {missing[0]}")
    if extra:
        report.append(f"first new: {extra[0]}")
    return "\n".join(report)


def _lines(raw: bytes) -> list[dict]:
    return [orjson.loads(line) for line in raw.splitlines() if line.strip()]


def test_codec_fixtures_and_client_recordings_wire_output_is_unchanged():
    cases = G.read_cases()
    assert len(cases) > 100, "tests/golden/cases.jsonl lost its cases (python tests/golden/generate.py --capture)"
    diff = first_difference(_lines(G.CODEC.read_bytes()), [*G.codec_lines(cases), *G.fixture_lines()])
    assert diff is None, diff


def test_recorded_corpus_wire_output_is_unchanged():
    expected = _lines(gzip.decompress(G.CORPUS_OUT.read_bytes()))
    assert {line["case"] for line in expected} == set(G.corpus_items()), \
        "the corpus changed: regenerate with python tests/golden/generate.py"
    diff = first_difference(expected, list(G.corpus_lines()))
    assert diff is None, diff


def test_captured_cases_cover_every_kind_and_protocol():
    kinds = {(c["kind"], c["source"]) for c in G.read_cases()}
    for kind in ("request", "ir_request", "response", "ir_response", "stream"):
        for protocol in G.PROTOCOLS:
            assert (kind, protocol) in kinds, (kind, protocol)


def test_the_comparison_reports_a_changed_byte_with_its_case():
    line = next(line for line in _lines(G.CODEC.read_bytes()) if line.get("wire", "").startswith("{"))
    assert first_difference([line], [dict(line)]) is None
    value = json.loads(line["wire"])
    reordered = dict(reversed(list(value.items())))  # other key order: other bytes
    diff = first_difference([line], [dict(line, wire=orjson.dumps(reordered).decode())])
    assert diff is not None and line["case"] in diff and line["to"] in diff
    diff = first_difference([line], [dict(line, wire=json.dumps(value))])  # other spacing only
    assert diff is not None and "key order or spacing" in diff


@pytest.mark.parametrize("kind", ["request", "response"])
def test_output_is_deterministic_across_runs(kind):
    case = next(c for c in G.read_cases() if c["kind"] == kind)
    once, twice = list(G.codec_lines([case])), list(G.codec_lines([case]))
    assert once == twice
