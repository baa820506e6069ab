"""HTTP adapter of the operators' commands: corrections with their audit trail, and overdue tasks."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.routing import Route

from status.api.http_gate import HttpGate, int_param
from status.api.models import CorrectionIn
from status.api.responses import JSONResponse
from status.app.corrections import Correct


class CorrectionEndpoints:
    def __init__(self, gate: HttpGate) -> None:
        self.gate = gate
        self.service = gate.service

    async def correct(self, request: Request) -> JSONResponse:
        caller = self.gate.service_principal(request)
        body = await self.gate.parse(request, CorrectionIn)
        cmd = Correct(
            task_id=request.path_params["task_id"],
            correction_id=body.correction_id,
            operator_id=body.operator_id,
            reason=body.reason,
            step_id=body.step_id,
            attempt=body.attempt,
            lifecycle_status=body.lifecycle_status,
            business_status=body.business_status,
            error=body.error.domain() if body.error else None,
            expected_task_version=int(body.expected_task_version) if body.expected_task_version else None,
        )
        result = await run_in_threadpool(self.service.correct, caller, cmd)
        return JSONResponse(result, status_code=200 if result["duplicate"] else 201)

    async def corrections(self, request: Request) -> JSONResponse:
        caller = self.gate.service_principal(request)
        return JSONResponse(
            await run_in_threadpool(self.service.corrections_of, caller, request.path_params["task_id"])
        )

    async def overdue(self, request: Request) -> JSONResponse:
        """Tasks RUNNING or STALE beyond their operation's maxRuntimeSeconds or the default (ADMIN)."""
        caller = self.gate.service_principal(request)
        limit = int_param(request, "limit", 100, low=1, high=1000)
        tasks = await run_in_threadpool(self.service.overdue, caller, limit=limit)
        return JSONResponse({"tasks": tasks})

    def routes(self) -> list[Route]:
        return [
            Route("/internal/v1/tasks:overdue", self.overdue, methods=["GET"]),
            Route("/internal/v1/tasks/{task_id}/corrections", self.correct, methods=["POST"]),
            Route("/internal/v1/tasks/{task_id}/corrections", self.corrections, methods=["GET"]),
        ]
