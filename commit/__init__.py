"""Floe commit package."""
