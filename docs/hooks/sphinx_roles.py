"""Griffe extension for the API pages: the package's docstrings cross-reference with Sphinx roles
(``:func:`~pytest_llmreplay.metrics.result.stats```, ``:data:`STATS```, ``:mod:`.slo```), which
Markdown would print as they are. Each role becomes inline code, linked where the site documents
its target (an optional autorefs cross-reference: no link, and no warning, where it does not).

A leading ``~`` shows only the last part of the name, as in Sphinx; a name starting with ``.`` is
relative to the docstring's module; a bare name is looked up in the docstring's module first.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:func|meth|class|mod|data|attr|obj|exc|const):`(~?)([\w.]+)`")


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is None:
            return
        module = obj if obj.is_module else obj.module
        package = module.path.rsplit(".", 1)[0] if not module.is_package else module.path

        def reference(match: re.Match[str]) -> str:
            short, name = match.groups()
            if name.startswith("."):
                target = package + name
            elif "." not in name or not name.startswith("pytest_llmreplay"):
                target = f"{module.path}.{name}" if name.split(".")[0] in module.members else name
            else:
                target = name
            shown = name.rsplit(".", 1)[-1] if short else name.lstrip(".")
            return f'<autoref identifier="{html.escape(target)}" optional><code>{html.escape(shown)}</code></autoref>'

        obj.docstring.value = ROLE.sub(reference, obj.docstring.value)
