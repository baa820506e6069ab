"""Workflows and tasks: idempotent creation (design D6AC3) and classification (design D8.11)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC
from typing import Any, NotRequired, TypedDict

from status.app import commands as c
from status.app import outbox, routing
from status.app.change import Change, write_change
from status.app.context import AppContext, check_title, content_hash, lock_task_for, operation, require
from status.app.external_refs import attach_in, check_refs, claim_refs
from status.app.group import Group
from status.app.ports import UnitOfWork
from status.app.shards import run_for
from status.app.step_cache import view_of
from status.app.views import load_view
from status.domain import ids
from status.domain.auth import Role, ServicePrincipal
from status.domain.classification import Asked, classified
from status.domain.definitions import DynamicRegistrationPolicy, FailurePolicy, PolicyDocument
from status.domain.errors import Conflict, ErrorCode, Invalid, NotFound
from status.domain.lifecycle import EventType, Lifecycle
from status.domain.model import StepState, TaskState, WorkflowState
from status.domain.reports import check_key


class WorkflowCommands:
    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx

    def create_workflow(self, caller: ServicePrincipal, cmd: c.CreateWorkflow) -> dict[str, Any]:
        """Create a workflow and its initial tasks idempotently, in one transaction (design D6)."""
        require(caller, Role.COORDINATOR)
        check_key("clientWorkflowKey", cmd.client_workflow_key)
        check_key("ownerId", cmd.owner_id, 64)
        check_title(cmd.title)
        keys = [nt.client_task_key for nt in cmd.initial_tasks]
        if len(keys) != len(set(keys)):
            raise Invalid("initialTasks have duplicate clientTaskKeys")
        request_hash = content_hash(
            {
                "owner": cmd.owner_id,
                "title": cmd.title,
                "type": cmd.workflow_type,
                "policy": _document(cmd.dynamic_registration_policy),
            }
        )

        bucket = routing.bucket_of(caller.tenant_id, cmd.owner_id)
        refs = [ref for new_task in cmd.initial_tasks for ref in check_refs(new_task.external_refs)]
        claim_refs(self.ctx, caller.tenant_id, caller.authority_scope, refs, bucket)

        def work(uow: UnitOfWork) -> dict[str, Any]:
            now = self.ctx.now()
            key = cmd.client_workflow_key
            owner = cmd.temporal_owner
            if owner is not None and owner.continues_run_id is not None:
                # The work of the run this one retries, if that run (or this one, once the run
                # follower handed it over) still owns open tasks: the same work, adopted.
                runs = [owner.continues_run_id, *([owner.run_id] if owner.run_id else [])]
                key = (
                    uow.runs.work_key_of(
                        caller.tenant_id, caller.authority_scope, owner.namespace, owner.workflow_id, runs
                    )
                    or key
                )
            existing = uow.workflows.lock_by_key(caller.tenant_id, caller.authority_scope, key)
            if existing is not None:
                workflow, facts = existing
                if facts.request_hash != request_hash:
                    raise Conflict("clientWorkflowKey was used with different content", ErrorCode.IDEMPOTENCY_CONFLICT)
                created = False
            else:
                workflow = WorkflowState(
                    workflow_id=ids.new_workflow_id(bucket, int(now.replace(tzinfo=UTC).timestamp() * 1000)),
                    tenant_id=caller.tenant_id,
                    owner_id=cmd.owner_id,
                    authority_scope=caller.authority_scope,
                    client_workflow_key=key,
                    title=cmd.title,
                    lifecycle=Lifecycle.PENDING,
                    version=1,
                    created_at=now,
                    updated_at=now,
                    workflow_type=cmd.workflow_type,
                )
                uow.workflows.insert(
                    workflow,
                    coordinator_id=caller.producer_id,
                    dynamic_registration_policy=_document(cmd.dynamic_registration_policy),
                    request_hash=request_hash,
                )
                created = True
            results, group = [], Group()
            policy = _document(cmd.dynamic_registration_policy)
            for new_task in cmd.initial_tasks:
                result, added = self._add_task(uow, group, caller, workflow, new_task, policy, cmd.temporal_owner)
                results.append(result)
                if added:
                    workflow = replace(workflow, task_count=workflow.task_count + 1)
            if created or any(r["created"] for r in results):
                if not created:
                    workflow = replace(workflow, version=workflow.version + 1, updated_at=now)
                uow.workflows.update_counts(workflow)
                group.outbox += outbox.workflow_messages(workflow, [workflow.owner_id], self.ctx.now())
            group.flush(uow)
            uow.commit()
            return {
                "workflowId": workflow.workflow_id,
                "workflowVersion": str(workflow.version),
                "created": created,
                "tasks": results,
            }

        result: dict[str, Any] = run_for(self.ctx.shards, bucket, work, unique=True)
        return result

    def add_task(self, caller: ServicePrincipal, workflow_id: str, new_task: c.NewTask) -> dict[str, Any]:
        """Add a task to a workflow idempotently by ``clientTaskKey``."""
        require(caller, Role.COORDINATOR)
        bucket = ids.workflow_bucket(workflow_id)
        if bucket is not None:  # a workflow minted before ids carried a bucket is on the home database
            claim_refs(self.ctx, caller.tenant_id, caller.authority_scope, check_refs(new_task.external_refs), bucket)

        def work(uow: UnitOfWork) -> dict[str, Any]:
            found = uow.workflows.lock(workflow_id)
            if found is None or (found[0].tenant_id, found[0].authority_scope) != (
                caller.tenant_id,
                caller.authority_scope,
            ):
                raise NotFound(f"workflow {workflow_id} does not exist", ErrorCode.UNKNOWN_WORKFLOW)
            workflow, facts = found
            policy = facts.dynamic_registration_policy
            group = Group()
            result, added = self._add_task(uow, group, caller, workflow, new_task, policy)
            if added:
                now = self.ctx.now()
                workflow = replace(
                    workflow, version=workflow.version + 1, task_count=workflow.task_count + 1, updated_at=now
                )
                uow.workflows.update_counts(workflow)
                group.outbox += outbox.workflow_messages(workflow, [workflow.owner_id], self.ctx.now())
            group.flush(uow)
            uow.commit()
            return {**result, "workflowId": workflow.workflow_id, "workflowVersion": str(workflow.version)}

        result: dict[str, Any] = run_for(self.ctx.shards, bucket, work, unique=True)
        return result

    def _add_task(
        self,
        uow: UnitOfWork,
        group: Group,
        caller: ServicePrincipal,
        workflow: WorkflowState,
        new_task: c.NewTask,
        workflow_policy: PolicyDocument | None,
        temporal_owner: c.TemporalOwner | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Create ``new_task`` in ``workflow`` (its rows written now, its log entry and messages
        staged in ``group``), or find it by its clientTaskKey; says whether it was created."""
        check_key("clientTaskKey", new_task.client_task_key)
        check_title(new_task.title)
        owner = new_task.owner_id or workflow.owner_id
        check_key("ownerId", owner, 64)
        for name, value, limit in (
            ("productId", new_task.product_id, 64),
            ("taskType", new_task.task_type, 128),
            ("projectId", new_task.project_id, 64),
        ):
            if value is not None:
                check_key(name, value, limit)
        step_ids = [s.step_id for s in new_task.known_steps]
        if len(step_ids) != len(set(step_ids)):
            raise Invalid("knownSteps have duplicate stepIds")
        # The task's own policy, or the workflow's document as stored: either is the task's, kept
        # and fingerprinted as written.
        policy = _document(new_task.dynamic_registration_policy) or workflow_policy
        DynamicRegistrationPolicy.from_json(policy)  # validates the shape
        refs = check_refs(new_task.external_refs)
        content: NewTaskContent = {
            "title": new_task.title,
            "owner": owner,
            "type": new_task.task_type,
            "product": new_task.product_id,
            "project": new_task.project_id,
            "steps": [vars(s) for s in new_task.known_steps],
            "policy": policy,
        }
        if refs:  # only when present, so tasks created before references keep their hashes
            content["externalRefs"] = [list(r) for r in refs]
        request_hash = content_hash(content)
        existing = uow.workflows.task_by_key(workflow.workflow_id, new_task.client_task_key)
        if existing is not None:
            if existing.request_hash != request_hash:
                raise Conflict("clientTaskKey was used with different content", ErrorCode.IDEMPOTENCY_CONFLICT)
            if temporal_owner is not None:
                # The same work asked for again by a later run (continue-as-new, reset, retry): that
                # run owns what is still open. Ownership is no part of any projection: no version.
                uow.runs.set_owner(
                    [existing.task_id], temporal_owner.namespace, temporal_owner.workflow_id, temporal_owner.run_id
                )
            return (
                {
                    "clientTaskKey": new_task.client_task_key,
                    "taskId": existing.task_id,
                    "taskVersion": str(existing.version),
                    "created": False,
                },
                False,
            )
        now = self.ctx.now()
        defs = self.ctx.definitions_for(uow, caller.tenant_id, caller.authority_scope)
        status_version = defs.latest_status_version(new_task.task_type) if new_task.task_type else None
        statuses = defs.status_set(new_task.task_type, status_version)
        task = TaskState(
            # The workflow's owner routes its tasks, whoever owns each: a workflow and its tasks
            # are on one shard, so adding a task and counting it commit together.
            task_id=routing.new_task_id(
                caller.tenant_id, workflow.owner_id, int(now.replace(tzinfo=UTC).timestamp() * 1000)
            ),
            workflow_id=workflow.workflow_id,
            client_task_key=new_task.client_task_key,
            tenant_id=caller.tenant_id,
            owner_id=owner,
            authority_scope=caller.authority_scope,
            bucket_id=0,
            title=new_task.title,
            lifecycle=Lifecycle.PENDING,
            business_status=statuses.resolve(None, Lifecycle.PENDING, None).code,
            version=1,
            created_at=now,
            updated_at=now,
            product_id=new_task.product_id,
            task_type=new_task.task_type,
            project_id=new_task.project_id,
            status_definition_version=status_version,
        )
        task = replace(task, bucket_id=ids.bucket_hint(task.task_id) or 0)
        uow.workflows.insert_task(
            task,
            request_hash=request_hash,
            dynamic_registration_policy=policy,
            temporal_owner=(
                (temporal_owner.namespace, temporal_owner.workflow_id, temporal_owner.run_id)
                if temporal_owner
                else None
            ),
        )
        group.unwatched.add(task.task_id)  # a new task: nobody follows its detail yet (its row says so)
        steps = []
        for order, known in enumerate(new_task.known_steps):
            check_key("stepId", known.step_id)
            op = operation(defs, known.operation_code, task.task_type)
            policy_name = known.failure_policy or op.failure_policy.value
            FailurePolicy(policy_name)
            step = StepState(
                task_id=task.task_id,
                step_id=known.step_id,
                attempt=1,
                client_step_key=known.step_id,
                operation_code=known.operation_code,
                operation_definition_version=op.version,
                service_name=known.expected_producer or "*",
                lifecycle=Lifecycle.PENDING,
                business_status=statuses.resolve(None, Lifecycle.PENDING, None).code,
                version=1,
                display_name=known.display_name or op.display_name,
                step_order=order,
                failure_policy=policy_name,
                updated_at=now,
            )
            uow.tasks.insert_step(step)
            steps.append(step)
        attach_in(uow, task.tenant_id, task.authority_scope, task.task_id, refs, now)
        created = Change.of_service(
            task,
            view_of(task, steps, [task.owner_id]),
            EventType.TASK_CREATED,
            caller.producer_id,
            {"knownSteps": step_ids},
            now,
            broadcast=True,
        )
        write_change(self.ctx, uow, group, created)
        return (
            {"clientTaskKey": new_task.client_task_key, "taskId": task.task_id, "taskVersion": "1", "created": True},
            True,
        )

    def classify(self, caller: ServicePrincipal, cmd: c.Classify) -> Classified:
        """Bind productId / taskType / definition version (design D8.11); each change is an event."""
        require(caller, Role.COORDINATOR)
        for name, value, limit in (("productId", cmd.product_id, 64), ("taskType", cmd.task_type, 128)):
            if value is not None:
                check_key(name, value, limit)
        if not cmd.fields:
            raise Invalid("send at least one of productId, taskType, statusDefinitionVersion")
        asked = Asked(cmd.fields, cmd.product_id, cmd.task_type, cmd.status_definition_version)

        def work(uow: UnitOfWork) -> Classified:
            now = self.ctx.now()
            task = lock_task_for(uow, caller.tenant_id, caller.authority_scope, cmd.task_id)
            defs = self.ctx.definitions_for(uow, task.tenant_id, task.authority_scope)
            new = classified(task, asked, expected_version=cmd.expected_version, statuses=defs.statuses, now=now)
            if new is None:
                uow.commit()
                return {"taskId": task.task_id, "taskVersion": str(task.version), "changed": False}
            uow.tasks.update(new)
            self._freeze_statuses(uow, new)
            group = Group()
            change = Change.of_service(
                new,
                load_view(uow, new),
                EventType.TASK_CLASSIFIED,
                caller.producer_id,
                {"before": _classification(task), "after": _classification(new)},
                now,
                must_deliver=False,
            )
            write_change(self.ctx, uow, group, change)
            group.flush(uow)
            uow.commit()
            return {"taskId": new.task_id, "taskVersion": str(new.version), "changed": True}

        return run_for(self.ctx.shards, ids.bucket_hint(cmd.task_id), work)

    def _freeze_statuses(self, uow: UnitOfWork, task: TaskState) -> None:
        if task.task_type is None or task.status_definition_version is None:
            return
        uow.workflows.freeze_statuses(task.task_type, task.status_definition_version, self.ctx.now())


class NewTaskContent(TypedDict):
    """What a new task's fingerprint hashes (fixed: a retry after an upgrade hashes the same)."""

    title: str
    owner: str
    type: str | None
    product: str | None
    project: str | None
    steps: list[dict[str, object]]  # each known step's fields
    policy: PolicyDocument | None
    externalRefs: NotRequired[list[list[str]]]  # only when there are some (older tasks' hashes)


class Classified(TypedDict):
    taskId: str
    taskVersion: str
    changed: bool


def _classification(task: TaskState) -> dict[str, str | int | None]:
    """What the classification's event-log entry records of the task, before and after."""
    return {
        "productId": task.product_id,
        "taskType": task.task_type,
        "statusDefinitionVersion": task.status_definition_version,
    }


def _document(policy: DynamicRegistrationPolicy | None) -> PolicyDocument | None:
    """A registration policy as it is stored and fingerprinted (None: none given)."""
    return policy.to_json() if policy is not None else None
