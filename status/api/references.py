"""HTTP adapter of external references (design D5): attach, look up (internal), find a task (public)."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.routing import Route

from status.api.http_gate import HttpGate
from status.api.models import AttachRefsIn
from status.api.responses import JSONResponse
from status.domain.errors import Invalid


def _ref_params(request: Request) -> tuple[str, str]:
    ref_type = request.query_params.get("refType")
    ref_value = request.query_params.get("refValue")
    if not ref_type or not ref_value:
        raise Invalid("refType and refValue are required query parameters")
    return ref_type, ref_value


class ReferenceEndpoints:
    def __init__(self, gate: HttpGate) -> None:
        self.gate = gate
        self.service = gate.service

    async def attach(self, request: Request) -> JSONResponse:
        caller = self.gate.service_principal(request)
        body = await self.gate.parse(request, AttachRefsIn)
        result = await run_in_threadpool(
            self.service.attach_external_refs, caller, request.path_params["task_id"], body.pairs()
        )
        created = any(r["created"] for r in result["externalRefs"])
        return JSONResponse(result, status_code=201 if created else 200)

    async def lookup(self, request: Request) -> JSONResponse:
        caller = self.gate.service_principal(request)
        ref_type, ref_value = _ref_params(request)
        return JSONResponse(await run_in_threadpool(self.service.lookup_external_ref, caller, ref_type, ref_value))

    async def task_by_ref(self, request: Request) -> JSONResponse:
        user = self.gate.user(request)
        ref_type, ref_value = _ref_params(request)
        scope = request.query_params.get("authorityScope") or None
        return JSONResponse(
            await run_in_threadpool(self.service.task_by_external_ref, user, ref_type, ref_value, scope)
        )

    def routes(self) -> list[Route]:
        return [
            Route("/internal/v1/tasks/{task_id}/external-refs", self.attach, methods=["POST"]),
            Route("/internal/v1/external-refs", self.lookup, methods=["GET"]),
            Route("/api/tasks:byExternalRef", self.task_by_ref, methods=["GET"]),
        ]
