"""Loading rule files: parse with line numbers, validate against the rule schema,
layer an override directory on top of the built-in rules, compile once."""
from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import jsonschema
import yaml

from . import diagnose, yamlsrc
from .errors import RuleError, suggestion
from .protocol import Descriptor, compile_descriptor, shared_templates
from .tables import Table
from .template import _MISS

def _data_root() -> Path:
    """Where rules/ and schemas/ live: beside the packages in a source checkout or an
    editable install, under <prefix>/share/proxai in a regular install."""
    source = Path(__file__).resolve().parent.parent
    if (source / "rules").is_dir():
        return source
    installed = Path(sys.prefix) / "share" / "proxai"
    return installed if (installed / "rules").is_dir() else source


ROOT = _data_root()
BUILTIN_RULES = ROOT / "rules"
SCHEMAS = ROOT / "schemas"

_validator = None


def rules_validator():
    global _validator
    if _validator is None:
        schema = json.loads((SCHEMAS / "rules.schema.json").read_text())
        # The template language (generated from the construct registry) joins the
        # rule schema's definitions: one resource, so no cross-file reference lookups.
        templates = json.loads((SCHEMAS / "templates.schema.json").read_text())
        schema["$defs"] = {**schema["$defs"], **templates["$defs"]}
        _validator = jsonschema.Draft202012Validator(schema)
    return _validator


def display_path(path: Path) -> str:
    try:
        return os.path.relpath(path)
    except ValueError:
        return str(path)


@dataclass
class SourceFile:
    path: str
    doc: dict
    duplicates: list = field(default_factory=list)


def _node_line(doc, path) -> int:
    """The line of the deepest Located node on a jsonschema error path."""
    node, line = doc, getattr(doc, "line", 0)
    for step in path:
        if isinstance(node, yamlsrc.Located):
            line = node.key_lines.get(step, node.line)
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            break
        line = getattr(node, "line", line)
    return line or None


def read_file(path: Path) -> tuple[SourceFile | None, list[RuleError]]:
    """Parse and schema-check one file; returns the file and its problems."""
    name = display_path(path)
    try:
        text = path.read_text(encoding="utf-8")
        doc, duplicates = yamlsrc.load(text, name)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        return None, [RuleError(f"YAML syntax: {getattr(err, 'problem', err)}", name, mark.line + 1 if mark else None)]
    except (OSError, UnicodeDecodeError) as err:
        return None, [RuleError(f"cannot read: {err}", name, None)]
    problems = [RuleError(f"duplicate key {key!r}", name, line) for line, key in duplicates]
    if not isinstance(doc, dict):
        return None, problems + [RuleError("a rule file is a YAML mapping", name, 1)]
    for err in sorted(_schema_errors(text, doc), key=lambda e: list(map(str, e.absolute_path))):
        worded = _construct_problem(doc, err.absolute_path)
        if worded is not None:
            problems.append(worded)
            continue
        where = "/".join(map(str, err.absolute_path)) or "(top)"
        line = _node_line(doc, err.absolute_path)
        if _unexpected(err):  # at the first unexpected key, not at the mapping that has it
            line = getattr(err.instance, "key_lines", {}).get(_unexpected(err)[0]) or line
        problems.append(RuleError(f"{where}: {_schema_message(err)}", name, line))
    return SourceFile(name, doc, duplicates), _unique(problems)


def _schema_message(err) -> str:
    """jsonschema's message, with a "did you mean" for a misspelt enum value (a kind,
    a protocol, an option) or key."""
    if err.validator == "enum" and isinstance(err.instance, str):
        hint = suggestion(err.instance, err.validator_value)
        if hint:
            return f"{err.message}; {hint}"
    hints = [(k, suggestion(k, err.schema["properties"])) for k in _unexpected(err)]
    hints = [(k, h) for k, h in hints if h]
    if len(hints) == 1:
        return f"{err.message}; {hints[0][1]}"
    if hints:
        return f"{err.message}; did you mean " + ", ".join(f"{h[len('did you mean '):-1]} (for {k})" for k, h in hints) + "?"
    return err.message


def _unexpected(err) -> list:
    """The keys an additionalProperties error is about."""
    if err.validator != "additionalProperties" or not isinstance(err.instance, dict) or "properties" not in err.schema:
        return []
    return [k for k in err.instance if k not in err.schema["properties"]]


_verdicts: dict = {}


def _schema_errors(text: str, doc) -> list:
    """Schema errors of a rule file; a file already found valid in this process (the
    built-in rules, loaded by every Engine) is not validated again."""
    key = hashlib.sha256(text.encode()).digest()
    if key in _verdicts:
        return []
    errors = list(rules_validator().iter_errors(doc))
    if not errors:
        _verdicts[key] = True
    return errors


def _construct_problem(doc, path) -> RuleError | None:
    """A schema error inside a template, worded as the compiler words it (the nearest
    construct node on the error's path that the registry finds a problem with)."""
    from .registry import construct_problem

    nodes, node = [doc], doc
    for step in path:
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            break
        nodes.append(node)
    for node in reversed(nodes):
        if isinstance(node, yamlsrc.Located):
            problem = construct_problem(node)
            if problem is not None:
                message, key = problem
                return RuleError(message, node.file, node.key_lines.get(key, node.line))
    return None


def rule_files(directory: Path) -> list[Path]:
    return sorted(p for p in Path(directory).rglob("*.yaml") if p.is_file()) + sorted(
        p for p in Path(directory).rglob("*.yml") if p.is_file())


@dataclass
class Layered:
    """Rule documents after layering: tables by name, codecs by (kind, protocol)."""
    tables: dict = field(default_factory=dict)       # name -> (table dict, file)
    enums: dict = field(default_factory=dict)        # name -> (values, file, line)
    codecs: dict = field(default_factory=dict)       # (kind, protocol) -> (doc, file)
    protocols: dict = field(default_factory=dict)    # protocol -> (descriptor doc, file)


_MERGED_KEYS = ("on", "templates", "state", "params")
#: protocol.yaml sections merged key by key under an override (the rest replace).
_PROTOCOL_MERGED_KEYS = ("templates", "endpoints", "headers", "upstream", "stream", "errors", "models", "summary", "gen_ai", "state")


def _merge_sections(base, doc, keys):
    merged = yamlsrc.Located(base, file=doc.file, line=doc.line, key_lines={**base.key_lines, **doc.key_lines})
    for k, v in doc.items():
        if k in keys and isinstance(base.get(k), dict) and isinstance(v, dict):
            section = yamlsrc.Located(base[k], file=v.file, line=v.line, key_lines={**base[k].key_lines, **v.key_lines})
            section.update(v)
            merged[k] = section
        else:
            merged[k] = v
    return merged


def layer(files: list[SourceFile], into: Layered | None = None) -> Layered:
    """Later files win: table entries one by one, codec sections key by key."""
    out = into or Layered()
    for src in files:
        doc, kind = src.doc, src.doc.get("kind")
        if kind == "tables":
            for table in doc.get("tables", []):
                name = table["name"]
                if name in out.tables:
                    base, _ = out.tables[name]
                    merged = yamlsrc.Located(base, file=table.file, line=table.line, key_lines=table.key_lines)
                    merged_map = yamlsrc.Located(base["map"], file=base["map"].file, line=base["map"].line,
                                                 key_lines=dict(base["map"].key_lines))
                    for key, value in table["map"].items():
                        merged_map[key] = value
                        merged_map.key_lines[key] = table["map"].key_lines.get(key)
                    merged.update({k: v for k, v in table.items() if k != "map"})
                    merged["map"] = merged_map
                    out.tables[name] = (merged, src.path)
                else:
                    out.tables[name] = (table, src.path)
        elif kind == "enums":
            for name, values in doc["enums"].items():
                out.enums[name] = (list(values), src.path, doc["enums"].key_lines.get(name))
        elif kind == "protocol":
            name = doc["protocol"]
            if name in out.protocols:
                base, _ = out.protocols[name]
                out.protocols[name] = (_merge_sections(base, doc, _PROTOCOL_MERGED_KEYS), src.path)
            else:
                out.protocols[name] = (doc, src.path)
        else:
            key = (kind, doc.get("protocol"))
            if key in out.codecs:
                base, _ = out.codecs[key]
                out.codecs[key] = (_merge_sections(base, doc, _MERGED_KEYS), src.path)
            else:
                out.codecs[key] = (doc, src.path)
    return out


def build_tables(layered: Layered) -> dict[str, Table]:
    tables = {}
    for name, (doc, file) in layered.tables.items():
        tables[name] = Table(name, doc["from"], doc["map"], doc.get("default", _MISS), f"{file}:{doc.line}")
    return tables


#: Built-in rule files of these kinds may still use v1 idioms (they are compiled as
#: before); every other file, and every file of a rules_dir, must be v2.
#: tests/test_registry.py fails once these files no longer need it.
V1_TOLERATED_KINDS: frozenset = frozenset()


def read_dirs(dirs: list[Path], sources: list | None = None) -> tuple[Layered, list[RuleError]]:
    """Read and layer ``dirs`` in order; files with problems are left out (and reported).
    ``sources``, when given, receives every file read, with the directory it came from."""
    layered, problems = Layered(), []
    for directory in dirs:
        directory = Path(directory)
        if not directory.is_dir():
            problems.append(RuleError(f"rules directory not found: {directory}"))
            continue
        files = []
        for path in rule_files(directory):
            src, errs = read_file(path)
            problems.extend(errs)
            if src is not None and not errs:
                files.append(src)
                if sources is not None:
                    sources.append((directory, src))
        layer(files, layered)
    return layered, problems


@dataclass
class Rules:
    """Everything the engine runs, compiled: codecs and streams by (kind, protocol)."""
    codecs: dict
    streams: dict
    tables: dict
    enums: dict
    protocols: dict = field(default_factory=dict)   # protocol -> engine.protocol.Descriptor


def rule_dirs(override_dir=None, builtin_dir=None) -> list[Path]:
    """The layers the server loads: the built-in rules, then ``rules_dir`` if any."""
    builtin = Path(builtin_dir) if builtin_dir else BUILTIN_RULES
    dirs = [builtin]
    if override_dir and Path(override_dir).resolve() != builtin.resolve():
        dirs.append(Path(override_dir))
    return dirs


def load_rules(override_dir=None, builtin_dir=None, found: list | None = None, observe=None) -> tuple[Rules, list[RuleError]]:
    """Read, check and compile the rules as the server runs them; returns the rules
    and every problem found, in file order (the server refuses to start on the first,
    ``proxai lint`` prints them all). ``found`` collects v1 idioms (see the migration);
    ``observe(selector, where, depth)`` sees every selector compiled."""
    from . import checks
    from .codec import Codec
    from .registry import HOOKS
    from .stream import StreamRules
    from .template import Compiler
    from .wire import protocol_hooks

    dirs = rule_dirs(override_dir, builtin_dir)
    entry = None
    if found is None and observe is None:  # the linter's migration and selector walks compile for real
        from . import cache

        entry = cache.key(dirs, HOOKS, rule_files, SCHEMAS)
        cached = cache.load(entry) if entry else None
        if cached is not None:
            return cached, []
    sources: list = []
    layered, problems = read_dirs(dirs, sources)
    legacy = {src.path for directory, src in sources
              if directory == dirs[0] and src.doc.get("kind") in V1_TOLERATED_KINDS}
    tables = build_tables(layered)
    own_hooks, hook_problems = protocol_hooks(layered.protocols)  # a protocol folder's own hooks module
    HOOKS = {**HOOKS, **own_hooks}
    problems.extend(hook_problems)
    builtin = [src.doc for directory, src in sources if directory == dirs[0]]
    ctx = checks.CheckContext(HOOKS, {n: d for n, (d, _) in layered.tables.items()}, tables,
                              {n: v for n, (v, _, _) in layered.enums.items()}, checks.ir_event_fields(SCHEMAS), legacy,
                              {n: d for n, (d, _) in layered.protocols.items()},
                              builtin_tables={t["name"]: t for doc in builtin for t in doc.get("tables") or []},
                              table_refs=checks.table_refs([d for d, _ in (*layered.codecs.values(), *layered.protocols.values())]))
    for _, src in sources:
        for check in checks.CHECKS:
            try:
                problems.extend(RuleError(problem, src.path, line) for line, problem in check(ctx, src.doc))
            except (KeyError, TypeError, AttributeError):
                continue  # a shape the schema check reported
    codecs, streams, protocols = {}, {}, {}
    for name, (doc, file) in layered.protocols.items():
        try:
            protocols[name] = compile_descriptor(name, doc, file, HOOKS, tables)
        except RuleError as err:
            problems.append(err)
            protocols[name] = Descriptor(name, doc, file)
    builtin_codecs = {(doc["kind"], doc.get("protocol")) for doc in builtin}
    for (kind, protocol), (doc, file) in layered.codecs.items():
        if protocol not in layered.protocols:
            hint = suggestion(protocol, layered.protocols)
            problems.append(RuleError(f"unknown protocol {protocol!r} (no rules folder has its protocol.yaml)"
                                      + (f"; {hint}" if hint else ""), file, doc.key_lines.get("protocol", doc.line)))
            continue
        missing = _missing_key(kind, protocol, doc, file, (kind, protocol) in builtin_codecs)
        if missing is not None:
            problems.append(missing)
            continue
        # A codec file's templates, and its protocol's shared ones as `protocol.<name>`.
        named = shared_templates(layered.protocols.get(protocol, (None,))[0], file, doc.get("templates") or {})
        compiler = Compiler(file, HOOKS, tables, named, legacy=legacy, found=found, observe=observe)
        try:
            if kind.startswith("stream."):
                streams[(kind, protocol)] = StreamRules(doc, compiler)
            else:
                codecs[(kind, protocol)] = Codec(doc, compiler)
        except RuleError as err:
            # The compiler stops at the first problem; the file's others, part by part.
            def checking(named, file=file):
                return Compiler(file, HOOKS, tables, named, legacy=legacy, observe=lambda *_: None)

            problems.extend(sorted(_unique([err, *diagnose.problems_of(kind, doc, named, checking)]),
                                   key=lambda p: (p.file or "", p.line or 0)))
    enums = {name: values for name, (values, _, _) in layered.enums.items()}
    rules, problems = Rules(codecs, streams, tables, enums, protocols), _unique(problems)
    if entry and not problems:
        cache.store(entry, rules, _generated_lines(), own_hooks.values())
    return rules, problems


def _generated_lines() -> dict:
    """The generated functions' source lines (engine.codegen puts them in linecache), for
    tracebacks of an engine loaded from the cache."""
    import linecache

    return {name: lines for name, lines in list(linecache.cache.items())
            if name.startswith(("<template ", "<conditions ", "<transition "))}


def _missing_key(kind, protocol, doc, file, has_builtin) -> RuleError | None:
    """An override names only the keys it changes; the layered result must still have
    what every codec needs (`output`, a stream's `on`)."""
    key = "on" if kind.startswith("stream.") else "output"
    if key in doc:
        return None
    if has_builtin:
        return RuleError(f"`{key}` is required", file, doc.line)
    return RuleError(f"`{key}` is required: no built-in {kind} file for {protocol} provides it", file, doc.line)


def _unique(problems: list) -> list:
    seen, out = set(), []
    for p in problems:
        if str(p) not in seen:
            seen.add(str(p))
            out.append(p)
    return out


def load_layers(directory: Path, found: list | None = None):
    """`load_rules` for one directory as ``proxai lint`` and the migration see it: an
    override over the built-in rules, or the built-in rules themselves."""
    return load_rules(directory, found=found)
