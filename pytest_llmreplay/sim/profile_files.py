"""Where simulator profiles come from: bundled names and profile files, found without reading them.

A profile is named either by a bundled name (a file stem in ``sim/profiles/``) or by the path of
a ``.json`` file (a value ending in ``.json`` or holding a path separator is a path). This module
only resolves the name to a file, so the plugin can check ``--llm-sim-profile`` when pytest
starts without importing numpy; :func:`~.timing.load_profile` reads and validates the file.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from ..errors import LLMReplayError


def profiles_dir() -> Path:
    return Path(str(resources.files(__package__) / "profiles"))


def available_profiles() -> list[str]:
    """Names of the bundled profiles (file stems in ``sim/profiles/``), sorted."""
    return sorted(p.stem for p in profiles_dir().glob("*.json"))


def profile_path(name_or_path: str | Path) -> Path:
    """The file of a bundled profile name or a profile path; :class:`LLMReplayError` naming
    the bundled profiles when there is none."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    if isinstance(name_or_path, Path) or text.endswith(".json") or "/" in text or "\\" in text:
        if not path.is_file():
            raise LLMReplayError(f"profile file not found: {text}")
        return path
    bundled = profiles_dir() / f"{text}.json"
    if not bundled.is_file():
        raise LLMReplayError(
            f"unknown profile {text!r}; available: {', '.join(available_profiles())} (or give the path of a profile .json file)"
        )
    return bundled
