"""Floe ingest package."""
