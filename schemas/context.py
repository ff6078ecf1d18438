"""What a lint rule sees: one validated entry, where it sits, and the files it is checked against."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from .config import MasterEntry, Worker
from .entries import SCENARIOS, Point, parsed_settings, points, workers
from .launch import LaunchProfiles
from .models import EngineRecipe, Models, NoRecipe, engine_recipe, model_facts, resolved_settings
from .runners import Hardware, Runners
from .settings import engine_of
from .yamlio import Path_

if TYPE_CHECKING:  # both import this module's users: names for the checker only
    from .engine_builds import EngineBuild
    from .known_issues import KnownIssue


@dataclass(frozen=True)
class Context:
    key: str
    entry: MasterEntry
    runners: Runners | None
    issues: tuple[KnownIssue, ...] = ()  # the registry strict rules check against
    launch: LaunchProfiles | None = None  # configs/launch.yaml; None: launch facts are not checked
    builds: tuple[EngineBuild, ...] | None = None  # engine-builds.yaml; None: not checked
    models: Models | None = None  # configs/models.yaml; None: the model's setting defaults are not known

    def settings(self, role: str, worker: Worker, point: Point) -> dict[str, Any]:
        """`role`'s resolved settings as the renderer resolves them: the config's, the model's defaults for
        the engine, the runner's GPU vendor and the point's scenario (when all are known), the registry's."""
        recipe = self._recipes.get(point.scenario)
        return resolved_settings(recipe, role, parsed_settings(worker), bool(worker.dp_attn))

    @cached_property
    def _recipes(self) -> dict[str, EngineRecipe]:
        """scenario -> the model's recipe for it (none where unknown)."""
        engine = engine_of(self.entry.framework)
        profile = self.launch.profiles.get(self.runner) if self.launch else None
        if self.models is None or engine is None or profile is None:
            return {}
        try:
            facts = model_facts(self.models, self.entry.model)
            return {
                scenario: engine_recipe(facts, self.entry.model, engine, profile.gpu_vendor, scenario)
                for scenario in SCENARIOS
            }
        except NoRecipe:
            return {}  # the renderer's verdict says so at the model's line

    @property
    def path(self) -> Path_:
        return (self.key,)

    @property
    def runner(self) -> str:
        """The runner label the entry's runner names: an alias of a launch profile resolved (no launch
        profiles: the label as written)."""
        return self.label(self.entry.runner)

    def label(self, runner: str) -> str:
        return self.launch.label_of(runner) if self.launch else runner

    def hardware(self, label: str) -> Hardware | None:
        return self.runners.shape(self.label(label)) if self.runners else None

    def points(self) -> Iterator[Point]:
        return points(self.entry, self.path)

    def workers(self) -> Iterator[tuple[Path_, str, Worker, Point]]:
        return workers(self.entry, self.path)
