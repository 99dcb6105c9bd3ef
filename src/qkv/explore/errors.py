"""Pydantic's validation errors rewritten for a person: where in the request, and what is wrong.

``("body", "keys", 2, 0)`` becomes ``keys[2][0]``; "Value error, ..." prefixes are dropped; a
missing or malformed body says so in words.
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
              "message": _message(e)} for e in errors]
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
