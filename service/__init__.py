"""Floe service package."""
