"""What a probed library could and could not do: the containment the loader reports before it runs anything
untrusted (customops/probe/sandbox_child.py), and the line the report shows for it."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from typing import Any


@dataclass(frozen=True)
class Containment:
    """What the loader could not do, as it reported before running anything untrusted."""

    root: bool = False  # customops runs as root
    uid: int = -1
    other_uid: bool = False  # the loader ran as another uid than customops
    capabilities: bool = True  # some capability was left
    namespaces: tuple[str, ...] = ()
    read_only: bool = False  # a read-only view of the file system (the sandbox excepted)
    proc: bool = False  # /proc shows the new PID namespace only
    landlock: int = 0  # Landlock ABI version applied, 0: none
    landlock_tcp: bool = False
    landlock_signals: bool = False

    @classmethod
    def parse(cls, facts: object) -> Containment | None:
        """From the loader's report; None unless every field has its type."""
        if not isinstance(facts, dict):
            return None
        values: dict[str, Any] = {}
        for field in dataclass_fields(cls):
            value = facts.get(field.name, field.default)
            if field.name == "namespaces":
                if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
                    return None
                value = tuple(value)
            elif type(value) is not type(field.default):
                return None
            values[field.name] = value
        return cls(**values)

    def describe(self) -> str:
        """One line for the report: what a probed library could and could not do on this machine."""
        who = f"uid {self.uid}" if self.other_uid else "root" if self.root else f"your user (uid {self.uid})"
        if not self.capabilities and (self.root or "user" in self.namespaces):
            who += " without capabilities"
        spaces = [n for n in self.namespaces if n != "user"]
        where = f"in new {_join(spaces)} namespaces" if spaces else "without namespaces"
        where += f", under Landlock (ABI {self.landlock})" if self.landlock else ", without Landlock"
        if self.read_only or self.landlock:
            writes = "writes outside the sandbox prevented"
        elif self.other_uid:
            writes = f"a library could write wherever uid {self.uid} may"
        else:
            writes = "a library could write wherever you can"
        unreachable = self.landlock_signals or (self.other_uid and self.root)  # cannot signal us or the supervisor
        reach = ("customops out of its reach" if unreachable or "PID" in self.namespaces
                 else "a library could signal customops")
        if "PID" in self.namespaces:
            processes = "no process outlives its probe"
        else:
            processes = "its processes are ended after it" + ("" if unreachable else
                                                                ", unless it kills the probe's supervisor")
        if "PID" in self.namespaces and not self.proc:
            processes += " (the machine's processes listed in /proc)"
        network = ("no network" if "network" in self.namespaces else "no TCP" if self.landlock_tcp
                   else "the network reachable")
        return f"probes ran as {who} {where}: {writes}; {reach}; {processes}; {network}"


def _join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
