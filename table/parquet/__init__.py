"""Parquet data and delete files: writing them with their column statistics,
fanning rows out to one writer per partition, and reading them by field id.
"""
