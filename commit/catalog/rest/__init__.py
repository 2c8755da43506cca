"""The Iceberg REST catalog: protocol (catalog), HTTP (client) and metadata changes as updates (updates)."""
