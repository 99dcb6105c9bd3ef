"""The page and the server name the same things: every field a view module reads from an
answer is declared in that endpoint's response schema (FastAPI drops undeclared fields, which
is how tab 5 once said "d_model = undefined"), and every view module has the one interface.

Each view module declares what it reads in ``export const READS = {endpoint: [fields]}``; the
first test checks those against ``app.openapi()``; the browser test records what the page
really reads (``window.qkvRecordReads``) while every view is used, and checks it against READS.
"""

from __future__ import annotations

import json
import re

import pytest

from page_checks import STATIC, static_modules
from qkv.explore import create_app
from test_explore_browser import browser, page, server_url  # noqa: F401  (the fixtures)

VIEW_EXPORTS = ("name", "READS", "mount", "sync", "show")


def view_modules() -> list[str]:
    return [m for m in static_modules() if m.startswith("views/")]


def reads_of(module: str) -> dict[str, list[str]]:
    """The module's ``export const READS = {...};`` (JSON, trailing commas allowed)."""
    text = (STATIC / module).read_text()
    found = re.search(r"export const READS = (\{.*?\});\n", text, re.S)
    assert found, f"{module} declares no READS"
    return json.loads(re.sub(r",(\s*[}\]])", r"\1", found.group(1)))


def all_reads() -> dict[str, set[str]]:
    merged: dict[str, set[str]] = {}
    for module in view_modules():
        for path, fields in reads_of(module).items():
            merged.setdefault(path, set()).update(fields)
    return merged


@pytest.fixture(scope="module")
def openapi():
    return create_app().openapi()


def response_schema(openapi: dict, path: str) -> dict:
    operation = openapi["paths"][path]
    method = "post" if "post" in operation else "get"
    return operation[method]["responses"]["200"]["content"]["application/json"]["schema"]


def resolve(openapi: dict, schema: dict) -> dict:
    """Follow $ref, and a nullable anyOf to its non-null branch."""
    while True:
        if "$ref" in schema:
            schema = openapi["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
        elif "anyOf" in schema:
            branches = [s for s in schema["anyOf"] if s.get("type") != "null"]
            assert len(branches) == 1, schema
            schema = branches[0]
        else:
            return schema


def declared(openapi: dict, path: str, field: str) -> str | None:
    """None if ``field`` ("trace.weights") is declared in path's response; else why not."""
    schema = response_schema(openapi, path)
    walked = []
    for part in field.split("."):
        schema = resolve(openapi, schema)
        while schema.get("type") == "array":  # a list of objects: its items' fields
            schema = resolve(openapi, schema["items"])
        props = schema.get("properties")
        if props is None:
            return (f"{'.'.join(walked) or 'the answer'} is an undeclared object "
                    f"({schema.get('type', 'any')}): declare its fields")
        if part not in props:
            return f"{'.'.join([*walked, part])} is not declared (has {sorted(props)})"
        schema = props[part]
        walked.append(part)
    return None


def test_every_view_module_has_the_view_interface():
    main = (STATIC / "main.js").read_text()
    for module in view_modules():
        text = (STATIC / module).read_text()
        for export in VIEW_EXPORTS:
            assert re.search(rf"export (const|function|async function|let) {export}\b", text), \
                f"{module} does not export {export}"
        assert f'from "./{module}"' in main, f"main.js does not register {module}"
        name = re.search(r'export const name = "(\w+)";', text).group(1)
        index = (STATIC / "index.html").read_text()
        assert f'id="view-{name}"' in index and f'data-view="{name}"' in index, name


def test_every_field_a_view_reads_is_declared_by_the_server(openapi):
    problems = []
    for module in view_modules():
        for path, fields in reads_of(module).items():
            if path not in openapi["paths"]:
                problems.append(f"{module}: {path} is not an endpoint")
                continue
            problems += [f"{module}: {path} {field}: {why}" for field in fields
                         if (why := declared(openapi, path, field))]
    assert problems == []


def test_the_check_catches_an_undeclared_field(openapi):
    """The check above can fail: a made-up field, a field under an undeclared dict."""
    assert declared(openapi, "/api/mistakes", "d_model") is None
    assert declared(openapi, "/api/mistakes", "right.weights") is None
    assert "not declared" in declared(openapi, "/api/mistakes", "d_modle")
    assert "not declared" in declared(openapi, "/api/trace", "trace.wieghts")
    assert "undeclared object" in declared(openapi, "/api/colors", "low_rgb")
    assert declared(openapi, "/api/cost/growth", "live.methods.points.seconds") is None
    assert "not declared" in declared(openapi, "/api/cost/growth", "live.methods.points.secs")


def test_the_mistakes_answer_keeps_d_model_and_d_k():
    from fastapi.testclient import TestClient

    with TestClient(create_app(), base_url="http://127.0.0.1") as client:
        data = client.post("/api/mistakes", json={"heads": 12, "d_k": 32}).json()
    assert (data["d_model"], data["d_k"]) == (384, 32)


def undeclared_reads(recorded: list[str]) -> list[str]:
    """Recorded "path field" reads that no view's READS declares (a read of "trace" is fine
    when "trace.weights" is declared: the page reads the object on its way to the field)."""
    reads = all_reads()
    bad = []
    for item in recorded:
        path, field = item.split(" ", 1)
        known = reads.get(path, set())
        if not any(d == field or d.startswith(field + ".") for d in known):
            bad.append(item)
    return sorted(bad)


@pytest.mark.slow
def test_the_page_reads_only_fields_its_views_declare(page):  # noqa: F811
    """Use every view (a toggle, a preset, a neuron view) with reads recorded."""
    from test_explore_browser import idle

    page.add_init_script("window.qkvRecordReads = true")
    for view in ("projections", "vectors", "scale", "masks", "mistakes", "cost", "seq2seq",
                 "farback", "model", "gpt"):
        page.goto(f"{page.base}#view={view}")
        idle(page)
    page.wait_for_selector("[data-testid='gpt-role-0-0'], [data-testid='error']:visible")
    page.get_by_test_id("gpt-step").click()  # the generation answer's fields too
    idle(page)
    page.goto(f"{page.base}#view=mistakes")
    idle(page)
    for toggle in ("mistake-scale", "mistake-axis", "mistake-swap"):
        page.get_by_test_id(toggle).check()
        idle(page)
    page.goto(f"{page.base}#view=model")
    page.wait_for_selector("[data-testid='heat-row-1'], [data-testid='error']:visible")
    if page.get_by_test_id("heat-row-1").count():
        page.get_by_test_id("heat-row-1").click()
        page.get_by_test_id("neuron-title").wait_for()
    recorded = page.evaluate("Array.from(window.qkvReads || [])")
    assert any(r.startswith("/api/mistakes ") for r in recorded)
    assert undeclared_reads(recorded) == []
    # the check itself can fail
    assert undeclared_reads(["/api/mistakes d_modle"]) == ["/api/mistakes d_modle"]

