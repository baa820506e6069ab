"""Application layer: one service, one method per command (design P11)."""
