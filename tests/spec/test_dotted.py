"""dotted.py: one walk down a dotted field name, for a plain spec, a stored launch.yaml, an agent config."""

from __future__ import annotations

import pytest

from islab.spec.dotted import MISSING, field_value

PLAIN = {"lib": "rsl_rl", "rendezvous": {"master_port": 6000, "id": None}, "algorithm": {"clip": 0.2}}


def test_a_dotted_name_reaches_into_its_section():
    assert field_value(PLAIN, "lib") == "rsl_rl"
    assert field_value(PLAIN, "rendezvous.master_port") == 6000
    assert field_value(PLAIN, "rendezvous.id", missing=MISSING) is None  # a value of None is a value


@pytest.mark.parametrize("name", ["nnodes", "rendezvous.endpoint", "lib.name", "algorithm.clip.x"])
def test_an_absent_name_is_missing_or_a_key_error(name: str):
    assert field_value(PLAIN, name, missing=MISSING) is MISSING  # the sentinel a caller tests for
    assert field_value(PLAIN, name, missing=None) is None
    with pytest.raises(KeyError, match=name):
        field_value(PLAIN, name)
