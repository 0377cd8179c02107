"""`deploy_hold_minutes`: the option, else `[server] deploy_hold_minutes` or its variable, else 60."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentwatch.config import load_config
from agentwatch.errors import InvalidArgument
from agentwatch.service.server import deploy_hold_minutes


def test_the_hold_comes_from_the_option_the_variable_the_file_or_the_default(tmp_path: Path) -> None:
    assert deploy_hold_minutes(load_config(tmp_path, env={})) == 60
    (tmp_path / "agentwatch.toml").write_text("[server]\ndeploy_hold_minutes = 5\n")
    assert deploy_hold_minutes(load_config(tmp_path, env={})) == 5
    config = load_config(tmp_path, env={"AGENTWATCH_DEPLOY_HOLD_MINUTES": "0"})
    assert deploy_hold_minutes(config) == 0
    assert deploy_hold_minutes(config, 2.5) == 2.5


def test_a_negative_or_unreadable_hold_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="AGENTWATCH_DEPLOY_HOLD_MINUTES="):
        load_config(tmp_path, env={"AGENTWATCH_DEPLOY_HOLD_MINUTES": "-1"})
    with pytest.raises(InvalidArgument, match="AGENTWATCH_DEPLOY_HOLD_MINUTES="):
        load_config(tmp_path, env={"AGENTWATCH_DEPLOY_HOLD_MINUTES": "soon"})
    with pytest.raises(InvalidArgument, match="negative"):
        deploy_hold_minutes(load_config(tmp_path, env={}), -3)
