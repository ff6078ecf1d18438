"""configs/models.yaml (schemas/models.py) as the renderer and the tools read it when lint did not hand it
over: loaded once and validated (lint reports the file's findings at file and line; here an invalid file
is an error). No model is named in code: a model is data."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from schemas.models import ModelFacts, Models, model_facts
from schemas.yamlio import load_file

ROOT = Path(__file__).resolve().parent.parent
MODELS_FILE = ROOT / "configs" / "models.yaml"


@cache
def shipped() -> Models:
    """configs/models.yaml, validated; ValueError naming the first problem (make lint lists them all)."""
    from schemas.check import check_models

    models, findings = check_models(load_file(MODELS_FILE))
    if models is None or findings:
        raise ValueError(
            f"{MODELS_FILE.relative_to(ROOT)} is invalid: {findings[0].format()} (see `make lint`)"
        )
    return models


def facts(model: str, models: Models | None = None) -> ModelFacts:
    """The model's facts (from `models`, else the repository's file); NoRecipe with a close match."""
    return model_facts(models or shipped(), model)
