"""Pydantic's validation errors rewritten for a person: where in the request, and what is wrong.

``("body", "keys", 2, 0)`` becomes ``keys[2][0]``; "Value error, ..." prefixes are dropped; a
missing or malformed body says so in words. Each problem also carries ``words``: what is wrong
as a learner reads it ("must be at least 1", not "Input should be greater than or equal to 1"),
which the page puts after the label of the control that sent the field (core/errors.js) — the
field path and the HTTP status stay in the API and the server's log.
"""

from __future__ import annotations

from collections.abc import Sequence

SHOWN_IN_DETAIL = 3  # problems spelled out in the one-line ``detail``

_MESSAGES = {
    "json_invalid": "the request body is not valid JSON",
    "extra_forbidden": "is not a field of this request (check its spelling)",
    "missing": "is required",
    "model_attributes_type": "must be a JSON object",
    "dict_type": "must be a JSON object",
    "finite_number": "must be a finite number (not NaN or infinity)",
}


def field_path(loc: Sequence) -> str:
    """``("body", "keys", 2, 0)`` → ``keys[2][0]``; the body itself is ``""``."""
    path = ""
    for part in loc[1:] if loc and loc[0] == "body" else loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def _count(n, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _limit(x) -> str:
    """A bound as a person writes it: 1000000.0 → "1,000,000", 0.01 → "0.01"."""
    if isinstance(x, float) and x.is_integer():
        x = int(x)
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def _bound(error: dict) -> str | None:
    """Pydantic's range, length and type complaints as a person would say them ("must be at
    least 1", "needs at least 2 numbers"), or None for another kind."""
    kind = error.get("type", "")
    ctx = error.get("ctx") or {}
    said = {
        "greater_than_equal": lambda: f"must be at least {_limit(ctx.get('ge'))}",
        "greater_than": lambda: f"must be more than {_limit(ctx.get('gt'))}",
        "less_than_equal": lambda: f"must be at most {_limit(ctx.get('le'))}",
        "less_than": lambda: f"must be less than {_limit(ctx.get('lt'))}",
        "too_short": lambda: f"at least {ctx.get('min_length')} are needed",
        "too_long": lambda: f"at most {ctx.get('max_length')} are allowed",
        "string_too_short": lambda: (
            "must not be empty" if ctx.get("min_length") == 1 else
            f"needs at least {_count(ctx.get('min_length'), 'character')}"),
        "string_too_long": lambda: f"can hold at most {_count(ctx.get('max_length'), 'character')}",
        "int_type": lambda: "must be a whole number",
        "int_parsing": lambda: "must be a whole number",
        "int_from_float": lambda: "must be a whole number",
        "float_type": lambda: "must be a number",
        "float_parsing": lambda: "must be a number",
        "bool_type": lambda: "must be true or false",
        "string_type": lambda: "must be text",
        "list_type": lambda: "must be a list",
    }.get(kind)
    return said() if said else None


def _message(error: dict) -> str:
    kind = error.get("type", "")
    if kind == "json_invalid":
        where = error.get("loc", ())[-1]
        reason = (error.get("ctx") or {}).get("error", "")
        return f"the request body is not valid JSON ({reason} at character {where})"
    if kind == "missing" and tuple(error.get("loc", ())) == ("body",):
        return "the request body is missing: send a JSON object (Content-Type: application/json)"
    if kind in _MESSAGES:
        return _MESSAGES[kind]
    message = str(error.get("msg", "is not valid"))
    for prefix in ("Value error, ", "Assertion failed, "):
        message = message.removeprefix(prefix)
    return message


def describe_validation_errors(errors: Sequence[dict]) -> tuple[str, list[dict]]:
    """(one sentence for a person, [{"field", "message"}, ...]) for pydantic's error list."""
    items = [{"field": "" if e.get("type") == "json_invalid" else field_path(e.get("loc", ())),
              "message": _message(e), "words": _bound(e) or _message(e)} for e in errors]
    if not items:
        return "the request is not valid", []
    said = [f"{i['field']}: {i['message']}" if i["field"] else _sentence(i["message"])
            for i in items[:SHOWN_IN_DETAIL]]
    detail = "; ".join(said)
    if len(items) > 1:
        more = len(items) - SHOWN_IN_DETAIL
        detail = f"{len(items)} problems — {detail}" + (f"; and {more} more" if more > 0 else "")
    return detail, items


def _sentence(message: str) -> str:
    """A message about the whole request, e.g. "must be a JSON object" → "the request ..."."""
    return message if message.startswith(("the ", "there ")) or "[" in message.split(" ")[0] \
        else f"the request body {message}"


class InputError(Exception):
    """A request that is valid JSON of the right shape but cannot be answered as asked (e.g. a
    token index past the sentence's end). The only exception the app turns into a 422: any
    other exception is a bug and answers 500, so tests and fuzzing can see it."""
