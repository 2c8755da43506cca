"""Snapshot operations: one module per kind of change, committed by :mod:`commit.snapshot_producer`."""
