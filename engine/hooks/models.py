"""Per-model facts from rules/tables/model_features.yaml: the first glob of a table that
matches the upstream model (case-insensitive), else the table's default."""
from __future__ import annotations

import fnmatch

FAST_MODE = "anthropic_messages.model->fast_mode"


def lookup(tables, table: str, model):
    found = (tables or {}).get(table)
    if found is None:
        return None
    name = str(model or "").lower()
    for pattern, value in found.map.items():
        if fnmatch.fnmatchcase(name, pattern.lower()):
            return value
    return found.default


def anthropic_speed(scope, tables=None):
    """Anthropic request encode, on the provider request: OpenAI's priority tier is
    ``speed: "fast"`` on the models with a generally available fast mode. The
    research-preview ones want the fast-mode beta header, which a translated request
    does not carry: dropped there, traced, as on models with none."""
    body, ctx = scope.cur, scope.ctx
    ir = scope.vars.get("root") if isinstance(scope.vars.get("root"), dict) else {}
    if not isinstance(body, dict) or ir.get("service_tier") != "priority":
        return body
    fast = lookup(tables, FAST_MODE, body.get("model"))
    if fast == "ga":
        body["speed"] = "fast"
    elif ctx is not None:
        why = "its fast mode needs the fast-mode beta header" if fast == "beta" else "it has no fast mode"
        ctx.trace(f"service_tier priority dropped for {body.get('model')}: {why}")
    return body


anthropic_speed.reads_tables = True  # type: ignore[attr-defined]

HOOKS = {"models.anthropic_speed": anthropic_speed}
