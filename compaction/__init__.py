"""Floe compaction package."""
