"""How a Floe process runs: its logging, its Spark session and the JVM jar sets.

Below every other package but ``table``'s peers: ``ingest``, ``compaction``
and ``service`` all import it, and it imports none of them, so a driver, an
executor and a test start Spark and log the same way. One log formatter
(:mod:`runtime.logging`) serves every process, and it redacts secrets.
"""
