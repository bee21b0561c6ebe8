"""Every code block of README.md and docs/**/*.md runs. Of docs/generated/, written by
`proxai docs`, that includes the config reference's example, and leaves out rules.md: a copy of
rules/README.md, whose blocks are excerpts of rule files (its worked example is loaded by
tests/test_stream_rules_v2.py).

By the fence's language:
- ```python / ```py: run as a script by this interpreter (the project's venv) against a demo
  server this module starts once, on a free port; `localhost:18080` and `127.0.0.1:18080` in
  the snippet are rewritten to that port first. The environment holds no provider keys.
- ```sh / ```bash / ```shell / ```console, and an indented block whose first line starts with a
  command (`python`, `.venv/bin/...`, `proxai`, `curl`, `export`, ...: COMMAND_LIKE): run by
  bash from the clone's root with the venv's bin first on PATH, the same port rewrite, and curl
  told to fail on an HTTP error. In a block with `$ ` prompts only the prompted lines are
  commands. Only the commands in SHELL_COMMANDS run; any other block must carry a skip marker.
- ```yaml / ```yml: a rule file (top-level `kind:`) goes through `proxai lint`; a config (its
  top-level keys are config keys) through `proxai check-config`, with placeholder providers
  `anthropic`, `openai` and `gemini` appended when it has no `providers:` of its own, and a
  dummy value for every `${VAR}`. Any other YAML must carry a marker.
Other languages (json, toml, none) are not run.

Markers, an HTML comment on the line before the block (blank lines between are allowed; an
indented block needs one, or it would continue the comment):
- `<!-- snippet: skip REASON -->`: not run; the reason is required.
- `<!-- snippet: output -->`: the block shows output, not input.
- `<!-- snippet: continues -->`: a Python block that goes on from the page's previous Python
  block (its variables): that block runs first, in the same script.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
LANGUAGES = {"sh": "shell", "bash": "shell", "shell": "shell", "console": "shell",
             "python": "python", "py": "python", "yaml": "yaml", "yml": "yaml"}
MARKERS = {"skip", "output", "continues"}
# Commands that read or ask and change nothing outside a temporary directory. Installing,
# building, containers and starting a long-running server are not among them: mark those.
SHELL_COMMANDS = {"curl", "proxai", "export", "echo", "printf", "cat", "true"}
PROXAI_SUBCOMMANDS_NOT_RUN = {"serve"}
CONFIG_KEYS = set(json.loads((ROOT / "schemas" / "config.schema.json").read_text())["properties"])
PLACEHOLDER_PROVIDERS = """
providers:
  anthropic: {protocol: anthropic_messages, base_url: "http://127.0.0.1:9", api_key: placeholder}
  openai: {protocol: openai_responses, base_url: "http://127.0.0.1:9/v1", api_key: placeholder}
  gemini: {protocol: gemini_generate_content, base_url: "http://127.0.0.1:9", api_key: placeholder}
"""
COPIES = {ROOT / "docs" / "generated" / "rules.md"}
TIMEOUT = 20
# An indented block has no language: it is a shell block when its first line starts so.
COMMAND_LIKE = re.compile(r"(python3?|\.venv/bin/\S+|proxai|curl|export|pip|npm|docker|kubectl|bash|"
                          r"claude|codex|gemini|for|cd|git|sudo|make|mkdocs|apt-get)(?=\s|$)")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
MARKER = re.compile(r"<!--\s*snippet:\s*(\S+)\s*(.*?)\s*-->")


@dataclass
class Snippet:
    page: str
    line: int
    language: str  # python / shell / yaml
    text: str
    marker: str = ""
    reason: str = ""
    previous: "Snippet | None" = None  # the page's previous Python block, for `continues`

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    return [ROOT / "README.md", *(p for p in sorted((ROOT / "docs").rglob("*.md")) if p not in COPIES)]


def blocks(text: str):
    """(line number, language, body, marker line) of each fenced block, and of each indented
    block whose first line is a command (as "sh")."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence:
            start, (i, body) = i, _fenced(lines, i, fence)
            yield start + 1, fence.group(3).lower(), body, _marker_before(lines, start)
        elif _starts_indented_block(lines, i):
            start, (i, body) = i, _indented(lines, i)
            if COMMAND_LIKE.match(body):
                yield start + 1, "sh", body, _marker_before(lines, start)
        else:
            i += 1


def _fenced(lines: list[str], i: int, fence: re.Match) -> tuple[int, str]:
    indent, mark = len(fence.group(1)), fence.group(2)
    body = []
    i += 1
    while i < len(lines) and not lines[i].strip().startswith(mark):
        body.append(lines[i][indent:] if not lines[i][:indent].strip() else lines[i].lstrip())
        i += 1
    return i + 1, "\n".join(body) + "\n"


def _starts_indented_block(lines: list[str], i: int) -> bool:
    """Four spaces after a blank line that follows an unindented line other than a list item
    (after which four spaces continue the item)."""
    if i < 2 or not lines[i].startswith("    ") or lines[i - 1].strip():
        return False
    before = next((b for b in reversed(lines[:i]) if b.strip()), "")
    return not before.startswith(" ") and not re.match(r"([-*+]|\d+\.)\s", before)


def _indented(lines: list[str], i: int) -> tuple[int, str]:
    body = []
    while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
        body.append(lines[i][4:])
        i += 1
    return i, "\n".join(body).strip("\n") + "\n"


def _marker_before(lines: list[str], index: int) -> str:
    j = index - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    return lines[j].strip() if j >= 0 and MARKER.search(lines[j]) else ""


def snippets_of(page: str, text: str) -> list[Snippet]:
    found: list[Snippet] = []
    last_python = None
    for line, language, body, marker_line in blocks(text):
        kind = LANGUAGES.get(language)
        if kind is None:
            continue
        marker, reason = MARKER.search(marker_line).groups() if marker_line else ("", "")
        snippet = Snippet(page, line, kind, body, marker, reason, last_python)
        found.append(snippet)
        if kind == "python":
            last_python = snippet
    return found


def all_snippets() -> list[Snippet]:
    return [s for p in pages() for s in snippets_of(str(p.relative_to(ROOT)), p.read_text())]


SNIPPETS = all_snippets()


# --- running ------------------------------------------------------------------------------------

def rewrite_port(text: str, url: str) -> str:
    host_port = url.split("//", 1)[1]
    return re.sub(r"\b(?:localhost|127\.0\.0\.1):18080\b", host_port, text)


def clean_env(home: Path) -> dict[str, str]:
    """No provider keys or base URLs from the machine: only what a snippet needs."""
    return {"PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}", "HOME": str(home),
            "PROXAI_HOME": str(home / ".proxai"), "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}


def run(argv: list[str], env: dict[str, str], cwd: Path) -> None:
    try:
        done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"timed out after {TIMEOUT} s: {e.stdout}{e.stderr}") from None
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"


def python_source(snippet: Snippet) -> str:
    if snippet.marker != "continues":
        return snippet.text
    assert snippet.previous, f"{snippet.id}: `continues` but no Python block before it on the page"
    return python_source(snippet.previous) + snippet.text


def run_python(snippet: Snippet, url: str, tmp: Path) -> None:
    script = tmp / "snippet.py"
    script.write_text(rewrite_port(python_source(snippet), url))
    run([sys.executable, str(script)], clean_env(tmp), tmp)


def shell_commands(text: str) -> list[str]:
    """The commands of a block: joined continuation lines; only `$ ` lines when it has prompts."""
    lines = text.splitlines()
    prompted = any(line.startswith("$ ") for line in lines)
    commands: list[str] = []
    continuing = False
    for line in lines:
        if continuing:
            commands[-1] += "\n" + line
        elif prompted and line.startswith("$ "):
            commands.append(line[2:])
        elif not prompted and line.strip() and not line.lstrip().startswith("#"):
            commands.append(line)
        else:
            continue
        continuing = line.endswith("\\")
    return commands


def command_words(command: str) -> list[list[str]]:
    """Each simple command of a line (split at | && || ;), as words, without VAR=value prefixes."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words, current = [], []
    for token in lexer:
        if token in ("|", "||", "&&", ";", "&"):
            words.append(current)
            current = []
        else:
            current.append(token)
    words.append(current)
    return [_without_assignments(w) for w in words if w]


def _without_assignments(words: list[str]) -> list[str]:
    while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
        words = words[1:]
    return words


def not_runnable(command: str) -> str:
    """Why a command may not run here, or ''."""
    for words in command_words(command):
        if not words:
            continue
        name = words[0].removeprefix(".venv/bin/")
        if name not in SHELL_COMMANDS:
            return f"`{words[0]}` is not among the commands that run ({', '.join(sorted(SHELL_COMMANDS))})"
        if name == "proxai" and len(words) > 1 and words[1] in PROXAI_SUBCOMMANDS_NOT_RUN:
            return f"`proxai {words[1]}` starts a long-running server"
        if name == "proxai" and words[1:2] == ["docs"] and "--check" not in words:
            return "`proxai docs` rewrites docs/generated/"
    return ""


def run_shell(snippet: Snippet, url: str, tmp: Path) -> None:
    commands = shell_commands(snippet.text)
    problems = [why for why in map(not_runnable, commands) if why]
    assert not problems, f"{snippet.id}: {problems[0]}: mark the block `<!-- snippet: skip REASON -->`"
    # An HTTP error status must fail the snippet, as it would surprise the reader.
    (tmp / ".curlrc").write_text("fail-with-body\nshow-error\nmax-time = 20\n")
    script = "set -euo pipefail\n" + "\n".join(rewrite_port(c, url) for c in commands) + "\n"
    run(["bash", "-c", script], clean_env(tmp), ROOT)


def yaml_kind(text: str) -> str:
    """'rules', 'config' or '' (neither) for a YAML block, by its top-level keys (read as text,
    so that a block YAML cannot load still goes to the command that places the problem)."""
    keys = set(re.findall(r"^([A-Za-z_][\w-]*):(?:\s|$)", text, re.M))
    if "kind" in keys:
        return "rules"
    return "config" if keys and keys <= CONFIG_KEYS else ""


def run_yaml(snippet: Snippet, tmp: Path) -> None:
    kind = yaml_kind(snippet.text)
    assert kind, (f"{snippet.id}: a YAML block that is neither a config nor a rule file: "
                  "mark it `<!-- snippet: skip REASON -->`")
    env = clean_env(tmp)
    for name in re.findall(r"\$\{(\w+)", snippet.text):
        env[name] = f"dummy-{name.lower()}"
    if kind == "rules":
        (tmp / "rules").mkdir()
        (tmp / "rules" / "snippet.yaml").write_text(snippet.text)
        return run([str(BIN / "proxai"), "lint", str(tmp / "rules")], env, tmp)
    text = snippet.text
    if not re.search(r"^providers:", text, re.M):
        text += PLACEHOLDER_PROVIDERS  # appended, so problems keep the block's line numbers
    (tmp / "proxai.yaml").write_text(text)
    run([str(BIN / "proxai"), "check-config", str(tmp / "proxai.yaml")], env, tmp)


def check(snippet: Snippet, url: str, tmp: Path) -> None:
    {"python": lambda: run_python(snippet, url, tmp), "shell": lambda: run_shell(snippet, url, tmp),
     "yaml": lambda: run_yaml(snippet, tmp)}[snippet.language]()


@pytest.fixture(scope="module")
def demo_url(harness):
    demo = harness.start_demo()
    yield demo.url
    demo.stop()


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.id for s in SNIPPETS])
def test_snippet_runs(snippet: Snippet, demo_url, tmp_path):
    """Runs each block as described in the module docstring (ports rewritten to the demo server's)."""
    if snippet.marker == "skip":
        pytest.skip(snippet.reason)
    if snippet.marker == "output":
        pytest.skip("shows output")
    check(snippet, demo_url, tmp_path)


# --- the markers ----------------------------------------------------------------------------------

def marker_problems(snippets: list[Snippet]) -> list[str]:
    problems = []
    for s in snippets:
        if s.marker and s.marker not in MARKERS:
            problems.append(f"{s.id}: unknown marker `{s.marker}` (known: {', '.join(sorted(MARKERS))})")
        if s.marker == "skip" and not s.reason:
            problems.append(f"{s.id}: `snippet: skip` without a reason")
        if s.marker == "continues" and (s.language != "python" or s.previous is None):
            problems.append(f"{s.id}: `continues` is for a Python block after another")
        elif s.marker == "continues" and s.previous.marker == "skip":
            problems.append(f"{s.id}: `continues` a skipped block, which would run after all")
    return problems


def test_every_marker_is_known_and_every_skip_says_why():
    assert marker_problems(SNIPPETS) == []


def test_every_shell_block_runs_or_is_marked():
    unmarked = [f"{s.id}: {why}" for s in SNIPPETS if s.language == "shell" and not s.marker
                for why in map(not_runnable, shell_commands(s.text)) if why]
    assert unmarked == []


def test_every_yaml_block_is_checked_or_is_marked():
    unmarked = [s.id for s in SNIPPETS if s.language == "yaml" and not s.marker and not yaml_kind(s.text)]
    assert unmarked == []


# --- the runner can fail --------------------------------------------------------------------------

def _dir(path: Path) -> Path:
    path.mkdir()
    return path


def _one(markdown: str) -> Snippet:
    [snippet] = snippets_of("self-test.md", markdown)
    return snippet


def test_a_python_snippet_on_the_wrong_port_fails(demo_url, tmp_path):
    good = 'import openai\nopenai.OpenAI(base_url="http://127.0.0.1:18080/v1", api_key="x", max_retries=0).models.list()\n'
    check(_one(f"```python\n{good}```\n"), demo_url, tmp_path)
    with pytest.raises(AssertionError, match="Connection"):
        check(_one(f"```python\n{good.replace('18080', '9')}```\n"), demo_url, tmp_path)


def test_a_curl_on_a_missing_path_fails(demo_url, tmp_path):
    check(_one("```sh\ncurl -s http://127.0.0.1:18080/healthz\n```\n"), demo_url, tmp_path)
    with pytest.raises(AssertionError, match="404"):
        check(_one("```sh\ncurl -s http://127.0.0.1:18080/v1/nowhere\n```\n"), demo_url, tmp_path)


def test_an_unlisted_command_fails(demo_url, tmp_path):
    with pytest.raises(AssertionError, match="skip REASON"):
        check(_one("```sh\npip install proxai\n```\n"), demo_url, tmp_path)


def test_a_bad_config_and_a_bad_rule_file_fail(tmp_path):
    with pytest.raises(AssertionError, match="unknown provider"):
        check(_one("```yaml\nrouting:\n  routes:\n    - {model_pattern: x, provider: nobody}\n```\n"), "", _dir(tmp_path / "a"))
    with pytest.raises(AssertionError, match="snippet.yaml:"):
        check(_one("```yaml\nkind: tables\ntables: 3\n```\n"), "", _dir(tmp_path / "b"))


def test_a_skip_needs_a_reason_and_markers_are_known():
    assert marker_problems([_one("<!-- snippet: skip -->\n```sh\npip install x\n```\n")])
    assert marker_problems([_one("<!-- snippet: skipp network -->\n```sh\ncurl x\n```\n")])
    assert not marker_problems([_one("<!-- snippet: skip installs packages -->\n\n```sh\npip install x\n```\n")])


def test_a_transcript_runs_its_prompted_lines_and_indented_commands_are_found():
    transcript = "$ proxai lint \\\n    rules\nok: 40 files\n$ echo hi\nhi\n"
    assert shell_commands(transcript) == ["proxai lint \\\n    rules", "echo hi"]
    page = "Run:\n\n    .venv/bin/proxai lint rules\n\nIt prints:\n\n    ok: 40 files\n\n- a list\n\n    export X=1\n"
    assert [(s.line, s.text) for s in snippets_of("p.md", page)] == [(3, ".venv/bin/proxai lint rules\n")]
