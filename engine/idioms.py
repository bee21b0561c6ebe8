"""v1 idioms of the template language and what to write instead.

A jmespath literal as a whole selector, ``$reject``/``$error``, a ``$switch`` case
``"None"`` and the ``responses.nulls`` hook are load and lint errors naming their v2
spelling; ``proxai migrate-rules`` rewrites them (:mod:`engine.migrate`).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

import jmespath

#: v1 constructs -> what to write instead
RETIRED: dict[str, str] = {
    "$reject": "write $fail (same message; $param stays)",
    "$error": "write $fail (same message)",
}

#: v1 hooks -> what to write instead
RETIRED_HOOKS: dict[str, str] = {
    "responses.nulls": "write each key as `key: {$nullable: null}`",
}


@dataclass
class V1Idiom:
    """A v1 idiom found in a rule file: ``old`` text, the ``value`` it stood for,
    the v2 ``replacement`` text and why. ``where`` is set when it is recorded."""

    old: str
    value: object
    replacement: str
    why: str = ""
    where: str = ""

    def message(self) -> str:
        return f"write {self.replacement}" + (f" ({self.why})" if self.why else "")


_RAW = re.compile(r"^'([^'\\]*)'$")
_JSON = re.compile(r"^`([^`\\]*)`$")
# A string YAML reads back as the same string when written plain.
_PLAIN_SAFE = re.compile(r"^[A-Za-z_/][\w.\-/ ]*$")
_YAML_SPECIAL = re.compile(r"^(?:null|Null|NULL|~|true|True|TRUE|false|False|FALSE|yes|no|on|off|y|n)$", re.I)


def yaml_scalar(text: str) -> str:
    """``text`` as a YAML scalar that loads back as exactly that string."""
    if _PLAIN_SAFE.match(text) and not _YAML_SPECIAL.match(text) and not text.endswith(" ") and ": " not in text and " #" not in text:
        return text
    return json.dumps(text, ensure_ascii=False)


def v1_literal(text: str) -> V1Idiom | None:
    """A selector that is only a jmespath literal (``'text'``, `` `null` ``) is v1."""
    match = _RAW.match(text)
    if match is not None:
        return V1Idiom(text, match.group(1), f"!lit {yaml_scalar(match.group(1))}")
    match = _JSON.match(text)
    if match is not None:
        try:
            value = jmespath.compile(text).parsed["value"]
        except (jmespath.exceptions.JMESPathError, KeyError):
            return None
        if value is None:
            return V1Idiom(text, None, "null")
        if isinstance(value, (bool, int, float)):
            return V1Idiom(text, value, json.dumps(value))
        if isinstance(value, str):
            return V1Idiom(text, value, f"!lit {yaml_scalar(value)}")
        return V1Idiom(text, value, f"!lit {json.dumps(value, ensure_ascii=False)}")
    return None


def none_case() -> V1Idiom:
    return V1Idiom("None", None, "null", "a $switch case for null is written null")


def retired_construct(name: str) -> V1Idiom:
    return V1Idiom(name, None, "$fail", RETIRED[name].partition("(")[2].rstrip(")"))


def retired_hook(name: str) -> V1Idiom:
    return V1Idiom(name, None, RETIRED_HOOKS[name].removeprefix("write "))
