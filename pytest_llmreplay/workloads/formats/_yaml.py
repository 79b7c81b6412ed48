"""YAML (and JSON, which PyYAML reads as YAML) with the safe loader, a key given twice in one
mapping being an error: ``safe_load`` keeps the last silently, so a repeated ``slo:`` or
``sessions:`` would drop the first without a word. Used by the synthetic format and by
``*.llmreplay.yaml`` spec files (``pytest_llmreplay.plugin.spec``): :func:`load_yaml` turns every way a
text can fail to be YAML into one :class:`YamlProblem`, so both say it in one line."""

from __future__ import annotations

import re
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from ...json_text import beyond_syntax, too_deep

if TYPE_CHECKING:
    import yaml


class YamlProblem(Exception):
    """Text that is not YAML, in one line: ``reason`` (what was found and, where PyYAML says it,
    what was expected), at ``line`` and ``column`` (1-based; None where not known).
    ``duplicate``: a key given twice (its ``reason`` says so; its column is left out, as JSON
    formats give only the line of theirs)."""

    def __init__(
        self, reason: str, line: int | None = None, column: int | None = None, duplicate: bool = False
    ) -> None:
        super().__init__(reason)
        self.reason, self.line, self.column, self.duplicate = reason, line, column, duplicate


def load_yaml(text: str) -> Any:
    """The document in ``text``, read with :func:`unique_key_loader`, or :class:`YamlProblem`:
    a syntax error (PyYAML's problem, with what it was parsing and where that started), a
    character YAML does not allow, a duplicate key, or lists and mappings nested past Python's
    recursion limit (PyYAML reads them recursively; its ``RecursionError`` would be a traceback)."""
    import yaml

    loader, duplicate_error = unique_key_loader()
    try:
        return _read(text, loader)
    except yaml.MarkedYAMLError as exc:
        raise _marked_problem(exc, isinstance(exc, duplicate_error)) from None
    except yaml.reader.ReaderError as exc:  # raised as the loader is made: it checks every character first
        line_start = text.rfind("\n", 0, exc.position) + 1
        reason = f"character #x{exc.character:04x} is not allowed (expected printable characters, tabs and line breaks)"
        raise YamlProblem(reason, text.count("\n", 0, exc.position) + 1, exc.position - line_start + 1) from None


def _read(text: str, loader_class: type) -> Any:
    """``yaml.load(text, Loader=loader_class)`` in its two steps, each of which recurses as deep
    as the document nests: a ``RecursionError`` while composing is at the reader's position,
    while constructing it has none. (A scalar Python cannot read is refused at its own mark by
    :func:`unique_key_loader`'s loader.)"""
    loader = loader_class(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise YamlProblem(too_deep(), loader.line + 1, loader.column + 1) from None
        try:
            return None if node is None else loader.construct_document(node)
        except RecursionError:
            raise YamlProblem(too_deep()) from None
    finally:
        loader.dispose()


def _marked_problem(exc: Any, duplicate: bool) -> YamlProblem:
    """A PyYAML error with marks as a :class:`YamlProblem` at its problem's mark, naming what
    it was parsing (``context``) and where that started."""
    reason = str(exc.problem or exc.context or "not YAML")
    if exc.context and exc.problem:
        started = exc.context_mark
        reason += f" ({exc.context}" + (
            f" that starts at line {started.line + 1}, column {started.column + 1})" if started else ")"
        )
    mark = exc.problem_mark or exc.context_mark
    if mark is None:
        return YamlProblem(reason, duplicate=duplicate)
    return YamlProblem(reason, mark.line + 1, None if duplicate else mark.column + 1, duplicate)


def unique_key_loader() -> tuple[type[yaml.SafeLoader], type[yaml.constructor.ConstructorError]]:
    """A ``yaml.SafeLoader`` subclass whose mappings raise :class:`DuplicateYamlKey`, a
    ``ConstructorError`` with ``problem = "duplicate key 'k' (first on line N)"`` and
    ``problem_mark`` at the repeat, when a key is given twice, and that error's class (yaml is
    imported here, lazily). A scalar Python cannot read (an integer of more than 4,300 digits, a
    timestamp such as 2024-13-45: a ``ValueError`` from its constructor) is a ``ConstructorError``
    at that scalar. Exponent numbers without a dot (``1e3``) are floats, as in JSON."""
    import yaml

    class DuplicateYamlKey(yaml.constructor.ConstructorError):
        """A key given twice in one mapping."""

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                seen: dict[Any, int] = {}
                for key_node, _ in node.value:
                    key = self.construct_object(key_node, deep=True)
                    line = key_node.start_mark.line + 1
                    if not isinstance(key, Hashable):
                        continue  # the safe loader refuses it, with its own message
                    if key in seen:
                        raise DuplicateYamlKey(
                            None, None, f"duplicate key {key!r} (first on line {seen[key]})", key_node.start_mark
                        )
                    seen[key] = line
            return super().construct_mapping(node, deep)

        def construct_object(self, node: Any, deep: bool = False) -> Any:
            try:
                return super().construct_object(node, deep)
            except ValueError as exc:  # the innermost node's: a ConstructorError is no ValueError
                raise yaml.constructor.ConstructorError(None, None, beyond_syntax(exc), node.start_mark) from None

    # YAML 1.1 (PyYAML) reads 1e3 and 2.5e-3 as text: only 1.0e+3 is a float there. JSON and
    # YAML 1.2 call them numbers, and a spec's `rate: 1e3` refused as "got '1e3'" helps no one.
    UniqueKeyLoader.add_implicit_resolver(
        "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789")
    )
    return UniqueKeyLoader, DuplicateYamlKey
