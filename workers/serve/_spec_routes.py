"""``POST /v1/validate`` and ``POST /v1/versions``: a Spec as JSON or YAML.

The body is ``{"spec": <AgentSpec or WorkflowSpec>}`` (``application/json``) or the Spec
file's text (``application/yaml``), read with the Spec loaders' bounds (depth, size,
duplicate keys, aliases). Validation is the client's: what ``PsychClient.publish`` checks.
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations, which
# name the closure's `Caller`, at definition time.
import asyncio
import dataclasses
import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from psych_runtime.specs import (
    AgentSpec,
    Scope,
    SpecError,
    WorkflowSpec,
    parse_spec,
    spec_from_yaml,
    validate,
)
from psych_runtime.workers.serve._auth import Caller as Who
from psych_runtime.workers.serve._context import ApiContext
from psych_runtime.workers.serve._problems import ApiProblem

YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"})

_SPEC_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["spec"],
                    "properties": {
                        "spec": {"type": "object", "description": "an AgentSpec or WorkflowSpec"}
                    },
                    "additionalProperties": False,
                }
            },
            "application/yaml": {"schema": {"type": "string", "description": "a Spec file"}},
        },
    }
}


async def spec_of(request: Request) -> AgentSpec | WorkflowSpec:
    """The Spec a validate or publish request carries.

    Raises:
        ApiProblem: 415 for another content type; 422 for a body of the wrong shape.
        SpecError: the Spec itself is malformed (names the line and column or the path).
    """
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    body = await request.body()
    if media in YAML_TYPES:
        return spec_from_yaml(body, source="request body")
    if media != "application/json" and not media.endswith("+json"):
        raise ApiProblem(
            415,
            f"content type {media or '(none)'!r}: send application/json "
            '({"spec": ...}) or application/yaml (a Spec file)',
        )
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as err:
        raise ApiProblem(422, f"the body is not JSON: {err}", "invalid-request") from err
    if not isinstance(data, dict) or set(data) != {"spec"}:
        raise ApiProblem(
            422, 'the body must be {"spec": <AgentSpec or WorkflowSpec>}', "invalid-request"
        )
    return parse_spec(data["spec"], source="spec")


def _problems_of(err: SpecError) -> list[dict[str, str]]:
    """A malformed Spec's message as problems: one per ``path: message`` line."""
    head, *lines = str(err).splitlines()
    if not lines:
        return [{"path": "", "message": head}]
    problems = []
    for line in lines:
        path, _, message = line.strip().partition(": ")
        problems.append({"path": path, "message": message or path})
    return problems


def spec_routes(context: ApiContext) -> APIRouter:
    """The routes of Specs and Versions."""
    router = APIRouter(prefix="/v1", tags=["specs"])
    Caller = Annotated[Scope, Depends(context.caller)]
    Identity = Annotated[Who, Depends(context.identity)]

    @router.post("/validate", openapi_extra=_SPEC_BODY)
    async def validate_spec(request: Request, scope: Caller) -> dict[str, Any]:
        """Validate a Spec as publishing would: ``{"ok": bool, "problems": [...]}``."""
        try:
            spec = await spec_of(request)
        except SpecError as err:
            return {"ok": False, "problems": _problems_of(err)}
        client = context.client
        checked = client.context
        if client.registry is not None:
            checked = dataclasses.replace(
                checked, registered_tools=checked.registered_tools | client.registry.names()
            )
        problems = [{"path": p.path, "message": p.message} for p in validate(spec, checked)]
        return {"ok": not problems, "problems": problems}

    @router.post("/versions", status_code=201, openapi_extra=_SPEC_BODY)
    async def publish(request: Request, who: Identity) -> JSONResponse:
        """Validate and publish a Spec; answers its Version (the same one for the same Spec).
        A publisher's credential only (403 otherwise): a Version is every tenant's."""
        who.publishing()
        # The version store is files: written off the event loop, which serves streams.
        version = await asyncio.to_thread(context.client.publish, await spec_of(request))
        return JSONResponse(version.model_dump(mode="json"), status_code=201)

    return router
