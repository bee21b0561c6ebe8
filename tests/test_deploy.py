"""The deployment files agree with the proxy: their configs load, probes hit the real endpoints,
the image runs as non-root with a health check, the drain deadline fits the grace period, Redis
needs a password, the network and disruption policies select the right pods. (`deploy/check`
validates them against the Kubernetes schemas, lints the Dockerfile and runs the checkers
deploy/check_drain.py and deploy/check_pins.py, tested here.)"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from proxai.routing import config as config_module
from proxai.operations import shutdown
from proxai.routing.config import ServerConfig, load_dict
from proxai.mock import Text, Turn
from server_process import ServerProcess
from test_hardening_process import StreamReader, _assert_ended_with_shutdown_error, _config, _wait_for_requests
from test_stream_integrity import ANTHROPIC, CHAT

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
ENV = {"ANTHROPIC_API_KEY": "a", "OPENAI_API_KEY": "o", "PROXAI_API_KEY": "p", "REDIS_URL": "redis://:pw@redis:6379/0"}


def _load_checker(name: str):
    spec = importlib.util.spec_from_file_location(f"deploy_{name}", DEPLOY / f"{name}.py")
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_drain = _load_checker("check_drain")
check_pins = _load_checker("check_pins")


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
    assert proxai["environment"]["REDIS_URL"] == "redis://:${REDIS_PASSWORD:?set REDIS_PASSWORD}@redis:6379/0"
    assert redis["image"].startswith("redis:")
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
    assert cfg_text_timeout(docs) >= 600  # and the proxy waits for them (check_drain: it fits)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert {"secretRef": {"name": "proxai-keys"}} in container["envFrom"]
    assert set(docs[("Secret", "proxai-keys")]["stringData"]) == {"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "PROXAI_API_KEY"}
    assert set(docs[("Secret", "proxai-redis")]["stringData"]) == {"password"}
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
    assert re.search(r"pip install .*-c constraints\.txt '\.\[[^\]]*\bredis\b", text)  # the configs use Redis
    assert re.search(r"^HEALTHCHECK .*", text, re.M) and "/readyz" in text


def cfg_text_timeout(docs) -> float:
    text = docs[("ConfigMap", "proxai-config")]["data"]["proxai.yaml"]
    return load_deploy_config(text).server.shutdown_timeout_secs


# --- drain deadline against grace period (deploy/check_drain.py) ------------------------------


def _deploy_copy(tmp_path: Path) -> Path:
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path / "deploy"


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def _run(checker: str, deploy_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(deploy_dir / f"{checker}.py"), str(deploy_dir)],
                          capture_output=True, text=True, timeout=60)


def test_the_drain_checker_passes_the_shipped_files_and_uses_the_proxys_numbers():
    assert check_drain.check(DEPLOY) == []
    assert _run("check_drain", DEPLOY).returncode == 0
    assert check_drain.DEFAULT_SHUTDOWN_TIMEOUT_SECS == ServerConfig().shutdown_timeout_secs
    # What the proxy does after the deadline (stopped streams' error events, then aiohttp's own
    # shutdown timeout) fits in the margin.
    assert check_drain.MARGIN_SECS >= shutdown.AFTER_DRAIN_SECS * 1.5 + 5
    budgets = {b.grace_name: b for b in check_drain.kubernetes_budgets(DEPLOY / "kubernetes")[0]
               + check_drain.compose_budgets(DEPLOY / "compose.yaml")[0]}
    assert budgets["terminationGracePeriodSeconds"].pre_stop_secs == 5
    assert budgets["terminationGracePeriodSeconds"].config.startswith("configmap.yaml: ConfigMap proxai-config")
    assert budgets["stop_grace_period"].config == "proxai.yaml"


@pytest.mark.parametrize("file, old, new, named", [
    # The grace period too short for the deadline: streams the proxy lets run get killed.
    ("kubernetes/deployment.yaml", "terminationGracePeriodSeconds: 660", "terminationGracePeriodSeconds: 600",
     ["configmap.yaml", "600 s + preStop 5 s + margin 10 s = 615 s exceeds", "deployment.yaml",
      "terminationGracePeriodSeconds 600 s"]),
    ("kubernetes/deployment.yaml", 'command: ["sleep", "5"]', 'command: ["sleep", "60"]',
     ["configmap.yaml", "preStop 60 s", "670 s exceeds", "deployment.yaml"]),
    ("compose.yaml", "stop_grace_period: 11m", "stop_grace_period: 10m",
     ["proxai.yaml", "600 s + preStop 0 s + margin 10 s = 610 s exceeds", "compose.yaml",
      "stop_grace_period 600 s"]),
    # The deadline left at its default under a long grace period: the bug this checker was for.
    ("proxai.yaml", "  shutdown_timeout_secs: 600\n", "",
     ["proxai.yaml", "shutdown_timeout_secs 30 s", "leaves 620 s of compose.yaml", "stop_grace_period 660 s unused"]),
    ("kubernetes/configmap.yaml", "shutdown_timeout_secs: 600", "shutdown_timeout_secs: 300",
     ["configmap.yaml", "shutdown_timeout_secs 300 s", "deployment.yaml", "660 s unused"]),
    ("kubernetes/deployment.yaml", 'command: ["sleep", "5"]', 'command: ["/bin/wait-for-lb"]',
     ["deployment.yaml", "cannot tell how long its preStop hook takes"]),
])
def test_the_drain_checker_fails_a_grace_period_and_deadline_that_disagree(tmp_path, file, old, new, named):
    deploy_dir = _deploy_copy(tmp_path)
    _edit(deploy_dir / file, old, new)
    result = _run("check_drain", deploy_dir)
    assert result.returncode == 1, result.stdout
    problems = result.stderr.strip().splitlines()
    assert len(problems) == 1, problems
    for part in named:
        assert part in problems[0], (part, problems[0])


def test_the_drain_checker_follows_the_config_the_pod_reads(tmp_path):
    deploy_dir = _deploy_copy(tmp_path)
    _edit(deploy_dir / "kubernetes/deployment.yaml", "configMap: {name: proxai-config}", "configMap: {name: other}")
    problems = check_drain.check(deploy_dir)
    assert problems == ["deployment.yaml: Deployment proxai container proxai: cannot find the config file it reads "
                        "(deployment.yaml: Deployment proxai container proxai --config /etc/proxai/config/proxai.yaml)"]


def test_go_durations_as_compose_writes_them():
    assert check_drain.go_duration("10m") == 600
    assert check_drain.go_duration("1m30s") == 90
    assert check_drain.go_duration("1.5h") == 5400
    assert check_drain.go_duration("500ms") == 0.5
    assert check_drain.go_duration(30) == 30
    for bad in ("10", "m", "10 m", "1x"):
        with pytest.raises(ValueError):
            check_drain.go_duration(bad)


class _TimedReader(StreamReader):
    """Notes when its stream ended."""

    def run(self) -> None:
        super().run()
        self.ended = time.monotonic()


def test_the_shipped_deadline_lets_a_stream_longer_than_the_default_finish_and_cuts_a_longer_one(harness, mock, tmp_path):
    """The real process with the shipped deadline scaled down 150 times (600 s -> 4 s): SIGTERM in
    the middle of two streams; one ends after the default's 30 s (scaled: 0.2 s) but within the
    deadline and completes, the other outlives the deadline and ends with the protocol's error;
    the process exits within the margin check_drain allows after the deadline."""
    shipped = cfg_text_timeout(manifests())
    assert load_deploy_config((DEPLOY / "proxai.yaml").read_text()).server.shutdown_timeout_secs == shipped
    scale = 150
    deadline = shipped / scale
    server = ServerProcess(tmp_path, _config(harness, shutdown_timeout_secs=deadline))
    try:
        mock.enqueue(Turn([Text("mid " * 25, chunks=["mid "] * 25)], delay_secs=0.1))  # about 2.5 s
        finishing = _TimedReader(server.url, CHAT, CHAT)
        finishing.start()
        _wait_for_requests(mock, 1)
        mock.enqueue(Turn([Text("tick " * 100, chunks=["tick "] * 100)], delay_secs=0.1))  # about 10 s
        cut = _TimedReader(server.url, ANTHROPIC, CHAT)
        cut.start()
        _wait_for_requests(mock, 2)
        sigterm = time.monotonic()
        server.terminate()
        server.proc.wait(30)
        took = time.monotonic() - sigterm
        for reader in (finishing, cut):
            reader.join(10)
        assert finishing.status == 200 and b"[DONE]" in finishing.data, finishing.data[-300:]
        assert finishing.ended - sigterm > ServerConfig().shutdown_timeout_secs / scale
        _assert_ended_with_shutdown_error(cut)
        assert sorted(r.get("outcome") for r in server.request_records()) == ["complete", "incomplete:shutdown"]
        assert deadline <= took <= deadline + check_drain.MARGIN_SECS
    finally:
        server.stop()


# --- pinned image parts (deploy/check_pins.py) -------------------------------------------------


def test_the_pins_checker_passes_the_shipped_files():
    assert check_pins.check(DEPLOY) == []
    assert _run("check_pins", DEPLOY).returncode == 0


@pytest.mark.parametrize("file, old, new, named", [
    ("Dockerfile", "pip install --no-cache-dir -c constraints.txt '.[fast,otel,redis]'",
     "pip install --no-cache-dir '.[fast,otel,redis]'", "does not install with -c constraints.txt"),
    ("Dockerfile", " deploy/constraints.txt ./", " ./", "does not COPY deploy/constraints.txt"),
    ("Dockerfile", "python:3.11.16-slim-bookworm@sha256:", "python:3.11-slim #", "FROM python:3.11-slim"),
    ("constraints.txt", "aiohttp==", "aiohttp>=", "no pin for 'aiohttp>=3.9'"),
    ("constraints.txt", "\nredis==", "\n#redis==", "no pin for 'redis>=5'"),
    ("kubernetes/redis.yaml", "image: redis:7.4.11-alpine@sha256:", "image: redis:7-alpine #",
     "redis.yaml: StatefulSet proxai-redis: image redis:7-alpine not pinned by digest"),
    ("compose.yaml", "image: redis:7.4.11-alpine@sha256:", "image: redis:7-alpine #",
     "compose.yaml: service redis: image redis:7-alpine not pinned by digest"),
])
def test_the_pins_checker_fails_an_unpinned_part(tmp_path, file, old, new, named):
    deploy_dir = _deploy_copy(tmp_path)
    _edit(deploy_dir / file, old, new)
    result = _run("check_pins", deploy_dir)
    assert result.returncode == 1 and named in result.stderr, result.stderr


def test_a_dependency_added_to_pyproject_needs_a_new_lock(tmp_path):
    deploy_dir = _deploy_copy(tmp_path)
    _edit(tmp_path / "pyproject.toml", '  "orjson>=3.9",\n', '  "orjson>=3.9",\n  "zstandard>=0.22",\n')
    assert check_pins.check(deploy_dir) == ["constraints.txt: no pin for 'zstandard>=0.22' (pyproject.toml); regenerate it"]


# --- Redis: a password and a disk --------------------------------------------------------------


def _env(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def test_kubernetes_redis_needs_the_password_the_proxy_url_carries_and_keeps_its_data():
    docs = manifests()
    redis = docs[("StatefulSet", "proxai-redis")]["spec"]
    container = redis["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    assert args[args.index("--appendonly") + 1] == "yes" and args[args.index("--dir") + 1] == "/data"
    secret_ref = {"secretKeyRef": {"name": "proxai-redis", "key": "password"}}
    assert _env(container)["REDIS_PASSWORD"]["valueFrom"] == secret_ref
    assert {m["name"]: m["mountPath"] for m in container["volumeMounts"]}["data"] == "/data"
    assert [t["metadata"]["name"] for t in redis["volumeClaimTemplates"]] == ["data"]
    assert not any(v.get("emptyDir") for v in redis["template"]["spec"].get("volumes", []))

    proxy = docs[("Deployment", "proxai")]["spec"]["template"]["spec"]["containers"][0]
    env = proxy["env"]
    names = [e["name"] for e in env]
    # The kubelet expands $(NAME) only from variables defined before it.
    assert names.index("REDIS_PASSWORD") < names.index("REDIS_URL")
    assert _env(proxy)["REDIS_PASSWORD"]["valueFrom"] == secret_ref
    assert _env(proxy)["REDIS_URL"]["value"] == "redis://:$(REDIS_PASSWORD)@proxai-redis:6379/0"


def test_compose_redis_needs_the_password_and_keeps_its_data():
    services = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]
    command = services["redis"]["command"]
    assert command[command.index("--requirepass") + 1] == "${REDIS_PASSWORD:?set REDIS_PASSWORD}"
    assert command[command.index("--appendonly") + 1] == "yes"
    assert "redis-data:/data" in services["redis"]["volumes"]
    assert "PONG" in " ".join(services["redis"]["healthcheck"]["test"])  # an unauthenticated ping is NOAUTH


def _start_redis(tmp_path: Path, args: list[str]) -> tuple[subprocess.Popen, int]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install -y redis-server)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([binary, *args, "--port", str(port), "--bind", "127.0.0.1"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("redis-server did not start")


def test_the_shipped_redis_url_reaches_a_redis_started_with_the_shipped_arguments(tmp_path):
    """redis-server with redis.yaml's arguments and the ConfigMap's state section with the
    Deployment's REDIS_URL (the kubelet's $(REDIS_PASSWORD) expansion done here): the store
    opens and keeps a value; with the wrong password it does not open."""
    pytest.importorskip("redis")
    from proxai.state import StateError, create

    docs = manifests()
    password = "0123abcd" * 4
    args = [a.replace("$(REDIS_PASSWORD)", password).replace("/data", str(tmp_path))
            for a in docs[("StatefulSet", "proxai-redis")]["spec"]["template"]["spec"]["containers"][0]["args"]]
    proc, port = _start_redis(tmp_path, args)
    try:
        url_template = _env(docs[("Deployment", "proxai")]["spec"]["template"]["spec"]["containers"][0])["REDIS_URL"]["value"]
        text = docs[("ConfigMap", "proxai-config")]["data"]["proxai.yaml"]

        async def store_for(secret: str):
            url = url_template.replace("$(REDIS_PASSWORD)", secret).replace("proxai-redis:6379", f"127.0.0.1:{port}")
            cfg = load_dict(yaml.safe_load(text), {**ENV, "REDIS_URL": url})
            store = create(cfg.state)
            await store.open()
            return store

        async def scenario():
            store = await store_for(password)
            try:
                assert await store.kv_set("deploy-test", b"kept")
                assert await store.kv_get("deploy-test") == b"kept"
            finally:
                await store.close()
            with pytest.raises(StateError):
                await store_for("wrong")

        asyncio.run(scenario())
        assert (tmp_path / "appendonlydir").is_dir()  # --appendonly yes, under --dir
    finally:
        proc.kill()
        proc.wait(10)


# --- disruption budget and network policy ------------------------------------------------------


def test_the_disruption_budget_covers_the_proxy_pods_and_leaves_one_serving():
    docs = manifests()
    pdb = docs[("PodDisruptionBudget", "proxai")]
    deployment = docs[("Deployment", "proxai")]["spec"]
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["selector"]["matchLabels"]
    assert pdb["spec"]["maxUnavailable"] < min(deployment["replicas"], docs[("HorizontalPodAutoscaler", "proxai")]["spec"]["minReplicas"])


def test_the_network_policies_open_only_the_proxy_port_and_the_egress_it_needs():
    docs = manifests()
    pod = docs[("Deployment", "proxai")]["spec"]["template"]
    redis_pod = docs[("StatefulSet", "proxai-redis")]["spec"]["template"]
    proxy, redis = docs[("NetworkPolicy", "proxai")]["spec"], docs[("NetworkPolicy", "proxai-redis")]["spec"]
    assert proxy["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert redis["podSelector"]["matchLabels"].items() <= redis_pod["metadata"]["labels"].items()
    assert proxy["policyTypes"] == redis["policyTypes"] == ["Ingress", "Egress"]

    port = pod["spec"]["containers"][0]["ports"][0]["containerPort"]
    assert [[(p["protocol"], p["port"]) for p in rule["ports"]] for rule in proxy["ingress"]] == [[("TCP", port)]]
    assert all(peer for rule in proxy["ingress"] for peer in rule["from"])  # no empty peer: "everyone"

    egress = {tuple(sorted((p["protocol"], p["port"]) for p in rule["ports"])): rule["to"] for rule in proxy["egress"]}
    assert set(egress) == {(("TCP", 53), ("UDP", 53)), (("TCP", 6379),), (("TCP", 443),)}
    assert egress[(("TCP", 6379),)] == [{"podSelector": {"matchLabels": redis["podSelector"]["matchLabels"]}}]
    assert egress[(("TCP", 443),)][0]["ipBlock"]["cidr"] == "0.0.0.0/0"
    assert "10.0.0.0/8" in egress[(("TCP", 443),)][0]["ipBlock"]["except"]

    [rule] = redis["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": proxy["podSelector"]["matchLabels"]}}]
    assert rule["ports"] == [{"protocol": "TCP", "port": 6379}]
    assert "egress" not in redis  # Redis reaches nothing
