"""The regression gate: stored results, and the comparison of two of them.

A result becomes a stored record (:mod:`.baseline`, checked on reading by :mod:`.stored_record`)
in a store that outlives a CI runner (:mod:`.store`: folder, git ref, object store). Two records
are compared in :mod:`.baseline` (the bootstrap of :mod:`.bootstrap`, Holm over the gated
metrics, the `unstable` rule of :mod:`.stability`); repeated runs are pooled by :mod:`.repeats`;
a test's history and its change points are in :mod:`.history`.
"""
