from __future__ import annotations

import re

import pytest

from islab.spec.agent_config import AgentConfigError, apply_overrides, parse_override

CONFIG = {"algorithm": {"learning_rate": 1e-3, "gamma": 0.99}, "runner": {"num_steps_per_env": 16}}


def test_overrides_keep_types_and_do_not_mutate_the_input() -> None:
    result = apply_overrides(CONFIG, ["algorithm.learning_rate=3e-4", "runner.num_steps_per_env=32"])
    assert result["algorithm"]["learning_rate"] == 3e-4
    assert result["runner"]["num_steps_per_env"] == 32
    assert CONFIG["algorithm"]["learning_rate"] == 1e-3


def test_plus_adds_a_new_key_on_purpose() -> None:
    result = apply_overrides(CONFIG, ["+algorithm.schedule=fixed", "+extra.layers=[64, 64]"])
    assert result["algorithm"]["schedule"] == "fixed"
    assert result["extra"] == {"layers": [64, 64]}


def test_typo_names_the_override_and_suggests_the_key() -> None:
    with pytest.raises(AgentConfigError) as error:
        apply_overrides(CONFIG, ["algorithm.learnig_rate=1"])
    assert "algorithm.learning_rate" in str(error.value)
    assert error.value.field == "override 'algorithm.learnig_rate=1'"


@pytest.mark.parametrize("item", ["algorithm", "=3", "a..b=1", "algorithm.=2"])
def test_malformed_override(item: str) -> None:
    with pytest.raises(AgentConfigError, match="key=value"):
        parse_override(item)


def test_descending_into_a_scalar_is_an_error() -> None:
    with pytest.raises(AgentConfigError, match=re.escape("no key 'algorithm.gamma.x'")):
        apply_overrides(CONFIG, ["algorithm.gamma.x=1"])
