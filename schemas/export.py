"""Write the JSON Schemas editors use to complete and check configs (`make schema`); `--check` for CI."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import BaseModel

from .changelog import Changelog
from .config import MasterConfig
from .engine_builds import EngineBuilds
from .known_issues import KnownIssues
from .launch import LaunchProfiles
from .models import Models
from .runners import Runners

OUT = Path(__file__).resolve().parent / "json"
SCHEMAS: dict[str, tuple[type[BaseModel], str]] = {
    "master-config.schema.json": (MasterConfig, "Master config: config-key -> recipe entry"),
    "runners.schema.json": (Runners, "Runners: cluster labels and node hardware"),
    "launch.schema.json": (LaunchProfiles, "Launch profiles: how a job launches on each runner"),
    "models.schema.json": (Models, "Models: per engine and GPU vendor flags, environment, setting defaults"),
    "perf-changelog.schema.json": (Changelog, "perf-changelog.yaml: append-only list of perf changes"),
    "known-issues.schema.json": (KnownIssues, "known-issues.yaml: engine bugs, triggers, fixes, workarounds"),
    "engine-builds.schema.json": (EngineBuilds, "engine-builds.yaml: each image's engine build, parser"),
}


def render(model: type[BaseModel], title: str) -> str:
    schema = model.model_json_schema(by_alias=True, mode="validation")
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema, "title": title}
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    stale = []
    for name, (model, title) in SCHEMAS.items():
        text = render(model, title)
        path = OUT / name
        if "--check" in argv:
            if not path.is_file() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print("stale JSON Schema (run `make schema`): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
