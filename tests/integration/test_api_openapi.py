"""The service's ``/openapi.json`` (the real app over a real controller) is a valid
OpenAPI document (`openapi_spec_validator`), and every ``$ref`` in it points at something
in it: the body of ``POST /runs``, a schema given by hand, carried a pydantic
``#/$defs/DirectoryFile`` that the document does not hold (issue 23)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate

pytestmark = pytest.mark.redis


def refs(node: Any, where: str = "#") -> Iterator[tuple[str, str]]:
    """Every ``$ref`` under ``node``, with where it is."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield where, value
            else:
                yield from refs(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from refs(value, f"{where}/{i}")


def resolve(doc: dict[str, Any], ref: str) -> Any:
    """The node a local JSON pointer names in ``doc``; KeyError when there is none."""
    assert ref.startswith("#/"), f"{ref}: not a reference inside the document"
    node: Any = doc
    for part in ref.removeprefix("#/").split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


async def test_the_openapi_document_validates_and_its_refs_resolve(
    api: httpx.AsyncClient,
) -> None:
    """``/openapi.json`` passes the OpenAPI validator; each of its ``$ref`` resolves inside
    it (the validator follows none it does not need); ``POST /runs`` documents its body with
    the directory files of an upload."""
    response = await api.get("/openapi.json")
    assert response.status_code == 200
    doc = response.json()
    validate(doc)
    found = list(refs(doc))
    assert found, "the document refers to its schemas"
    dangling = []
    for where, ref in found:
        try:
            resolve(doc, ref)
        except (KeyError, IndexError, ValueError):
            dangling.append(f"{where}: {ref}")
    assert dangling == []
    body = doc["paths"]["/runs"]["post"]["requestBody"]["content"]["application/json"]
    upload = body["schema"]["properties"]["sources"]["additionalProperties"]
    files = upload["properties"]["files"]["anyOf"][0]["items"]
    assert set(files["required"]) == {"path", "content_b64"}
