"""A route's model pattern, compiled: exact, glob or regex, with the upstream_model
rewrite its `$` placeholders describe.

match_kind `auto` picks the kind from the pattern: regex when it contains one
of `^ $ ( ) | + { } \\`, glob when it contains `* ? [`, otherwise exact.
Regex and glob patterns must match the whole model name. A leaf module: the config
checks routes with it and the router matches with it.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any, Callable

_REGEX_CHARS = frozenset("^$()|+{}\\")
_GLOB_CHARS = frozenset("*?[")
# $1, ${1}, $name; $$ is a literal dollar. (${name} would be read as an environment variable.)
_PLACEHOLDER = re.compile(r"\$(?:\$|(\d+)|\{(\d+)\}|([A-Za-z_]\w*))")


def resolve_kind(route: Any) -> str:
    if route.match_kind != "auto":
        return route.match_kind
    chars = set(route.model_pattern)
    if chars & _REGEX_CHARS:
        return "regex"
    if chars & _GLOB_CHARS:
        return "glob"
    return "exact"


class _RouteError(ValueError):
    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class CompiledRoute:
    config: Any  # the route's RouteConfig (proxai.routing.config)
    kind: str
    matcher: Callable[[str], "re.Match[str] | bool | None"]

    def rewrite(self, model: str, match: "re.Match[str] | bool") -> str:
        target = self.config.upstream_model
        if target is None:
            return model
        if self.kind != "regex" or not isinstance(match, re.Match):
            return target

        def sub(m: re.Match[str]) -> str:
            if m.group(0) == "$$":
                return "$"
            key = m.group(1) or m.group(2) or m.group(3)
            return match.group(int(key) if key.isdigit() else key) or ""

        return _PLACEHOLDER.sub(sub, target)


def compile_route(route: Any) -> CompiledRoute:
    """Compile one route (a RouteConfig); ValueError (with .field) names what is wrong."""
    kind = resolve_kind(route)
    pattern = route.model_pattern
    if kind == "exact":
        folded = pattern.casefold()
        matcher: Callable[[str], object] = lambda model: model.casefold() == folded  # noqa: E731
    else:
        source = fnmatch.translate(pattern) if kind == "glob" else pattern
        try:
            rx = re.compile(source, re.IGNORECASE)
        except re.error as exc:
            raise _RouteError(f"invalid regular expression: {exc}", "model_pattern") from None
        matcher = rx.fullmatch
        if kind == "regex" and route.upstream_model:
            for m in _PLACEHOLDER.finditer(route.upstream_model):
                if m.group(0) == "$$":
                    continue
                key = m.group(1) or m.group(2) or m.group(3)
                if key.isdigit():
                    if int(key) > rx.groups:
                        raise _RouteError(f"${key} refers to a group the pattern does not have", "upstream_model")
                elif key not in rx.groupindex:
                    raise _RouteError(f"${key} refers to a named group the pattern does not have", "upstream_model")
    if kind != "regex" and route.upstream_model and _PLACEHOLDER.search(route.upstream_model.replace("$$", "")):
        raise _RouteError(f"$ placeholders need a regex route (this route matches by {kind})", "upstream_model")
    return CompiledRoute(route, kind, matcher)  # type: ignore[arg-type]
