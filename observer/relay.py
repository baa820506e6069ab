"""Outbox relay (design D8.14, D5): committed outbox rows → Centrifugo.

One pass: read the due PENDING rows of this relay's partitions in id order,
publish them *outside* any database transaction, then mark each row
PUBLISHED, leave it PENDING and due as it is (Centrifugo unreachable or
refusing for now: the relay as a whole backs off, so no row overtakes an
earlier one of its channel; a row refused while others went counts towards
``max_attempts``), or DEAD with a redacted ``last_error`` (permanent
failures).  Delivery is at least once: a crash between publishing and
marking publishes the rows again (Centrifugo drops the repeats by idempotency
key), and every message carries the full state and its version, so clients
converge whatever the duplicates.

Several relays share the work by **partition** (like Centrifugo's own
PostgreSQL outbox consumer; see ``observer.partitions``): a relay publishes
only the partitions it holds, in id order and sequentially, so every channel's
messages leave in commit order however many relays run.  (Rows left
PROCESSING by relays of an earlier version are put back to PENDING.)

Every publication carries the row's random ``publish_key`` as Centrifugo's
idempotency key: a retry of the same row is dropped by Centrifugo, a new row is
never mistaken for an old one (restores, failovers and re-created databases
reuse auto-increment ids, never random keys).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from cent import CentApiResponseError

from observer import metrics
from observer.partitions import PartitionLeases
from status import logs
from status.domain.clock import now_ms
from status.infra.centrifugo import (
    PERMANENT_CODES,
    Broadcast,
    CentrifugoApi,
    Command,
    Publication,
    PublishResult,
    RawJson,
    TransportError,
    Unauthorized,
)
from status.infra.outbox_store import ClaimedRow, Marks, OutboxStore, retrying

if TYPE_CHECKING:
    import sqlalchemy as sa

__all__ = ["ClaimedRow", "OutboxRelay", "PassResult", "RelayConfig"]

log = logs.get("observer.relay")

# Per-aggregate channels carry one aggregate's versions, so Centrifugo can skip
# stale publications by version; a user's summary channel interleaves many
# tasks with independent versions and must not use it.
VERSIONED_NAMESPACES = ("task_detail:", "workflow_summary:")
COALESCIBLE = ("USER_SUMMARY", "TASK_DETAIL", "PROJECT_BROADCAST")


@dataclass
class PassResult:
    claimed: int = 0
    published: int = 0
    coalesced: int = 0
    dead: int = 0
    held: int = 0  # left due: Centrifugo could not be reached, or refused for now
    lag_seconds: list[float] = field(default_factory=list)


@dataclass
class RelayConfig:
    batch_size: int = 500
    lease_seconds: float = 30.0
    max_attempts: int = 20
    # Coalesce superseded summaries only when a claim holds this many rows (there is a
    # backlog); None: when the claim came back full, i.e. more rows wait behind it.
    coalesce_backlog: int | None = None
    # Partition leases: renewed every partition_renew_seconds, given up by others after
    # partition_lease_seconds without renewal (a crashed relay's partitions move on then).
    partition_lease_seconds: float = 10.0
    partition_renew_seconds: float = 3.0
    # Share of publications logged with their correlation fields (by eventId, as the API samples).
    log_sample: float = 0.0


class OutboxRelay:
    def __init__(
        self,
        engine: sa.Engine,
        publisher: CentrifugoApi,
        relay_id: str,
        config: RelayConfig | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.engine = engine
        self.publisher = publisher
        self.relay_id = relay_id
        self.config = config or RelayConfig()
        self._clock = clock or (lambda: datetime.utcnow())
        self.leases = PartitionLeases(
            engine, relay_id, self.config.partition_lease_seconds, self.config.partition_renew_seconds, self.now
        )
        self._problems = logs.ProblemLog(log)
        self.store = OutboxStore(engine, self.config.batch_size)
        # While Centrifugo cannot be reached, the relay waits (0.25 s doubling to 5 s, jittered).
        self._unreachable_backoff = 0.0
        self._unreachable_until = float("-inf")
        # The last published batch while its mark is being written (see run_once).
        self._marking: asyncio.Future[None] | None = None
        self._in_flight: list[int] = []
        # The last published batch's outcomes when they wait for the next claim (see run_once).
        self._unwritten: tuple[Marks, datetime] | None = None

    def now(self) -> datetime:
        return now_ms(self._clock())

    # ------------------------------------------------------------ partitions
    def partitions(self) -> tuple[int, ...]:
        """The partitions this relay may publish now (see ``observer.partitions``)."""
        return self.leases.held()

    def release_partitions(self) -> None:
        """Give the partitions up (shutdown), so other relays take them at once."""
        self.leases.release()

    # ------------------------------------------------------------ claim
    def claim(
        self, in_flight: Sequence[int] = (), marks_first: tuple[Marks, datetime] | None = None
    ) -> list[ClaimedRow]:
        """Up to ``batch_size`` due rows of this relay's partitions in id order (``in_flight`` ids left out);
        ``marks_first``: a published batch's outcomes, written just before (see ``run_once``)."""
        partitions = self.partitions()
        if not partitions:
            if marks_first is not None:
                self._write(marks_first)
            return []
        began = time.perf_counter()
        unwritten = [marks_first] if marks_first is not None else []
        rows = retrying(lambda: self.store.claim(partitions, self.now(), in_flight, unwritten))
        metrics.CLAIM_SECONDS.observe(time.perf_counter() - began)
        metrics.CLAIMED.inc(len(rows))
        return rows

    def take_over_expired_leases(self, limit: int = 1000) -> int:
        """Rows left PROCESSING past the lease go back to PENDING.

        Relays no longer lease rows (their partitions are theirs); this returns rows that
        relays of an earlier version left in flight when they were upgraded away.
        """
        taken = self.store.release_processing(self.now() - timedelta(seconds=self.config.lease_seconds), limit)
        if taken:
            log.warning("took over outbox rows with expired leases", status=f"{taken} rows")
        return taken

    # ------------------------------------------------------------ publish
    @staticmethod
    def superseded(rows: Sequence[ClaimedRow]) -> set[tuple[int, int, str]]:
        """The (row id, message index, channel)s a later version of the same aggregate on the
        same channel makes redundant (design D8.14).

        Never in a must-deliver row (terminal, new task, new attempt, removal, notice).
        """
        latest: dict[tuple[str, str, str], int] = {}
        for row in rows:
            for message in row.messages:
                if message.projection in COALESCIBLE:
                    for channel in message.channels:
                        key = (channel, row.aggregate_type, row.aggregate_id)
                        latest[key] = max(latest.get(key, -1), row.aggregate_version)
        return {
            (row.id, i, channel)
            for row in rows
            if not row.must_deliver
            for i, message in enumerate(row.messages)
            if message.projection in COALESCIBLE
            for channel in message.channels
            if row.aggregate_version < latest[(channel, row.aggregate_type, row.aggregate_id)]
        }

    @staticmethod
    def publications(
        rows: Sequence[ClaimedRow], skipped: AbstractSet[tuple[int, int, str]] = frozenset()
    ) -> list[Command]:
        """What the relay sends for ``rows`` (their unsubscribe orders aside): each message once, as a
        publish to each of its versioned channels and one publish or broadcast to the others."""
        return [command for row in rows for command in _plan(row, skipped).commands]

    async def run_once(self, *, wait_for_mark: bool = True) -> PassResult:
        """One read → publish → mark pass.

        With ``wait_for_mark=False`` (the observer's loop) the pass returns once its rows
        are published and its mark is being written; the next pass reads and publishes
        meanwhile (one mark in flight at most, its rows left out of the read), so a
        backlog drains at the pace of the slowest stage rather than of their sum.
        Publications still leave strictly one batch after the other.
        """
        result = PassResult()
        if time.monotonic() < self._unreachable_until:
            await self.flush()  # a batch published before Centrifugo went away is still recorded
            return result  # Centrifugo was unreachable a moment ago: wait before trying again
        rows = await self._read()
        result.claimed = len(rows)
        if not rows:
            await self.flush()
            return result
        backlog = self.config.coalesce_backlog or self.config.batch_size
        skipped = self.superseded(rows) if len(rows) >= backlog else set()
        plans = [_plan(row, skipped) for row in rows]
        sent = [plan for plan in plans if plan.commands or plan.unsubscribes]
        coalesced = {plan.row.id for plan in plans if plan.row.messages and not (plan.commands or plan.unsubscribes)}
        # A revoked user's live subscriptions end first: the revoke's own messages (later in the
        # batch on the same channel) must not reach them.
        ended = {plan.row.id: await self._unsubscribe(plan.unsubscribes) for plan in sent if plan.unsubscribes}
        published = await self._publish([command for plan in sent for command in plan.commands])
        outcomes = self._outcomes(sent, published, ended)
        # A row whose payload cannot be read never will be: it goes DEAD at once.
        damaged = [plan.row for plan in plans if not plan.row.messages]
        to_mark = [plan.row for plan in sent] + damaged
        outcomes += [PublishResult(ok=False, permanent=True, error="the row's payload cannot be read")] * len(damaged)
        marks = self._mark(rows, to_mark, outcomes, coalesced, result)
        await self.flush()  # the previous batch's mark
        await self._record(rows, marks, result, wait_for_mark=wait_for_mark)
        return result

    async def _read(self) -> list[ClaimedRow]:
        """Claim the next rows. Database work runs in a thread so the publishing event loop never
        blocks on it; a mark left by the previous pass is written on the claim's connection, just
        before it reads."""
        marks, self._unwritten = self._unwritten, None
        try:
            return await asyncio.to_thread(self.claim, self._in_flight, marks)
        except BaseException:
            self._unwritten = marks  # perhaps not recorded: again with the next pass (PENDING-guarded)
            raise

    async def _publish(self, commands: list[Command]) -> list[PublishResult]:
        """One batch to Centrifugo; one result per command, whatever went wrong."""
        started = time.perf_counter()
        try:
            published: list[PublishResult] = await self.publisher.publish_batch(commands)
            self._problems.cleared("publish", "publishing to Centrifugo works again")
        except TransportError as exc:
            metrics.PUBLISH_ERRORS.labels(kind="transport").inc(len(commands))
            self._problems.failed("publish", "cannot reach Centrifugo; rows wait and are retried", code=str(exc))
            published = [PublishResult(ok=False, error=f"transport: {exc}", unreachable=True)] * len(commands)
        except Unauthorized:
            metrics.PUBLISH_ERRORS.labels(kind="unauthorized").inc(len(commands))
            self._problems.failed("publish", "Centrifugo refused the API key; rows wait", code="unauthorized")
            unauthorized = PublishResult(ok=False, error="unauthorized: check the Centrifugo API key", unreachable=True)
            published = [unauthorized] * len(commands)
        metrics.PUBLISH_SECONDS.observe(time.perf_counter() - started)
        # What Centrifugo answered with an error (the request itself reached it): for good (this
        # row's fault), or for now (its engine — Redis — failing over or down, the node overloaded).
        answered = [o for o in published if not o.ok and not o.unreachable]
        if answered:
            permanent = sum(1 for o in answered if o.permanent)
            if permanent:
                metrics.PUBLISH_ERRORS.labels(kind="rejected").inc(permanent)
            if len(answered) > permanent:
                metrics.PUBLISH_ERRORS.labels(kind="temporary").inc(len(answered) - permanent)
        return published

    def _outcomes(
        self, sent: list[_Plan], published: list[PublishResult], ended: dict[int, PublishResult]
    ) -> list[PublishResult]:
        """Each sent row's outcome (its commands' worst), and whether to back off from Centrifugo."""
        outcomes, at = [], 0
        for plan in sent:
            own = published[at : at + len(plan.commands)]
            at += len(plan.commands)
            if plan.row.id in ended:
                own = [ended[plan.row.id], *own]
            outcomes.append(_worst(own))
        # A refusal for now (the broker behind Centrifugo failing over or down, a node overloaded)
        # holds its row like an outage, with no back-off of its own: one would let the channel's
        # later rows overtake it. It counts towards the row's attempts only when Centrifugo took
        # another command of the pass: refused beside others that went, the row may be the
        # cause, and one no node ever takes goes DEAD in the end; refused with everything else,
        # the node is, and the row waits as long as the outage lasts (a DEAD row is lost to
        # its subscribers until the task's next change).
        singled_out = any(o.ok for o in published)
        outcomes = [
            replace(o, unreachable=True, counted=singled_out) if not (o.ok or o.permanent or o.unreachable) else o
            for o in outcomes
        ]
        if any(o.unreachable for o in outcomes):
            self._unreachable_backoff = min(5.0, max(0.25, self._unreachable_backoff * 2))
            self._unreachable_until = time.monotonic() + self._unreachable_backoff * random.uniform(0.5, 1.0)
        else:
            self._unreachable_backoff = 0.0
        return outcomes

    async def _record(
        self, rows: list[ClaimedRow], marks: tuple[Marks, datetime], result: PassResult, *, wait_for_mark: bool
    ) -> None:
        """Write this pass's mark now, with the next pass's claim, or while the next pass runs."""
        if wait_for_mark:
            await asyncio.to_thread(self._write, marks)
        elif len(rows) < self.config.batch_size or result.held:
            # Caught up (or holding rows for an unreachable Centrifugo): the mark goes with the
            # next pass's claim, one thread hand-off and one connection for both; the rows stay
            # out of any read until then, since that read is the one that writes it first.
            self._unwritten = marks
        else:
            # A backlog: the mark is written while the next batch is read and published.
            self._in_flight = [r.id for r in rows]
            self._marking = asyncio.ensure_future(asyncio.to_thread(self._write, marks))

    async def _unsubscribe(self, orders: Sequence[tuple[str, Sequence[str]]]) -> PublishResult:
        """End each (channel, users) order's subscriptions."""
        try:
            for channel, users in orders:
                for user in users:
                    await self.publisher.unsubscribe(user, channel)
        except TransportError as exc:
            return PublishResult(ok=False, error=f"transport: {exc}", unreachable=True)
        except Unauthorized:
            return PublishResult(ok=False, error="unauthorized: check the Centrifugo API key", unreachable=True)
        except CentApiResponseError as exc:
            return PublishResult(ok=False, permanent=exc.code in PERMANENT_CODES, error=f"centrifugo error {exc.code}")
        return PublishResult(ok=True)

    async def flush(self) -> None:
        """Wait until the last published batch is marked (raises what writing the mark raised)."""
        marking, self._marking = self._marking, None
        if marking is not None:
            try:
                await marking
            finally:
                self._in_flight = []
        marks, self._unwritten = self._unwritten, None
        if marks is not None:
            try:
                await asyncio.to_thread(self._write, marks)
            except BaseException:
                self._unwritten = marks
                raise

    def _write(self, marks: tuple[Marks, datetime]) -> None:
        """Record a published batch's outcomes (blocking: call from a thread)."""
        retrying(lambda: self.store.mark(*marks))

    def _mark(  # noqa: C901
        self,
        rows: Sequence[ClaimedRow],
        sent: Sequence[ClaimedRow],
        outcomes: Sequence[PublishResult],
        skipped: AbstractSet[int],
        result: PassResult,
    ) -> tuple[Marks, datetime]:
        """Fill ``result`` from the outcomes (``skipped``: rows every channel of which a later row
        supersedes); returns the marks that record them, and when."""
        now = self.now()
        published = [r.id for r, o in zip(sent, outcomes, strict=True) if o.ok] + sorted(skipped)
        dead: list[tuple[ClaimedRow, str]] = []
        counted: list[ClaimedRow] = []
        for row, outcome in zip(sent, outcomes, strict=True):
            if outcome.ok:
                continue
            if outcome.unreachable and not (outcome.counted and row.attempts >= self.config.max_attempts):
                # Not this row's fault: it stays due as it is (no back-off of its own, so rows
                # are not reordered); the relay as a whole backs off. A refusal beside commands
                # that went counts (see _outcomes), so one row no node takes goes DEAD in the end.
                result.held += 1
                if outcome.counted:
                    counted.append(row)
                continue
            dead.append((row, _redact(outcome.error or "unknown error")))

        marks = Marks(
            published=published,
            counted=[row.id for row in counted],
            dead=[(row.id, row.attempts, reason) for row, reason in dead],
        )

        for row in rows:
            if row.id in skipped:
                result.coalesced += 1
        sample = self.config.log_sample
        for row, outcome in zip(sent, outcomes, strict=True):
            if outcome.ok:
                lag = (now - row.created_at).total_seconds()
                result.lag_seconds.append(lag)
                metrics.COMMIT_TO_PUBLISH.observe(max(0.0, lag))
                if sample and logs.sampled(row.event_id, sample):
                    log.info(
                        "published",
                        outboxId=row.id,
                        channel=row.channel,
                        projections=[m.projection for m in row.messages],
                        eventId=row.event_id,
                        taskId=row.aggregate_id if row.aggregate_type == "TASK" else None,
                        taskVersion=row.aggregate_version,
                    )
        result.published = len(published) - len(skipped)
        result.dead = len(dead)
        metrics.PUBLISHED.inc(result.published)
        metrics.COALESCED.inc(result.coalesced)
        if dead:
            metrics.DEAD.inc(len(dead))
            for row, reason in dead:
                log.error(
                    "outbox row went DEAD",
                    outboxId=row.id,
                    channel=row.channel,
                    taskVersion=row.aggregate_version,
                    code=reason,
                )
        return marks, now

    # ------------------------------------------------------------ retention and gauges
    def purge_published(self, cutoff: datetime, batch: int = 5000) -> int:
        """Delete at most ``batch`` PUBLISHED rows published before ``cutoff`` (design D8.16)."""
        purged = self.store.purge_published(cutoff, batch)
        metrics.PURGED.labels(table="task_outbox").inc(purged)
        return purged

    def update_gauges(self) -> dict[str, float]:
        now = self.now()
        counts, oldest, oldest_must = self.store.waiting()
        age = (now - oldest).total_seconds() if oldest is not None else 0.0
        must_age = (now - oldest_must).total_seconds() if oldest_must is not None else 0.0
        for status in ("PENDING", "PROCESSING", "DEAD"):
            metrics.OUTBOX_ROWS.labels(status=status.lower()).set(counts.get(status, 0))
        metrics.OLDEST_PENDING_AGE.set(max(0.0, age))
        metrics.OLDEST_MUST_DELIVER_AGE.set(max(0.0, must_age))
        return {
            "pending": counts.get("PENDING", 0),
            "processing": counts.get("PROCESSING", 0),
            "dead": counts.get("DEAD", 0),
            "oldest_pending_age_seconds": age,
            "oldest_must_deliver_age_seconds": must_age,
        }


@dataclass(frozen=True)
class _Plan:
    """What one row sends: its commands in order, and its unsubscribe orders (sent first)."""

    row: ClaimedRow
    commands: list[Command]
    unsubscribes: list[tuple[str, Sequence[str]]]


def _plan(row: ClaimedRow, skipped: AbstractSet[tuple[int, int, str]]) -> _Plan:
    commands: list[Command] = []
    unsubscribes: list[tuple[str, Sequence[str]]] = []
    for i, message in enumerate(row.messages):
        # Centrifugo's idempotency keys act per channel: one per message, since two messages of a
        # change may go to the same channel (a summary and a notice's hint).
        key = row.publish_key if i == 0 else f"{row.publish_key}.{i}"
        channels = [c for c in message.channels if (row.id, i, c) not in skipped]
        if not channels:
            continue
        if message.projection == "UNSUBSCRIBE":
            users = json.loads(message.data)["users"]
            unsubscribes += [(channel, users) for channel in channels]
            continue
        data, size = RawJson(message.data), len(message.data)
        plain = []
        for channel in channels:
            if channel.startswith(VERSIONED_NAMESPACES):
                # One aggregate per channel: consecutive states differ little, so subscribers
                # that negotiated fossil deltas get only the difference.
                commands.append(
                    Publication(channel, data, key, version=row.aggregate_version, delta=True, size_hint=size)
                )
            else:
                plain.append(channel)
        if len(plain) == 1:
            commands.append(Publication(plain[0], data, key, size_hint=size))
        elif plain:
            commands.append(Broadcast(tuple(plain), data, key, size_hint=size))
    return _Plan(row, commands, unsubscribes)


def _worst(outcomes: Sequence[PublishResult]) -> PublishResult:
    """A row's outcome from its commands': ok when all are; held when one could not be sent; else a
    temporary failure (worth retrying) before a permanent one."""
    failed = [o for o in outcomes if not o.ok]
    if not failed:
        return PublishResult(ok=True)
    return min(failed, key=lambda o: (not o.unreachable, o.permanent))


def _redact(message: str) -> str:
    """Errors are stored for operators; keep them short and free of payloads or keys."""
    cleaned = message.replace("\n", " ")
    return cleaned[:300]
