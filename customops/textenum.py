"""The base of every vocabulary customops prints: an enum whose members are their text.

Reports, JSON and f-strings show the text exactly as the strings these enums replaced; comparing a member
with its text is still true, and `Kind("text")` parses it back. (enum.StrEnum does this from 3.11 only.)
"""

from __future__ import annotations

from enum import Enum


class TextEnum(str, Enum):
    """An enum whose members are their text, in JSON and in f-strings alike."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)
