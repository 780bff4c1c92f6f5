"""Every task test gets its own EMBER_HOME, so built-in models and datasets are made there."""

from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def ember_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("EMBER_HOME", str(home))
    return home
