"""What a lint rule sees: one validated entry, where it sits, and the files it is checked against."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .config import MasterEntry, Worker
from .entries import Point, points, workers
from .launch import LaunchProfiles
from .runners import Hardware, Runners


@dataclass(frozen=True)
class Context:
    key: str
    entry: MasterEntry
    runners: Runners | None
    issues: tuple = ()  # of known_issues.KnownIssue: the registry strict rules check against
    launch: LaunchProfiles | None = None  # configs/launch.yaml; None: launch facts are not checked
    builds: tuple | None = None  # of engine_builds.EngineBuild (engine-builds.yaml); None: not checked

    @property
    def path(self) -> tuple:
        return (self.key,)

    def hardware(self, label: str) -> Hardware | None:
        return self.runners.hardware.get(label) if self.runners else None

    def points(self) -> Iterator[Point]:
        return points(self.entry, self.path)

    def workers(self) -> Iterator[tuple[tuple, str, Worker, Point]]:
        return workers(self.entry, self.path)
