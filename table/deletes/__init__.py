"""Row-level deletes (spec: "Row-level Deletes", "Delete Formats", "Scan Planning").

* :mod:`~table.deletes.writers`: position and equality delete file writers;
* :mod:`~table.deletes.index`: which delete files apply to which data file;
* :mod:`~table.deletes.positions`: reading the positions a position delete file deletes;
* :mod:`~table.deletes.vectors`: deletion vectors, the ``deletion-vector-v1`` blob of a Puffin file;
* :mod:`~table.deletes.equality`: reading and matching equality delete keys;
* :mod:`~table.deletes.filter`: applying a task's deletes to its data file's rows.
"""
