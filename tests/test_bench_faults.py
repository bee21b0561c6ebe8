"""The fault benchmark on a tiny budget: it runs, every deployment fails as scheduled, and
no request is retried after its first byte."""

from __future__ import annotations

import json

import pytest

from bench import faults

pytestmark = pytest.mark.timeout(90)


def test_fault_benchmark_runs_and_never_retries_after_the_first_byte(tmp_path):
    out = tmp_path / "faults.json"
    assert faults.main(["--seconds", "6", "--rate", "25", "--json", str(out)]) == 0
    s = json.loads(out.read_text())["summary"]
    assert s["requests"] >= 100
    assert s["retried_after_first_byte"] == 0
    assert s["retried_requests"] > 0  # the faults happened and were retried
    assert s["served_by"].get("east") and s["served_by"].get("west")
    assert s["failed_other"] == 0 and s["client_statuses"] == {"200": s["requests"]}


def test_balanced_scenario_survives_one_deployment_dying(tmp_path):
    """Two deployments round robin, east dies mid-run: west (and the spare) take its share."""
    out = tmp_path / "faults.json"
    assert faults.main(["--scenario", "balanced", "--seconds", "6", "--rate", "25", "--json", str(out)]) == 0
    s = json.loads(out.read_text())["summary"]
    assert s["retried_after_first_byte"] == 0
    assert s["east_503_attempts"] > 0  # east did die
    assert s["served_by"].get("east") and s["served_by"].get("west")
    assert "east" not in s["served_while_east_dead"]
    assert s["failed_other"] == 0 and s["client_statuses"] == {"200": s["requests"]}
