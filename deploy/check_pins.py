"""Check that the image is built from pinned parts: base and third-party images by digest, and
the Python dependencies from deploy/constraints.txt, which must pin every runtime dependency
(pyproject.toml's, plus those of the extras the Dockerfile installs) to one version.

    python deploy/check_pins.py [DEPLOY_DIR]
"""

from __future__ import annotations

import re
import shlex
import sys
import tomllib
from pathlib import Path

import yaml

CONSTRAINTS = "constraints.txt"
OWN_IMAGE = "proxai"  # built from this repository, tagged by whoever deploys it
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1)).lower()


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def pinned_constraints(path: Path) -> tuple[dict[str, str], list[str]]:
    pins, problems = {}, []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line)
        if match is None:
            problems.append(f"{path.name}:{number}: {line!r} does not pin one version (name==version)")
            continue
        pins[_name(match.group(1))] = match.group(2)
    return pins, problems


def check_dockerfile(deploy_dir: Path, pyproject: dict) -> list[str]:
    problems = []
    dockerfile = deploy_dir / "Dockerfile"
    instructions = dockerfile_instructions(dockerfile.read_text())
    for word, rest in instructions:
        if word == "FROM" and not _DIGEST.search(rest.split()[0]):
            problems.append(f"Dockerfile: FROM {rest}: not pinned by digest (name:tag@sha256:...)")
    copied = None
    for word, rest in instructions:
        if word == "COPY":
            *sources, dest = shlex.split(rest)
            if f"deploy/{CONSTRAINTS}" in sources:
                copied = CONSTRAINTS if dest.endswith("/") or dest == "." else dest
    if copied is None:
        problems.append(f"Dockerfile: does not COPY deploy/{CONSTRAINTS} into the image")
    extras: set[str] = set()
    installs = 0
    for word, rest in instructions:
        if word != "RUN":
            continue
        for command in re.split(r"&&|;", rest):
            args = shlex.split(command)
            if len(args) < 2 or args[0] not in ("pip", "pip3") or args[1] != "install":
                continue
            installs += 1
            constraint = next((args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-c", "--constraint")), None)
            if constraint is None or Path(constraint).name != Path(copied or CONSTRAINTS).name:
                problems.append(f"Dockerfile: `{command.strip()}` does not install with -c {CONSTRAINTS}")
            for arg in args:
                if match := re.fullmatch(r"\.\[([^\]]*)\]", arg):
                    extras |= {e.strip() for e in match.group(1).split(",")}
    if installs == 0:
        problems.append("Dockerfile: no pip install found")
    pins, pin_problems = pinned_constraints(deploy_dir / CONSTRAINTS)
    problems += pin_problems
    project = pyproject["project"]
    wanted = list(project.get("dependencies", []))
    for extra in sorted(extras):
        wanted += project.get("optional-dependencies", {}).get(extra, [])
    for requirement in wanted:
        if _name(requirement) not in pins:
            problems.append(f"{CONSTRAINTS}: no pin for {requirement!r} (pyproject.toml); regenerate it")
    return problems


def check_images(deploy_dir: Path) -> list[str]:
    images = []
    compose = yaml.safe_load((deploy_dir / "compose.yaml").read_text())
    for name, service in (compose.get("services") or {}).items():
        if "image" in service and "build" not in service:
            images.append((f"compose.yaml: service {name}", service["image"]))
    for path in sorted((deploy_dir / "kubernetes").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            pod = ((doc or {}).get("spec") or {}).get("template", {}).get("spec") or {}
            for container in pod.get("containers", []) + pod.get("initContainers", []):
                images.append((f"{path.name}: {doc['kind']} {doc['metadata']['name']}", container["image"]))
    return [f"{where}: image {image} not pinned by digest" for where, image in images
            if image.split(":")[0] != OWN_IMAGE and not _DIGEST.search(image)]


def check(deploy_dir: Path) -> list[str]:
    pyproject = tomllib.loads((deploy_dir.parent / "pyproject.toml").read_text())
    return check_dockerfile(deploy_dir, pyproject) + check_images(deploy_dir)


def main(argv: list[str]) -> int:
    deploy_dir = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent
    problems = check(deploy_dir)
    for problem in problems:
        print(f"pins: {problem}", file=sys.stderr)
    if problems:
        return 1
    print("deploy: images pinned by digest, dependencies installed from constraints.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
