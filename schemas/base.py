"""The base every schema model shares (kebab-case keys, no extra keys, no silent type coercion), and the
shapes of values that reach a launch: each one a pattern that no newline, quote or `$` can pass."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


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


PosInt = Annotated[int, Field(gt=0)]
# A name: SLURM partition or account, a network interface, an RDMA device.
Ident = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$", max_length=128)]
# An absolute path with no component starting with `.` (so no `..`).
AbsPath = Annotated[str, Field(pattern=r"^(/[A-Za-z0-9_+-][A-Za-z0-9._+-]*)+$", max_length=1024)]
# A path below a folder: no leading `/`, and no component starting with `.` (so no `..`).
RelPath = Annotated[
    str, Field(pattern=r"^[A-Za-z0-9_+-][A-Za-z0-9._+-]*(/[A-Za-z0-9_+-][A-Za-z0-9._+-]*)*$", max_length=1024)
]
EnvName = Annotated[str, Field(pattern=r"^[A-Z_][A-Z0-9_]*$", max_length=128)]
# A value exported to an engine: quoted when rendered; printable ASCII so it stays one line.
EnvValue = Annotated[str, Field(pattern=r"^[ -~]*$", max_length=4096)]
