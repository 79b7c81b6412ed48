"""Reports: what a reader sees of a result.

The terminal tables (:mod:`.terminal`), the comparison rows shared by every report
(:mod:`.rows`), the files a run writes (:mod:`.files`: JSON, ``summary.md``, the HTML report of
:mod:`.html` with the plots of :mod:`.plots`, :mod:`.trend` and :mod:`.load_curve`).
"""
