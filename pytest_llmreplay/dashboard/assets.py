"""The site's shared files in ``OUT/assets/``, copied once per site (every page links them):
Plotly.js, and the site's own script and style (``static/`` beside this module).

**Why Plotly.js.** The charts need hover (commit, date, value, interval), a click that opens
the commit, error bars, a legend per line and markers, and they must draw offline from
``file://``. Plotly.js does all of it from one self-contained, MIT-licensed file, and that file
ships inside the ``plotly`` package on PyPI (``plotly/package_data/plotly.min.js``), so ``pip``
installs it with the ``[dashboard]`` extra: no npm step, no vendored copy in this repository.
Vega-Lite would need three files (vega, vega-lite, vega-embed) from npm, kept in the repository.
Only the JavaScript file is used, never the Python package, which is imported nowhere.

A file is copied only when the copy is missing or differs (:func:`filecmp.cmp`: its size and
time, which the copy keeps), so a rebuild does not write Plotly's 4.8 MB again.
"""

from __future__ import annotations

import filecmp
import shutil
from importlib import resources
from importlib.util import find_spec
from pathlib import Path

from ..errors import LLMReplayError

EXTRA = "pip install 'pytest-llmreplay[dashboard]'"
OWN = ("dashboard.js", "dashboard.css")


def plotly_js() -> Path:
    """The ``plotly.min.js`` of the installed ``plotly`` package; :class:`LLMReplayError` naming
    the extra when it is not installed."""
    try:
        found_spec = find_spec("plotly")
    except (ImportError, ValueError):  # a broken or blocked install
        found_spec = None
    if found_spec is None:
        raise LLMReplayError(f"the dashboard draws its charts with Plotly.js, from the plotly package: {EXTRA}")
    found = Path(str(resources.files("plotly") / "package_data" / "plotly.min.js"))
    if not found.is_file():
        raise LLMReplayError(f"{found}: missing from the installed plotly package; reinstall it: {EXTRA}")
    return found


def copy_assets(folder: Path) -> int:
    """Plotly.js and the site's own files into ``folder``; how many were (re)written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = 0
    own = resources.files(__package__) / "static"
    for source in [plotly_js(), *(Path(str(own / name)) for name in OWN)]:
        target = folder / source.name
        if not target.is_file() or not filecmp.cmp(source, target):
            shutil.copy2(source, target)  # its time too: the next build's filecmp sees an equal file at a glance
            written += 1
    return written
