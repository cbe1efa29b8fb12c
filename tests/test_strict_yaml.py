"""strict_yaml: safe_load's values, but a mapping's repeated key is an error naming both lines."""
import pytest
import yaml

from retromae_ir import strict_yaml


def test_it_reads_what_safe_load_reads():
    text = "a: 1\nb: [x, {c: 2.5}]\nd: {e: null, f: true}\n"
    assert strict_yaml.load(text) == yaml.safe_load(text) == {"a": 1, "b": ["x", {"c": 2.5}], "d": {"e": None,
                                                                                                   "f": True}}


@pytest.mark.parametrize("text, message", [
    ("a: 1\nb: 2\na: 3\n", r"^line 3: the key 'a' is given twice \(first on line 1\)$"),
    ("top:\n  - {x: 1, x: 2}\n", r"^line 2: the key 'x' is given twice \(first on line 2\)$"),
    ("1: a\n1: b\n", r"^line 2: the key 1 is given twice \(first on line 1\)$"),
])
def test_a_repeated_key_is_an_error_naming_both_lines(text, message):
    assert isinstance(yaml.safe_load(text), dict)  # PyYAML alone keeps the last value
    with pytest.raises(yaml.YAMLError, match=message):
        strict_yaml.load(text)


def test_a_merge_may_override_the_keys_it_brings_in():
    text = "base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  y: 3\n"
    assert strict_yaml.load(text)["use"] == {"x": 1, "y": 3}
    # an anchored merge source, flattened in place by its first user, then used again by alias
    nested = "a: &a {x: 1}\nc: {<<: &b {<<: *a, x: 2}}\nd: *b\n"
    assert strict_yaml.load(nested) == yaml.safe_load(nested)  # as PyYAML merges it
    with pytest.raises(yaml.YAMLError, match="line 2: the key 'x' is given twice"):
        strict_yaml.load("a: &a {x: 1}\nc: {<<: *a, x: 2, x: 3}\n")
