"""Application layer: one service, one method per command (SPEC AC11)."""
