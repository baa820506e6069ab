"""Heartbeats (design D8.6): the light path.

Plain heartbeats touch only ``last_heartbeat_*`` and the deadline of their step row, creating no
version, event or message: the usual batch — one beat per execution, each handle known to this
process, every attempt RUNNING, HEALTHY and beating newer — costs one guarded statement and its
commit. A beat that is not plain (a repeat, a refusal, a STALE execution heard again) is judged
under its row's lock; a STALE execution's first beat moves it back to HEALTHY through the full
event transaction, exactly once (``status.app.health`` makes them STALE).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, NotRequired, TypedDict

from status.app import commands as c
from status.app.answers import EventAccepted
from status.app.context import AppContext, EventCaller, require
from status.app.events import EventCommands
from status.app.handle_cache import KnownHandle
from status.app.health import Attempt, health_change
from status.app.ports import Stores, UnitOfWork
from status.app.shard_ports import ShardGroup
from status.app.shards import on_shards
from status.domain import ids
from status.domain.auth import ExecutionClaims, Role, ServicePrincipal, renewed_expiry
from status.domain.errors import DomainError, ErrorCode
from status.domain.heartbeats import BeatOutcome, BeatVerdict, judge_beat, takes_guarded_write
from status.domain.lifecycle import Health
from status.domain.projections import iso
from status.domain.reports import HEALTH_PRODUCER

# A batch's recoveries go through the event path in groups of at most this many events: each
# group is one transaction holding its tasks' locks, as large as the group committer's.
RECOVERIES_PER_GROUP = 64


@dataclass(frozen=True)
class Credential:
    """How a heartbeat's execution was named: a handle (its hash) or a token (its claims), and until when."""

    expires_at: datetime
    handle_hash: str | None
    claims: ExecutionClaims | None = None


class BeatAnswer(TypedDict):
    """A heartbeat's answer as the API sends it; a renewed credential says until when (and, for a
    token, the new one)."""

    executionId: str | None
    accepted: bool
    health: str | None
    reason: str | None
    expiresAt: NotRequired[str]
    executionToken: NotRequired[str]


class BeatsAnswer(TypedDict):
    """A batch of heartbeats' answers, in the order sent."""

    results: list[BeatAnswer]
    receivedAt: str


class HeartbeatCommands:
    def __init__(self, ctx: AppContext, events: EventCommands) -> None:
        self.ctx = ctx
        self.events = events

    def record_heartbeats(self, caller: ServicePrincipal, items: Sequence[c.Heartbeat]) -> BeatsAnswer:
        """design D8.6: plain heartbeats touch only last_heartbeat_*; no version, event or message.

        The usual batch — one beat per execution, each handle known to this process, every
        attempt RUNNING, HEALTHY and beating newer — costs one statement and its commit. Any
        other is read afresh (handles and step rows, no lock); the beats its rows say the guarded
        write takes are written so, and only the rest judged against their rows locked."""
        require(caller, Role.WORKER)
        now = self.ctx.now()
        buckets = [self._beat_bucket(hb, now) for hb in items]
        results = on_shards(
            self.ctx.shards,
            buckets,
            lambda group: self._record_on(group, caller, [items[i] for i in group.indexes], now),
            lambda i: _refused(items[i].execution_id, ErrorCode.UNAVAILABLE),
        )
        answers = [answer for answer in results if answer is not None]
        assert len(answers) == len(items), "every beat of a batch is answered"
        return {"results": answers, "receivedAt": iso(now)}

    def _beat_bucket(self, hb: c.Heartbeat, now: datetime) -> int | None:
        """The bucket a beat's credential names (a routing hint: the shard it leads to decides)."""
        if hb.execution_handle:
            return ids.handle_bucket(hb.execution_handle)
        if hb.execution_token:
            try:
                return self.ctx.tokens.verify(hb.execution_token, now).bucket_id
            except DomainError:
                return None  # refused where it is read, with its own reason
        return None

    def _record_on(
        self, group: ShardGroup, caller: ServicePrincipal, items: Sequence[c.Heartbeat], now: datetime
    ) -> list[BeatAnswer | None]:
        """One shard's beats of a batch, their results in order."""
        results: list[BeatAnswer | None] = [None] * len(items)
        credentials: dict[int, Credential] = {}
        known = self._known(caller, items, now, credentials)
        if known is not None and self._write_plain(group, items, known, sorted(known), now):
            resolved = known
            for index, key in known.items():
                results[index] = _accepted(key[3])
        else:  # what memory said may be gone (a purged task): read afresh
            resolved = self._decide(group, caller, items, now, results, credentials, doubted=known is not None)
        elsewhere = [
            key[3]
            for index, key in resolved.items()
            if items[index].completes_elsewhere and (answer := results[index]) is not None and answer["accepted"]
        ]
        if elsewhere:

            def mark(uow: UnitOfWork) -> None:
                uow.heartbeats.mark_completes_elsewhere(sorted(elsewhere), now)
                uow.commit()

            self.ctx.shards.run(group, mark)
        self._renew(group, results, credentials, now)
        return results

    def _write_plain(
        self,
        group: ShardGroup,
        items: Sequence[c.Heartbeat],
        resolved: Mapping[int, Attempt],
        indexes: Sequence[int],
        now: datetime,
    ) -> bool:
        """These beats (each of its own attempt) by the guarded write, in one transaction committed
        only when it took every one: otherwise none is written and False says so."""
        beats = [(*resolved[i], items[i].heartbeat_seq) for i in indexes]
        if not beats or len({beat[:3] for beat in beats}) != len(beats):
            return False

        def write(uow: UnitOfWork) -> bool:
            if uow.heartbeats.write_beats(beats, now, guarded=True) != len(beats):
                return False  # not committed: rolled back
            uow.commit()
            return True

        return self.ctx.shards.run(group, write)

    def _decide(
        self,
        group: ShardGroup,
        caller: ServicePrincipal,
        items: Sequence[c.Heartbeat],
        now: datetime,
        results: list[BeatAnswer | None],
        credentials: dict[int, Credential],
        *,
        doubted: bool,
    ) -> dict[int, Attempt]:
        """A batch memory could not vouch for: its credentials read; unless the guarded write of a
        batch memory vouched for just failed (``doubted``), it is tried on every beat first (a
        batch of handles this process has not seen yet is usually plain). Then its attempts' rows
        read without a lock; the beats those rows would take by the guarded write written so; only
        the others — a recovery, a repeat, a refusal — judged under their rows' locks. A batch
        carrying a few recoveries among its plain beats thereby locks the few rows, not every row
        it names."""

        def read(uow: UnitOfWork) -> tuple[dict[int, Attempt], dict[tuple[str, str, int], Any] | None]:
            credentials.clear()  # credentials and tenants are immutable: read once, before the writes
            resolved = self._resolve_heartbeats(uow, caller, items, now, results, credentials)
            return resolved, uow.heartbeats.beat_rows(_attempts(resolved), lock=False) if doubted else None

        resolved, rows = self.ctx.shards.run(group, read)
        if not resolved:
            return resolved
        if rows is None:
            if self._write_plain(group, items, resolved, sorted(resolved), now):
                for index, key in resolved.items():
                    results[index] = _accepted(key[3])
                return resolved
            rows = self.ctx.shards.run(group, lambda uow: uow.heartbeats.beat_rows(_attempts(resolved), lock=False))
        beats_of = Counter(key[:3] for key in resolved.values())
        plain = [
            index
            for index, key in sorted(resolved.items())
            if beats_of[key[:3]] == 1 and takes_guarded_write(key[3], items[index].heartbeat_seq, rows.get(key[:3]))
        ]
        if plain and self._write_plain(group, items, resolved, plain, now):
            for index in plain:
                results[index] = _accepted(resolved[index][3])
            written = set(plain)
            careful = {index: key for index, key in resolved.items() if index not in written}
        else:
            careful = resolved
        if careful:
            self._recover(group, caller, items, self._judge_locked(group, items, careful, results, now), results)
        return resolved

    def _judge_locked(
        self,
        group: ShardGroup,
        items: Sequence[c.Heartbeat],
        resolved: Mapping[int, Attempt],
        results: list[BeatAnswer | None],
        now: datetime,
    ) -> list[tuple[int, Attempt]]:
        """These beats judged one by one, in the order sent, against their attempts' rows locked;
        the accepted written. Returns the beats that recover a STALE attempt (not yet answered)."""
        recover: list[tuple[int, Attempt]] = []

        def work(uow: UnitOfWork) -> None:
            recover.clear()  # a retried transaction decides again from the start
            rows = uow.heartbeats.beat_rows(_attempts(resolved), lock=True)
            seq_now: dict[tuple[str, str, int], int] = {}  # last heartbeatSeq per step, as this batch moves it
            executions: dict[tuple[str, str, int], str] = {}
            for index in sorted(resolved):  # the order the worker sent them in
                key, hb = resolved[index], items[index]
                row = rows.get(key[:3])
                last_seq = seq_now.get(key[:3], row.last_heartbeat_seq) if row is not None else 0
                verdict = judge_beat(key[3], hb.heartbeat_seq, row, last_seq)
                results[index] = _answer(key[3], verdict)
                if verdict.outcome is BeatOutcome.RECOVER:
                    recover.append((index, key))
                elif verdict.outcome is BeatOutcome.ACCEPTED:
                    seq_now[key[:3]], executions[key[:3]] = hb.heartbeat_seq, key[3]
            uow.heartbeats.write_beats([(*k, executions[k], v) for k, v in seq_now.items()], now, guarded=False)
            uow.commit()

        self.ctx.shards.run(group, work)
        return recover

    def _recover(
        self,
        group: ShardGroup,
        caller: ServicePrincipal,
        items: Sequence[c.Heartbeat],
        recover: Sequence[tuple[int, Attempt]],
        results: list[BeatAnswer | None],
    ) -> None:
        """STALE -> HEALTHY through the full event transaction, exactly once (design D8.6): a
        batch's recoveries in groups of events, then their beats in one write."""
        if not recover:
            return
        health_caller = ServicePrincipal(
            HEALTH_PRODUCER, caller.tenant_id, caller.authority_scope, frozenset({Role.HEALTH})
        )
        at = self.ctx.now()
        events: list[tuple[EventCaller, c.ReportEvent]] = [
            (
                health_caller,
                health_change(
                    f"health:{key[3]}:hb:{items[index].heartbeat_seq}", at, key, Health.HEALTHY, "HEARTBEAT_RESUMED"
                ),
            )
            for index, key in recover
        ]
        outcomes: list[EventAccepted | BaseException] = []
        for start in range(0, len(events), RECOVERIES_PER_GROUP):
            outcomes += self.events.report_group(events[start : start + RECOVERIES_PER_GROUP])
        recovered: list[tuple[str, str, int, int]] = []
        for (index, (task_id, step_id, attempt, execution_id)), outcome in zip(recover, outcomes, strict=True):
            if isinstance(outcome, DomainError) and outcome.code is not ErrorCode.INVALID_TRANSITION:
                results[index] = _refused(execution_id, outcome.code)
            elif isinstance(outcome, BaseException) and not isinstance(outcome, DomainError):
                results[index] = _refused(execution_id, ErrorCode.UNAVAILABLE)  # the next beat tries again
            else:  # recovered now, or by someone else first (INVALID_TRANSITION)
                recovered.append((task_id, step_id, attempt, items[index].heartbeat_seq))
                results[index] = {
                    "executionId": execution_id,
                    "accepted": True,
                    "health": Health.HEALTHY.value,
                    "reason": "RECOVERED",
                }

        # The heartbeats themselves now land on the light path.
        def write(uow: UnitOfWork) -> None:
            uow.heartbeats.write_recovered_beats(recovered, self.ctx.now())
            uow.commit()

        if recovered:
            self.ctx.shards.run(group, write)

    def _renew(
        self,
        group: ShardGroup,
        results: list[BeatAnswer | None],
        credentials: Mapping[int, Credential],
        now: datetime,
    ) -> None:
        """Accepted beats renew their execution's credential past its half-life (``renewed_expiry``):
        a handle's expiry moves (one statement for the batch), a token is issued again; the result
        says until when, with the new token."""
        due = {
            index: until
            for index, credential in credentials.items()
            if (answer := results[index]) is not None
            and answer["accepted"]
            and (until := renewed_expiry(credential.expires_at, now, self.ctx.token_ttl)) is not None
        }
        if not due:
            return
        hashes = [h for i in due if (h := credentials[i].handle_hash) is not None]
        until = max(due.values())
        if hashes:

            def extend(uow: UnitOfWork) -> None:
                uow.heartbeats.extend_handles(hashes, until)
                uow.commit()

            self.ctx.shards.run(group, extend)
            self.ctx.handles.extend(hashes, until)
        for index in due:
            renewed = results[index]
            assert renewed is not None  # only accepted beats are due
            renewed["expiresAt"] = iso(until)
            claims = credentials[index].claims
            if claims is not None:
                renewed["executionToken"] = self.ctx.tokens.issue(replace(claims, expires_at=until))

    def _known(
        self, caller: ServicePrincipal, items: Sequence[c.Heartbeat], now: datetime, credentials: dict[int, Credential]
    ) -> dict[int, Attempt] | None:
        """Every beat's step attempt from the handles this process has read before, when each is
        one a fresh read would pass on to the write (the caller's, unexpired, in its tenant,
        naming its own execution); None when any is not (``status.app.handle_cache``)."""
        hashes: list[str] = []
        for hb in items:
            if not hb.execution_handle or hb.heartbeat_seq < 1:
                return None
            hashes.append(ids.handle_hash(hb.execution_handle))
        known = self.ctx.handles.get_all(hashes)
        if known is None:
            return None
        tenancy = (caller.tenant_id, caller.authority_scope)
        resolved: dict[int, Attempt] = {}
        for index, (hb, handle) in enumerate(zip(items, known, strict=True)):
            if (
                handle.producer_id != caller.producer_id
                or handle.expires_at <= now
                or (handle.tenant_id, handle.authority_scope) != tenancy
                or (hb.execution_id is not None and hb.execution_id != handle.execution_id)
            ):
                credentials.clear()
                return None
            resolved[index] = handle.key
            credentials[index] = Credential(handle.expires_at, hashes[index])
        return resolved

    def _resolve_heartbeats(  # noqa: C901
        self,
        stores: Stores,
        caller: ServicePrincipal,
        items: Sequence[c.Heartbeat],
        now: datetime,
        results: list[BeatAnswer | None],
        credentials: dict[int, Credential],
    ) -> dict[int, Attempt]:
        resolved: dict[int, Attempt] = {}
        hashes = {ids.handle_hash(h.execution_handle) for h in items if h.execution_handle}
        handles = stores.heartbeats.handles(hashes)
        for index, hb in enumerate(items):

            def reject(code: ErrorCode, execution_id: str | None = hb.execution_id, _i: int = index) -> None:
                results[_i] = _refused(execution_id, code)

            if hb.heartbeat_seq < 1:
                reject(ErrorCode.VALIDATION_FAILED)
                continue
            if hb.execution_handle:
                handle = handles.get(ids.handle_hash(hb.execution_handle))
                if handle is None:
                    reject(ErrorCode.TOKEN_REVOKED)
                    continue
                if handle.producer_id != caller.producer_id:
                    reject(ErrorCode.PRODUCER_MISMATCH, handle.execution_id)
                    continue
                if handle.expires_at <= now:
                    reject(ErrorCode.TOKEN_EXPIRED, handle.execution_id)
                    continue
                key = (handle.task_id, handle.step_id, handle.step_attempt, handle.execution_id)
                credentials[index] = Credential(handle.expires_at, ids.handle_hash(hb.execution_handle))
            elif hb.execution_token:
                try:
                    claims = self.ctx.tokens.verify(hb.execution_token, now)
                except DomainError as err:
                    reject(err.code)
                    continue
                if claims.producer_id != caller.producer_id:
                    reject(ErrorCode.PRODUCER_MISMATCH, claims.execution_id)
                    continue
                if (claims.tenant_id, claims.authority_scope) != (caller.tenant_id, caller.authority_scope):
                    reject(ErrorCode.UNKNOWN_TASK, claims.execution_id)
                    continue
                key = (claims.task_id, claims.step_id, claims.step_attempt, claims.execution_id)
                credentials[index] = Credential(claims.expires_at, None, claims)
            else:
                reject(ErrorCode.UNAUTHENTICATED)
                continue
            if hb.execution_id is not None and hb.execution_id != key[3]:
                reject(ErrorCode.STALE_EXECUTION, hb.execution_id)
                continue
            resolved[index] = key
        # Only the caller's tenant and scope: any other task does not exist for it.
        task_ids = sorted({key[0] for key in resolved.values()})
        mine = stores.heartbeats.tasks_of(task_ids, caller.tenant_id, caller.authority_scope)
        self.ctx.handles.put_many(
            {
                handle_hash: KnownHandle.of(row, caller.tenant_id, caller.authority_scope)
                for handle_hash, row in handles.items()
                if row.task_id in mine
            }
        )
        for index, key in list(resolved.items()):
            if key[0] not in mine:
                results[index] = _refused(key[3], ErrorCode.UNKNOWN_TASK)
                del resolved[index]
        return resolved


def _attempts(resolved: Mapping[int, Attempt]) -> list[tuple[str, str, int]]:
    """The step attempts (task, step, attempt) beats name, once each, in key order."""
    return sorted({key[:3] for key in resolved.values()})


def _accepted(execution_id: str) -> BeatAnswer:
    return {"executionId": execution_id, "accepted": True, "health": Health.HEALTHY.value, "reason": None}


def _answer(execution_id: str, verdict: BeatVerdict) -> BeatAnswer | None:
    """A heartbeat's answer as the API sends it (None: decided by the event path, later)."""
    if verdict.outcome is BeatOutcome.RECOVER:
        return None
    if verdict.outcome is BeatOutcome.ACCEPTED:
        return _accepted(execution_id)
    accepted = verdict.outcome is BeatOutcome.DUPLICATE
    reason = "DUPLICATE" if accepted else verdict.reason.value if verdict.reason else None
    return {"executionId": execution_id, "accepted": accepted, "health": verdict.health, "reason": reason}


def _refused(execution_id: str | None, code: ErrorCode) -> BeatAnswer:
    return {"executionId": execution_id, "accepted": False, "health": None, "reason": code.value}
