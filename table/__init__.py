"""Floe table package."""
