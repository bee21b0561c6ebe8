"""The deployment files agree with the proxy: their configs load, probes hit the real endpoints,
the image runs as non-root with a health check. (`deploy/check` validates them against the
Kubernetes schemas and lints the Dockerfile.)"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from proxai import config as config_module
from proxai.config import load_dict

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
ENV = {"ANTHROPIC_API_KEY": "a", "OPENAI_API_KEY": "o", "PROXAI_API_KEY": "p", "REDIS_URL": "redis://redis:6379/0"}


def manifests() -> dict[tuple[str, str], dict]:
    out = {}
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            out[(doc["kind"], doc["metadata"]["name"])] = doc
    return out


def load_deploy_config(text: str):
    doc = yaml.safe_load(text)
    assert doc["state"] == {"backend": "redis", "url": "${REDIS_URL}"}
    if "state" not in config_module.schema()["properties"]:
        del doc["state"]  # the state store's section, validated where that store is built
    return load_dict(doc, ENV)


def test_compose_config_loads_and_points_at_redis():
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    proxai, redis = compose["services"]["proxai"], compose["services"]["redis"]
    assert proxai["environment"]["REDIS_URL"] == "redis://redis:6379/0" and redis["image"].startswith("redis:")
    assert proxai["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "./proxai.yaml:/etc/proxai/proxai.yaml:ro" in proxai["volumes"]
    cfg = load_deploy_config((DEPLOY / "proxai.yaml").read_text())
    assert cfg.server.host == "0.0.0.0" and cfg.server.api_keys == ("p",)


def test_kubernetes_deployment_probes_config_and_grace():
    docs = manifests()
    assert {kind for kind, _ in docs} >= {"Deployment", "Service", "ConfigMap", "Secret", "HorizontalPodAutoscaler"}
    pod = docs[("Deployment", "proxai")]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["ports"][0]["containerPort"] == 18080
    # Longer than a stream may stay open: the default idle timeout is 120 s, streams run for minutes.
    assert pod["terminationGracePeriodSeconds"] >= 600
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert {"secretRef": {"name": "proxai-keys"}} in container["envFrom"]
    assert set(docs[("Secret", "proxai-keys")]["stringData"]) == {"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "PROXAI_API_KEY"}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    config_arg = container["args"][container["args"].index("--config") + 1]
    assert config_arg.startswith(mounts["config"] + "/")
    cfg = load_deploy_config(docs[("ConfigMap", "proxai-config")]["data"]["proxai.yaml"])
    assert cfg.rules_dir == mounts["rules"]
    hpa = docs[("HorizontalPodAutoscaler", "proxai")]["spec"]
    assert hpa["scaleTargetRef"]["name"] == "proxai" and hpa["minReplicas"] >= 2


def test_configmap_rules_are_valid_rule_files(tmp_path):
    import engine

    data = manifests()[("ConfigMap", "proxai-rules")]["data"]
    for name, text in data.items():
        (tmp_path / name).write_text(text)
    engine.Engine.load(tmp_path)  # raises with file:line on a bad rule
    engine.Engine.load(DEPLOY / "rules")  # the compose override directory


def test_dockerfile_runs_non_root_with_the_fast_extra_and_a_healthcheck():
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^USER (?!root|0\b)\S+", text, re.M)
    assert re.search(r"pip install .*'\.\[fast[,\]]", text)
    assert re.search(r"^HEALTHCHECK .*", text, re.M) and "/readyz" in text
