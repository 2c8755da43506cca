"""The key index of an upsert table: each live key -> (data file, position).

With it an upsert batch deletes a key's previous row by position instead of
by equality, so every engine can read every snapshot
(docs/key-index-design.md). Pure rules (:mod:`.key_hash`, :mod:`.segments`,
:mod:`.manifest`) are kept apart from file access (:mod:`.store`) and from
the commit (:mod:`.operation`).
"""
