"""YAML for the files a user writes (encoder cards, chains, reproduction conditions): a key given twice in one
mapping is an error. PyYAML keeps the last of two equal keys without a word, so a second ``tolerance:`` loosened
every reproduction check, a second ``conditions:`` dropped the first list unchecked, and a chain declared twice ran
only its second definition (exit 0 each time)."""
from __future__ import annotations

import yaml
from yaml.constructor import ConstructorError

MERGE_TAG = "tag:yaml.org,2002:merge"


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` refusing a mapping's repeated key, with both lines. Keys a merge (``<<: *base``) brings
    in may still be overridden: that is what a merge is for."""

    def __init__(self, stream):
        super().__init__(stream)
        self._checked: set[int] = set()

    def flatten_mapping(self, node):
        """Check a mapping's own keys before a merge adds its source's (which its own may override). A merge
        source is flattened in place when its first user is: an alias of it later is not checked again."""
        if id(node) not in self._checked:
            self._checked.add(id(node))
            self._check_own_keys(node)
        super().flatten_mapping(node)

    def _check_own_keys(self, node):
        seen = {}
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:  # an unhashable key: SafeLoader's own error names it
                continue
            if first is not key_node:
                raise ConstructorError(problem=f"line {key_node.start_mark.line + 1}: the key {key!r} is given "
                                               f"twice (first on line {first.start_mark.line + 1})")


def load(text: str):
    """``yaml.safe_load`` of ``text``, refusing repeated keys (a one-line ``yaml.YAMLError`` naming both lines)."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
