"""What browsers see, for operators: ``POST /api/me/telemetry`` feeds Prometheus.

A page reports its counters (connects, reconnects, recoveries that failed, snapshots, messages it
did not understand), its snapshot load times and the commit → visible latency of the live
messages it applied, about once a minute.  Only a logged-in user may report, at a bounded rate
per user; the body is bounded too, so a hostile page can skew a histogram at worst, never the
service's memory or the metrics' label set (labels come from a fixed list, never from the body).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from status.api import metrics
from status.api.http_gate import HttpGate
from status.api.limits import RateLimiter
from status.api.models import ClientCountersIn, ClientTelemetryIn

# The counters' fields are the label values (a fixed set: the model's).
COUNTERS = tuple(ClientCountersIn.model_fields)


class TelemetryEndpoints:
    def __init__(self, gate: HttpGate, per_second: float = 0.2, burst: int = 5) -> None:
        self.gate = gate
        # A page reports about once a minute; a user with a few tabs stays far below this.
        self.limiter = RateLimiter(per_second, burst, who="user's telemetry")

    async def report(self, request: Request) -> Response:
        user = self.gate.user(request)
        self.limiter.check(user.subject)
        body = await self.gate.parse(request, ClientTelemetryIn)
        for kind in COUNTERS:
            count = getattr(body.counters, kind)
            if count:
                metrics.CLIENT_EVENTS.labels(kind=kind).inc(count)
        for seconds in body.snapshot_seconds:
            metrics.CLIENT_SNAPSHOT_SECONDS.observe(seconds)
        for seconds in body.commit_to_visible_seconds:
            metrics.COMMIT_TO_VISIBLE.observe(seconds)
        metrics.CLIENT_REPORTS.labels(transport=body.transport or "unknown").inc()
        return Response(status_code=204)

    def routes(self) -> list[Route]:
        return [Route("/api/me/telemetry", self.report, methods=["POST"])]
