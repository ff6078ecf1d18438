"""The base every schema model shares: kebab-case keys, no extra keys, no silent type coercion."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


def kebab(name: str) -> str:
    return name.replace("_", "-")


class Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",  # a typo in a key is an error, never silently ignored
        strict=True,  # "8" is not 8 and 1 is not true: YAML types must be what they say
        frozen=True,
        alias_generator=kebab,
        validate_by_alias=True,
        validate_by_name=False,
        serialize_by_alias=True,
    )
