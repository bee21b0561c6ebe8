"""Output-token ceilings: a request's output limit fitted to what the upstream model
accepts (rules/tables/output_ceilings.yaml, or the provider's or route's
``max_output_tokens`` setting, which wins).

Run as a ``before`` hook of every provider encoder, on the IR: a larger limit is
clamped to the ceiling, with a trace; toward Anthropic, which requires
``max_tokens``, a request without one gets the ceiling (an agent's long edit is
not cut at a small default), or the provider's ``max_tokens_default`` when one
is configured.
"""
from __future__ import annotations

import fnmatch
import functools

TABLE = "model->max_output_tokens"


def lookup(mapping, model) -> int | None:
    """The ceiling of `model` in a table's map (glob -> tokens, first match wins), or
    None. A router's ``vendor/`` prefix (``openai/gpt-4.1``) is ignored."""
    if not isinstance(model, str) or not model:
        return None
    return _lookup(tuple(mapping.items()), model.rsplit("/", 1)[-1].lower())


@functools.lru_cache(maxsize=512)
def _lookup(items: tuple, name: str) -> int | None:
    for pattern, tokens in items:
        if fnmatch.fnmatchcase(name, str(pattern).lower()):
            return int(tokens) if isinstance(tokens, int) and not isinstance(tokens, bool) else None
    return None


def model_ceiling(tables, model) -> int | None:
    table = (tables or {}).get(TABLE)
    return lookup(table.map, model) if table is not None else None


def output_limit(scope, tables=None, required: bool = False):
    """Clamp the request's output limit to the model's ceiling; `required` (the provider
    protocol's limit is a required field: output_limit_required) fills a missing one."""
    ir, ctx = scope.cur, scope.ctx
    if not isinstance(ir, dict) or ctx is None:
        return ir
    model = ctx.upstream_model or ir.get("model")
    ceiling, source = ctx.max_output_tokens, "max_output_tokens"
    if not ceiling:
        ceiling, source = model_ceiling(tables, model), "the known ceiling"
    wanted = ir.get("max_output_tokens")
    if ceiling and isinstance(wanted, int) and not isinstance(wanted, bool) and wanted > ceiling:
        ctx.trace(f"max output tokens {wanted} clamped to {ceiling}, {source} of {model}")
        return {**ir, "max_output_tokens": ceiling}
    if wanted is None and required:
        if ctx.max_tokens_default:  # the provider's own default, within the ceiling
            limit = min(ceiling, ctx.max_tokens_default) if ceiling else ctx.max_tokens_default
        else:
            limit = ceiling  # None: the rule's default (DEFAULT_MAX_TOKENS)
        if limit:
            return {**ir, "max_output_tokens": limit}
    return ir


def output_limit_required(scope, tables=None):
    return output_limit(scope, tables, required=True)


output_limit.reads_tables = True  # type: ignore[attr-defined]
output_limit_required.reads_tables = True  # type: ignore[attr-defined]

HOOKS = {
    "ceilings.output_limit": output_limit,
    # for a provider protocol whose output limit is required (a request without one gets the ceiling)
    "ceilings.output_limit_required": output_limit_required,
}
