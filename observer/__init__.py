"""Observer processes: outbox relay, workflow projector, health reconciler, retention."""
