"""``llmreplay dashboard``: every stored result over commits, as a static site (no server, no
network at view time: it works from ``file://`` and from any static host).

One module per job, in the order a build runs them (:mod:`.build` runs them):

- :mod:`.commits`: the first-parent history of the reference (ids, dates, subjects);
- :mod:`.extract`: a stored result -> the figures the site draws of it (what is cached);
- :mod:`.cache`: the store's results, read once each: the figures of every result already read
  are kept in the output folder, keyed by the result's key, so a rebuild reads only new results;
- :mod:`.series`: a test's results as lines (one per endpoint fingerprint, workload and settings:
  never pooled), each gated figure over commits with its change points (Otava) and their flags;
- :mod:`.verdicts`: each line's latest verdict: the gate's comparison of its newest result with
  the one before, judged on the history as ``--llm-compare`` judges it;
- :mod:`.charts`: the Plotly figure of a series (data and layout: Plotly.js draws it);
- :mod:`.pages`: the index and a page per test, as HTML;
- :mod:`.assets`: Plotly.js (from the ``plotly`` package, the ``[dashboard]`` extra) and the
  site's own script and style, copied once per site.
"""

DEFAULT_DEPTH = 5000  # commits of the reference's first-parent history drawn
DEFAULT_RECENT = 10  # the newest commits in which a change point or regression puts a test first
