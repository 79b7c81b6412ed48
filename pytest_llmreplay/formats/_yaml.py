"""YAML (and JSON, which PyYAML reads as YAML) with the safe loader, a key given twice in one
mapping being an error: ``safe_load`` keeps the last silently, so a repeated ``slo:`` or
``sessions:`` would drop the first without a word. Used by the synthetic format and by
``*.llmreplay.yaml`` spec files (``pytest_llmreplay.spec``)."""

from __future__ import annotations

from typing import Any, Hashable


def unique_key_loader() -> type:
    """A ``yaml.SafeLoader`` subclass whose mappings raise :class:`DuplicateYamlKey`, a
    ``ConstructorError`` with ``problem = "duplicate key 'k' (first on line N)"`` and
    ``problem_mark`` at the repeat, when a key is given twice (yaml is imported here, lazily)."""
    import yaml

    class DuplicateYamlKey(yaml.constructor.ConstructorError):
        """A key given twice in one mapping."""

    class UniqueKeyLoader(yaml.SafeLoader):
        duplicate_error = DuplicateYamlKey

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                seen: dict[Any, int] = {}
                for key_node, _ in node.value:
                    key = self.construct_object(key_node, deep=True)
                    line = key_node.start_mark.line + 1
                    if not isinstance(key, Hashable):
                        continue  # the safe loader refuses it, with its own message
                    if key in seen:
                        raise DuplicateYamlKey(None, None, f"duplicate key {key!r} (first on line {seen[key]})", key_node.start_mark)
                    seen[key] = line
            return super().construct_mapping(node, deep)

    return UniqueKeyLoader
