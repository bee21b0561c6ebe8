"""The descriptors alone (`<protocol>/protocol.yaml` of each rules layer, no codec
compiled): what needs only the protocols' wire surface, such as config validation."""
from __future__ import annotations

from pathlib import Path

from .errors import RuleError
from .protocol import Descriptor
from .ruleset import layer, read_file, rule_dirs
from .wire import Wire


def descriptor_files(directory: Path) -> list[Path]:
    return sorted(p for p in Path(directory).glob("*/protocol.yaml") if p.is_file())


_LOADED: dict = {}


def load(override_dir=None, builtin_dir=None) -> tuple[Wire, list[RuleError]]:
    """The descriptors alone (no codec compiled), for what needs only the wire surface
    (config validation): the built-in rules layered with `override_dir`."""
    dirs = rule_dirs(override_dir, builtin_dir)
    files = [p for d in dirs if Path(d).is_dir() for p in descriptor_files(d)]
    key = tuple((str(p), p.stat().st_mtime_ns) for p in files)
    if key in _LOADED:
        return _LOADED[key]
    sources, problems = [], []
    for path in files:
        src, errs = read_file(path)
        problems.extend(errs)
        if src is not None and not errs:
            sources.append(src)
    layered = layer(sources)
    wire = Wire({n: Descriptor(n, doc, f) for n, (doc, f) in layered.protocols.items()})
    _LOADED[key] = (wire, problems)
    return wire, problems
