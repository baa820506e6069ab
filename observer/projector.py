"""The workflow projector's loop side: look cheaply for change rows, fold them (``status.app.workflow_fold``)."""

from __future__ import annotations

from observer import metrics
from status.app.workflow_fold import WorkflowFold
from status.infra.probe import RowProbe


class WorkflowProjector:
    # The cheap look for work between passes (one indexed row, no lock).
    PROBE = "SELECT 1 FROM workflow_change LIMIT 1"

    def __init__(self, fold: WorkflowFold, changes: RowProbe, batch_size: int = 500) -> None:
        self.fold = fold
        self.batch_size = batch_size
        self._changes = changes
        # Change rows folded by the last pass (a full batch means more may be waiting).
        self.last_claimed = 0

    def close(self) -> None:
        """Release the probe connection."""
        self._changes.close()

    def run_once(self) -> int:
        """Fold one batch of changes; returns how many workflows got a new version."""
        self.last_claimed = 0
        if not self._changes():
            return 0
        self.last_claimed, bumped = self.fold.fold_changes(self.batch_size)
        metrics.PROJECTOR_FOLDS.inc(bumped)
        return bumped
