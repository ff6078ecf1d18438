"""The base every schema model shares (kebab-case keys, no extra keys, no silent type coercion), the shapes
of the text that may reach a launch (each one a pattern no newline, quote, `$` or control character
passes), and the ranges of the numbers (each far above every real value, far below what breaks a run)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema


def kebab(name: str) -> str:
    return name.replace("_", "-")


def keys_are_names(schema: dict[str, Any], *_: object) -> None:
    """JSON Schema of maps whose keys have a shape: pydantic writes it as `patternProperties`, which lets
    any other key through unchecked; editors must refuse a bad key, so say `propertyNames` instead."""
    for value in list(schema.values()):
        if isinstance(value, dict):
            keys_are_names(value)
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    keys_are_names(item)
    pattern_props = schema.get("patternProperties")
    if isinstance(pattern_props, dict) and len(pattern_props) == 1:
        ((pattern, values),) = pattern_props.items()
        del schema["patternProperties"]
        schema["additionalProperties"] = values
        schema["propertyNames"] = {**schema.get("propertyNames", {}), "pattern": pattern}


class Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",  # a typo in a key is an error, never silently ignored
        strict=True,  # "8" is not 8 and 1 is not true: YAML types must be what they say
        frozen=True,
        alias_generator=kebab,
        validate_by_alias=True,
        validate_by_name=False,
        serialize_by_alias=True,
        json_schema_extra=keys_are_names,
    )


# ---------------------------------------------------------------- text: shapes


def clip(value: str, limit: int = 80) -> str:
    """`value` for a message: repr'd (escapes included), and cut when long."""
    return repr(value) if len(value) <= limit else repr(value[:limit]) + f"... [{len(value)} characters]"


@dataclass(frozen=True, eq=False)
class Checked:
    """The metadata of a checked type, `Annotated[str, shape(...)]`: `check` runs after the type's own
    validation and `json` joins its JSON Schema. A type checker reads the alias as the plain type."""

    check: Callable[[Any], Any]
    json: dict[str, Any]

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {**handler(schema), **self.json}


def shape(
    pattern: str, what: str, *, max_length: int, allowed: str, reasons: tuple[tuple[str, str, str], ...] = ()
) -> Checked:
    """A string that is `what`: it fully matches `pattern` (ASCII classes only: re.ASCII, and [0-9] never
    \\d, which also takes Arabic-Indic and fullwidth digits) and has at most `max_length` characters.
    The error names the value, what it should be and (fix) the allowed shape. `reasons`: (regex, message,
    fix) said instead when a value matches regex (searched): a mistake worth naming, such as InferenceX's
    own reason for refusing it."""
    regex = re.compile(pattern, re.ASCII)
    fix = f"{allowed}; at most {max_length} characters"
    named = tuple((re.compile(r, re.ASCII), message, hint) for r, message, hint in reasons)

    def check(value: str) -> str:
        for reason, message, hint in named:
            if reason.search(value):
                raise PydanticCustomError(
                    "shape", "{message}", {"message": f"{clip(value)}: {message}", "fix": hint}
                )
        if len(value) > max_length or not regex.fullmatch(value):
            message = f"{clip(value)} is not {what}" + _lookalike(value)
            raise PydanticCustomError("shape", "{message}", {"message": message, "fix": fix})
        return value

    return Checked(check, {"pattern": f"^{pattern}$", "maxLength": max_length})


def _lookalike(value: str) -> str:
    """Name the first non-ASCII character: a Cyrillic 'і' prints like the Latin 'i' it impersonates."""
    odd = next((c for c in value if not c.isascii()), None)
    return f": {odd!r} is U+{ord(odd):04X}, not ASCII" if odd else ""


_NAME = r"[a-z0-9][a-z0-9._-]*"
_NAME_WORDS = "lowercase ASCII letters, digits, '.', '_' and '-', starting with a letter or digit"
# A config key: as InferenceX writes them (kimik2.5-fp4-mi355x-vllm-disagg-agentic, 49 characters at most);
# it names folders, files and SLURM jobs.
ConfigKey = Annotated[
    str,
    shape(
        _NAME,
        "a config key",
        max_length=128,
        allowed=_NAME_WORDS,
        reasons=(
            (
                r"\*",
                "'*' is reserved for changelog config-key wildcards; InferenceX refuses it in a config key",
                "name the config without '*'",
            ),
        ),
    ),
]
# A lowercase name: model-prefix, precision, framework, router, backend, kv transfer.
Name = Annotated[str, shape(_NAME, "a name", max_length=64, allowed=_NAME_WORDS)]
# A runner label: h100, b200-nscale, cluster:mi355x-amds (every label of InferenceX's runners.yaml).
Label = Annotated[
    str,
    shape(
        rf"{_NAME}(:{_NAME})?",
        "a runner label",
        max_length=64,
        allowed=f"{_NAME_WORDS}, with at most one ':' as in cluster:mi355x-amds",
    ),
]
# A known-issue or workaround id.
Id = Annotated[
    str,
    shape(
        r"[a-z0-9]+(-[a-z0-9]+)*",
        "a kebab-case id",
        max_length=64,
        allowed="lowercase ASCII words of letters and digits joined by '-'",
    ),
]
# A component version as written (the strict rule then asks for a real release or commit).
Version = Annotated[
    str,
    shape(
        r"[A-Za-z0-9][A-Za-z0-9._+-]*",
        "a version",
        max_length=64,
        allowed="ASCII letters, digits, '.', '_', '+' and '-', as in 0.1.17, 0.5.5.dev104+rocm7.2 or "
        "a commit",
        reasons=(
            (
                r"^image:",
                "a component version is its own release, package version or commit, not the image it comes "
                "in; InferenceX refuses an image reference here",
                "the component's own version, e.g. 0.1.17 or a commit",
            ),
        ),
    ),
]
# A Hugging Face model id: org/name (amd/Kimi-K2.5-MXFP4); no part starts with '.', so never '..'.
ModelId = Annotated[
    str,
    shape(
        r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?",
        "a model id",
        max_length=128,
        allowed="org/name of ASCII letters, digits, '.', '_' and '-', as in amd/Kimi-K2.5-MXFP4",
    ),
]
# A name: SLURM partition or account, a node, a network interface, an RDMA device.
Ident = Annotated[
    str,
    shape(
        r"[A-Za-z0-9][A-Za-z0-9._:-]*",
        "a name",
        max_length=128,
        allowed="ASCII letters, digits, '.', '_', ':' and '-', starting with a letter or digit",
    ),
]
_PART = r"[A-Za-z0-9_+-][A-Za-z0-9._+-]*"
_PATH_WORDS = "of parts of ASCII letters, digits, '.', '_', '+' and '-', none starting with '.'"
# An absolute path with no component starting with `.` (so no `..`).
AbsPath = Annotated[
    str, shape(rf"(/{_PART})+", "an absolute path", max_length=1024, allowed=f"/a/b {_PATH_WORDS}")
]
# A path below a folder: no leading `/`, and no component starting with `.` (so no `..`).
RelPath = Annotated[
    str, shape(rf"{_PART}(/{_PART})*", "a relative path", max_length=1024, allowed=f"a/b {_PATH_WORDS}")
]
# A wheel file on the submitting host or behind https: the same parts as a path, no query, no credentials.
WheelSource = Annotated[
    str,
    shape(
        rf"(https://[A-Za-z0-9.-]+(:[0-9]{{1,5}})?)?(/{_PART})+\.whl",
        "a wheel's path or URL",
        max_length=1024,
        allowed="an absolute path or https:// URL of a .whl file, its parts ASCII letters, digits, '.', '_', "
        "'+' and '-', none starting with '.'",
    ),
]
EnvName = Annotated[
    str,
    shape(
        r"[A-Z_][A-Z0-9_]*", "an environment variable name", max_length=128, allowed="UPPER_SNAKE_CASE ASCII"
    ),
]
# What a shell would read as more than text: quotes, backslash, '$' and '`' (and every control character).
_SAFE_PRINTABLE = r"[ !#%&(-\[\]-_a-~]"  # printable ASCII but " $ ' \ `
_SAFE_WORDS = "printable ASCII without quotes, backslash, '$' or '`'"
# A value exported to an engine: quoted when rendered, and nothing in it a shell would read anyway.
EnvValue = Annotated[
    str, shape(f"{_SAFE_PRINTABLE}*", "an environment value", max_length=4096, allowed=_SAFE_WORDS)
]
# An additional-settings item as written, before the strict profile parses it: whatever the profile, never
# whitespace, quotes, '*', '?' or shell syntax (InferenceX exports these unquoted); every real value fits.
# Brackets are InferenceX's: its NVIDIA recipes name a section of a file as CONFIG_FILE=<file>:override[0].
SettingText = Annotated[
    str,
    shape(
        r"[A-Za-z0-9._/:,+=@%\[\]-]*",
        "a setting",
        max_length=1024,
        allowed="KEY=VALUE of ASCII letters, digits and '._/:,+=@%[]-'",
    ),
]
# A recipe pointer as InferenceX writes it: a path in its tree, and for a schema-2 recipe the section to merge
# over its base (srt-slurm's `<file>:override_<name>`, or `[i]` of a zip/list override). Relative, so it never
# names anything outside the tree it is read from.
RECIPE_REF = r"(?!/)(?!.*(^|/)\.\.?(/|:|$))[A-Za-z0-9._/+-]+\.ya?ml(:[A-Za-z0-9_.-]+(\[[0-9]{1,4}\])?)?"
RECIPE_REF_WORDS = (
    "a relative path of ASCII letters, digits and '._/+-' ending in .yaml, optionally ':<override section>'"
)
RecipeRef = Annotated[
    str,
    shape(
        RECIPE_REF,
        "an srt-slurm recipe",
        max_length=512,
        allowed=RECIPE_REF_WORDS,
    ),
]
# Prose (titles, descriptions): any text on one line. Quotes are fine (only a JSON serializer or a report
# ever writes it); control characters, line breaks and bidi overrides would forge or hide output.
_PROSE = r"[^\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]"
_PROSE_WORDS = "one line, without control characters or bidi overrides"


def prose(what: str, max_length: int) -> Checked:
    return shape(f"{_PROSE}+", what, max_length=max_length, allowed=f"non-empty, {_PROSE_WORDS}")


# ---------------------------------------------------------------- numbers: ranges

# Each bound is far above any real value (InferenceX's corpus and configs/) and far below what breaks a
# run: 20,000 concurrencies rendered a 21 MB script bash could not run.
MAX_CONCURRENCY = 65_536  # requests in flight; the largest real one is 4096
MAX_CONCURRENCIES = 64  # per point: each runs a benchmark of minutes; the longest real list has 12
MAX_TOKENS = 2**24  # 16,777,216: a sequence, context or batch; real contexts are at most 10M tokens
MAX_PARALLEL = 1024  # workers, tp, pp, ep: real ones are at most 8
MAX_GPUS_PER_NODE = 64  # real nodes have 4 or 8
MAX_DRAM_MIB = 64 * 2**20  # 64 TiB per node; the largest real node has ~3 TiB (3,095,781 MiB)
MAX_WAIT_S = 86_400  # a day: the longest real wait (engine start) is an hour
MAX_TTL_S = 7 * 86_400  # a week
MAX_ENV_INT = 2**63 - 1  # a 64-bit integer


def bounded(low: int, high: int) -> Checked:
    """An integer in [low, high]; the error names the whole range."""

    def check(value: int) -> int:
        if not low <= value <= high:
            message = f"{value} is out of range [{low}, {high}]"
            raise PydanticCustomError("range", "{message}", {"message": message, "fix": ""})
        return value

    return Checked(check, {"minimum": low, "maximum": high})


PosInt = Annotated[int, Field(gt=0)]
Concurrency = Annotated[int, bounded(1, MAX_CONCURRENCY)]
Tokens = Annotated[int, bounded(1, MAX_TOKENS)]
Parallel = Annotated[int, bounded(1, MAX_PARALLEL)]
Workers = Annotated[int, bounded(0, MAX_PARALLEL)]  # num-worker: a decode of 0 is InferenceX's aggregated run
WaitSeconds = Annotated[int, bounded(1, MAX_WAIT_S)]
EnvInt = Annotated[int, bounded(-MAX_ENV_INT - 1, MAX_ENV_INT)]
