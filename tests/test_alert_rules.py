"""The Alertmanager rule file of docs/monitoring.md is valid YAML in
Prometheus' rule format, and names only metrics and states that exist."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from dramatiq_cron_middleware.monitoring.records import HEALTH_STATES

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "monitoring.md"
METRICS = ROOT / "dramatiq_cron_middleware" / "metrics.py"


def rule_file() -> Any:
    (block,) = re.findall(r"^```yaml\n(.*?)^```$", DOC.read_text(), flags=re.S | re.M)
    return yaml.safe_load(block)


def test_the_rule_file_is_yaml_in_prometheus_rule_format() -> None:
    document = rule_file()
    assert list(document) == ["groups"]
    (group,) = document["groups"]
    assert group["name"] and group["rules"]
    names = [rule["alert"] for rule in group["rules"]]
    assert len(set(names)) == len(names)
    for rule in group["rules"]:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
        assert isinstance(rule["expr"], str) and rule["expr"].strip()
        assert rule["labels"]["severity"] in ("critical", "warning")
        assert rule["annotations"]["summary"]
        if "for" in rule:
            assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["for"]
        assert rule["expr"].count("(") == rule["expr"].count(")")


def test_the_rules_name_only_exported_metrics_and_known_health_states() -> None:
    exported = set(re.findall(r'"(dramatiq_cron_\w+)"', METRICS.read_text()))
    for rule in rule_file()["groups"][0]["rules"]:
        for metric in re.findall(r"dramatiq_cron_\w+", rule["expr"]):
            assert re.sub(r"_total$", "", metric) in exported, metric
        for states in re.findall(r'state=~"([^"]+)"', rule["expr"]):
            assert set(states.split("|")) <= set(HEALTH_STATES), states
