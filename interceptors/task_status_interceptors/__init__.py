"""Temporal plugin of Task Status Observer: interceptors that report activity steps.

Add one plugin to a worker; mark in workflow code which task step an activity
call belongs to; the plugin activates the step per Temporal attempt and
reports STARTED / PROGRESS / COMPLETED / FAILED and heartbeats through a
durable local outbox, never blocking or failing the activity.
"""

from task_status_interceptors._context import StepBinding, dynamic_step, task_step
from task_status_interceptors._coordinator import CoordinatorActivities, TaskEventRequest, TaskStatus
from task_status_interceptors._interceptor import TaskStatusInterceptor, current_execution, report_progress
from task_status_interceptors._outbox import read_undeliverable
from task_status_interceptors._plugin import TaskStatusPlugin
from task_status_interceptors._reporter import Reporter, ReporterConfig

__all__ = [
    "CoordinatorActivities",
    "Reporter",
    "ReporterConfig",
    "StepBinding",
    "TaskEventRequest",
    "TaskStatus",
    "TaskStatusInterceptor",
    "TaskStatusPlugin",
    "current_execution",
    "dynamic_step",
    "read_undeliverable",
    "report_progress",
    "task_step",
]
