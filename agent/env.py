"""Typed reading of an environment mapping, with errors that name the variable.

Exception tree::

    ValueError
    └── SettingsError   a required variable is missing or a value does not parse
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["EnvReader", "SettingsError"]

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


class SettingsError(ValueError):
    """A required environment variable is missing or a value does not parse."""


class EnvReader:
    """Typed access to an environment mapping, with errors that name the variable."""

    def __init__(self, env: Mapping[str, str]) -> None:
        """Read ``env``."""
        self._env = env

    def optional(self, name: str) -> str | None:
        """The stripped value of ``name``, or None when unset or blank."""
        value = self._env.get(name, "").strip()
        return value or None

    def required(self, name: str) -> str:
        """The value of ``name``; :class:`SettingsError` when unset."""
        value = self.optional(name)
        if value is None:
            raise SettingsError(f"{name} is required")
        return value

    def text(self, name: str, default: str) -> str:
        """The value of ``name`` as given, or ``default`` when unset or blank."""
        value = self._env.get(name)
        return default if value is None or not value.strip() else value

    def flag(self, name: str, default: bool) -> bool:
        """``name`` as a boolean (true/false, yes/no, on/off, 1/0)."""
        value = self.optional(name)
        if value is None:
            return default
        if value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
        raise SettingsError(f"{name} must be true or false, not {value!r}")

    def number(self, name: str, default: float, *, low: float) -> float:
        """``name`` as a number of at least ``low``, or ``default``."""
        value = self.optional_number(name)
        if value is None:
            return default
        if not value >= low:
            raise SettingsError(f"{name} must be at least {low}, not {value}")
        return value

    def optional_number(self, name: str) -> float | None:
        """``name`` as a number, or None when unset."""
        value = self.optional(name)
        if value is None:
            return None
        try:
            number = float(value)
        except ValueError:
            raise SettingsError(f"{name} must be a number, not {value!r}") from None
        if math.isnan(number):
            raise SettingsError(f"{name} must be a number, not {value!r}")
        return number

    def integer(self, name: str, default: int, *, low: int) -> int:
        """``name`` as an integer of at least ``low``, or ``default``."""
        value = self.optional(name)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise SettingsError(f"{name} must be an integer, not {value!r}") from None
        if number < low:
            raise SettingsError(f"{name} must be at least {low}, not {number}")
        return number

    def optional_integer(self, name: str, *, low: int) -> int | None:
        """``name`` as an integer of at least ``low``, or None when unset."""
        if self.optional(name) is None:
            return None
        return self.integer(name, low, low=low)
