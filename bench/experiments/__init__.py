"""Studies: benches that measure something once for a doc (a table, the evidence for a default)
rather than guard a target in ``make bench``. ``python -m bench NAME`` runs one; none runs by
default. Each module says which doc quotes it."""
