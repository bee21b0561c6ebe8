"""Check that the drain deadline of each shipped config fits the time its orchestrator waits.

On SIGTERM the proxy waits up to `server.shutdown_timeout_secs` for requests in flight, then
ends the streams still open with an in-stream error and exits a few seconds later. Kubernetes
kills the container `terminationGracePeriodSeconds` after it starts stopping it (the preStop
hook runs first, inside that period); compose kills it `stop_grace_period` after SIGTERM.
A deadline longer than that budget means a stream the proxy would let finish is cut by SIGKILL;
one far shorter cuts streams (`incomplete:shutdown`) the grace period was sized to let finish.

Rules, for every proxy container (one started with `--config`) and the config file it reads:
    needed = shutdown_timeout_secs + preStop + MARGIN_SECS
    needed <= grace period <= needed + SLACK_SECS

    python deploy/check_drain.py [DEPLOY_DIR]
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import yaml

# Covers what the proxy does after the deadline: AFTER_DRAIN_SECS (3 s, proxai/operations/shutdown.py)
# for stopped streams to write their error and for aiohttp to cancel the rest, then exit.
MARGIN_SECS = 10.0
# Room for round numbers; more unused grace than this means the two were sized apart.
SLACK_SECS = 60.0
DEFAULT_SHUTDOWN_TIMEOUT_SECS = 30.0  # ServerConfig.shutdown_timeout_secs
KUBERNETES_DEFAULT_GRACE_SECS = 30.0
COMPOSE_DEFAULT_GRACE_SECS = 10.0

_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


@dataclass
class Budget:
    container: str  # "file: what", for messages
    grace_name: str
    grace_secs: float
    pre_stop_secs: float
    config: str  # where the config text came from, for messages
    config_text: str | None


def go_duration(text: str | int | float) -> float:
    """Seconds in a Go duration ("10m", "1m30s", "90s"), the format of compose's durations."""
    if isinstance(text, (int, float)):
        return float(text)
    text = str(text).strip()
    if text == "0":
        return 0.0
    pos, total = 0, 0.0
    for match in _GO_PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _GO_UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"not a duration: {text!r}")
    return total


def config_path(args: list) -> str | None:
    args = [str(a) for a in args or []]
    for i, arg in enumerate(args):
        if arg == "--config" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
    return None


def pre_stop_secs(container: dict) -> float | None:
    """How long the preStop hook keeps the container before SIGTERM; None when it cannot be told."""
    hook = (container.get("lifecycle") or {}).get("preStop")
    if not hook:
        return 0.0
    if "sleep" in hook:
        return float(hook["sleep"]["seconds"])
    command = [str(c) for c in (hook.get("exec") or {}).get("command") or []]
    if len(command) == 3 and command[1] == "-c" and command[0].endswith("sh"):
        command = command[2].split()
    if len(command) == 2 and command[0].rsplit("/", 1)[-1] == "sleep":
        try:
            return go_duration(command[1] if command[1][-1].isalpha() else command[1] + "s")
        except ValueError:
            return None
    return None


def _under(path: str, mount: str) -> str | None:
    p, m = PurePosixPath(path), PurePosixPath(mount)
    if p == m:
        return ""
    try:
        return str(p.relative_to(m))
    except ValueError:
        return None


def kubernetes_budgets(kube_dir: Path) -> tuple[list[Budget], list[str]]:
    docs = []
    for path in sorted(kube_dir.glob("*.yaml")):
        docs += [(path, doc) for doc in yaml.safe_load_all(path.read_text()) if doc]
    config_maps = {doc["metadata"]["name"]: (path, doc) for path, doc in docs if doc.get("kind") == "ConfigMap"}
    budgets, problems = [], []
    for path, doc in docs:
        if doc.get("kind") not in ("Deployment", "StatefulSet", "DaemonSet"):
            continue
        pod = doc["spec"]["template"]["spec"]
        grace = float(pod.get("terminationGracePeriodSeconds", KUBERNETES_DEFAULT_GRACE_SECS))
        volumes = {v["name"]: v for v in pod.get("volumes") or []}
        for container in pod.get("containers") or []:
            cfg_path = config_path(list(container.get("command") or []) + list(container.get("args") or []))
            if cfg_path is None:
                continue
            where = f"{path.name}: {doc['kind']} {doc['metadata']['name']} container {container['name']}"
            pre_stop = pre_stop_secs(container)
            if pre_stop is None:
                problems.append(f"{where}: cannot tell how long its preStop hook takes (use sleep N)")
                continue
            source, text = f"{where} --config {cfg_path}", None
            for mount in container.get("volumeMounts") or []:
                rest = _under(cfg_path, mount["mountPath"])
                config_map = (volumes.get(mount["name"]) or {}).get("configMap")
                if rest is None or config_map is None:
                    continue
                key = mount.get("subPath") or rest
                for item in config_map.get("items") or []:
                    if item["path"] == key:
                        key = item["key"]
                cm_path, cm = config_maps.get(config_map["name"], (None, None))
                if cm is not None and key in (cm.get("data") or {}):
                    source, text = f"{cm_path.name}: ConfigMap {config_map['name']} key {key}", cm["data"][key]
            budgets.append(Budget(where, "terminationGracePeriodSeconds", grace, pre_stop, source, text))
    return budgets, problems


def compose_budgets(compose_file: Path) -> tuple[list[Budget], list[str]]:
    compose = yaml.safe_load(compose_file.read_text())
    budgets, problems = [], []
    for name, service in (compose.get("services") or {}).items():
        command = service.get("command") or []
        cfg_path = config_path(command.split() if isinstance(command, str) else command)
        if cfg_path is None:
            continue
        where = f"{compose_file.name}: service {name}"
        try:
            grace = go_duration(service.get("stop_grace_period", COMPOSE_DEFAULT_GRACE_SECS))
        except ValueError as exc:
            problems.append(f"{where}: stop_grace_period: {exc}")
            continue
        source, text = f"{where} --config {cfg_path}", None
        for volume in service.get("volumes") or []:
            if not isinstance(volume, str) or ":" not in volume:
                continue
            host, target = volume.split(":")[:2]
            rest = _under(cfg_path, target)
            host_path = compose_file.parent / host / rest if rest is not None else None
            if host_path is not None and host_path.is_file():
                source, text = str(host_path.resolve().relative_to(compose_file.parent.resolve())), host_path.read_text()
        budgets.append(Budget(where, "stop_grace_period", grace, 0.0, source, text))
    return budgets, problems


def shutdown_timeout(config_text: str) -> float:
    value = ((yaml.safe_load(config_text) or {}).get("server") or {}).get("shutdown_timeout_secs")
    if value is None:
        return DEFAULT_SHUTDOWN_TIMEOUT_SECS
    if isinstance(value, str) and "${" in value:
        raise ValueError(f"server.shutdown_timeout_secs comes from the environment ({value}): cannot check it")
    return float(value)


def check(deploy_dir: Path) -> list[str]:
    budgets, problems = kubernetes_budgets(deploy_dir / "kubernetes")
    if (deploy_dir / "compose.yaml").is_file():
        more, more_problems = compose_budgets(deploy_dir / "compose.yaml")
        budgets, problems = budgets + more, problems + more_problems
    for b in budgets:
        if b.config_text is None:
            problems.append(f"{b.container}: cannot find the config file it reads ({b.config})")
            continue
        try:
            timeout = shutdown_timeout(b.config_text)
        except ValueError as exc:
            problems.append(f"{b.config}: {exc}")
            continue
        needed = timeout + b.pre_stop_secs + MARGIN_SECS
        if needed > b.grace_secs:
            problems.append(
                f"{b.config}: server.shutdown_timeout_secs {timeout:g} s + preStop {b.pre_stop_secs:g} s "
                f"+ margin {MARGIN_SECS:g} s = {needed:g} s exceeds {b.container}: {b.grace_name} "
                f"{b.grace_secs:g} s (streams the proxy would let finish get killed)")
        elif b.grace_secs - needed > SLACK_SECS:
            problems.append(
                f"{b.config}: server.shutdown_timeout_secs {timeout:g} s + preStop {b.pre_stop_secs:g} s "
                f"+ margin {MARGIN_SECS:g} s = {needed:g} s leaves {b.grace_secs - needed:g} s of "
                f"{b.container}: {b.grace_name} {b.grace_secs:g} s unused (streams it was sized for "
                f"are cut at {timeout:g} s): raise the one or lower the other")
    if not budgets:
        problems.append(f"{deploy_dir}: no proxy container (one started with --config) found")
    return problems


def main(argv: list[str]) -> int:
    deploy_dir = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent
    problems = check(deploy_dir)
    for problem in problems:
        print(f"drain: {problem}", file=sys.stderr)
    if problems:
        return 1
    print("deploy: drain deadlines fit the grace periods")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
