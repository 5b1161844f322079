"""The loader variables a server inherits from the environment it is started in. Kept apart from the
scenario it feeds: launch builds it on a start from a cached verdict, which imports nothing of the check."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Inherited:
    """The loader variables the server inherits from the environment it is started in (launch's own), and
    where launch puts its LD_PRELOAD entries among customops' (--existing-preload): the modelled process
    gets exactly the variables launch execs it with."""

    preload: str | None = None
    library_path: str | None = None
    preload_first: bool = False  # --existing-preload first: the inherited entries before customops'

    def preload_with(self, ours: str | None) -> str | None:
        parts = (self.preload, ours) if self.preload_first else (ours, self.preload)
        return ":".join(p for p in parts if p) or None

    def library_path_with(self, ours: tuple[str, ...]) -> str | None:
        """customops' directories first (each once), then the inherited value as it is (its empty entries are
        `.`)."""
        return ":".join([*dict.fromkeys(ours), *([self.library_path] if self.library_path else [])]) or None

    @classmethod
    def of(cls, environ: dict[str, str], existing_preload: str) -> Inherited:
        """What a server started from `environ` inherits, its LD_PRELOAD where --existing-preload puts it."""
        return cls(environ.get("LD_PRELOAD"), environ.get("LD_LIBRARY_PATH"), existing_preload == "first")


NOTHING_INHERITED = Inherited()  # `check`: customops' own variables alone
