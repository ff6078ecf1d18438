"""A matrix row to the environment InferenceX's runner script sees, by evaluating InferenceX's own workflows
(run-sweep.yml's `with:` mapping, benchmark-multinode-tmpl.yml's inputs, `env:` and launch step) with a
small evaluator of the GitHub Actions expressions they use."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

TEMPLATE = "benchmark-multinode-tmpl.yml"
LAUNCH_STEP = "Launch multi-node job script"
TOKEN = re.compile(
    r"\s*(?:('(?:[^']|'')*')|(\d+(?:\.\d+)?)|(&&|\|\||==|!=|<=|>=|[!()\[\],.<>*])|([A-Za-z_][\w-]*))"
)


class ExpressionError(ValueError):
    pass


def tokens(text: str) -> list[str]:
    found, index = [], 0
    while index < len(text.rstrip()):
        match = TOKEN.match(text, index)
        if not match:
            raise ExpressionError(f"cannot read expression at {text[index:]!r}")
        found.append(match.group(match.lastindex or 0))
        index = match.end()
    return found


def truthy(value: Any) -> bool:
    return value not in (None, False, 0, "")


def to_string(value: Any) -> str:
    """How GitHub turns an expression's value into text (env values, `${{ }}` in scripts)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dict | list):
        return json.dumps(value, indent=2)
    return str(value)


def loose_equal(left: Any, right: Any) -> bool:
    if isinstance(left, str) and isinstance(right, str):
        return left.lower() == right.lower()
    return bool(left == right)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "tojson": lambda v: json.dumps(v, indent=2),  # GitHub's toJSON pretty-prints
    "fromjson": lambda v: json.loads(v),
    "join": lambda v, sep=",": sep.join(to_string(x) for x in v) if isinstance(v, list) else to_string(v),
    "contains": lambda hay, needle: (
        any(loose_equal(x, needle) for x in hay) if isinstance(hay, list) else
        to_string(needle).lower() in to_string(hay).lower()
    ),
    "startswith": lambda s, p: to_string(s).lower().startswith(to_string(p).lower()),
    "format": lambda f, *a: re.sub(r"\{(\d+)\}", lambda m: to_string(a[int(m.group(1))]), f),
    "always": lambda: True,
    "success": lambda: True,
    "failure": lambda: False,
    "cancelled": lambda: False,
}  # fmt: skip


class Evaluator:
    """Recursive descent over: || && == != ! ( ) literals, context.path['key'][0], function(args)."""

    def __init__(self, text: str, context: dict[str, Any]) -> None:
        self.words, self.index, self.context, self.text = tokens(text), 0, context, text

    def peek(self) -> str | None:
        return self.words[self.index] if self.index < len(self.words) else None

    def take(self, expected: str | None = None) -> str:
        word = self.peek()
        if word is None or (expected is not None and word != expected):
            raise ExpressionError(f"expected {expected or 'more'} in {self.text!r}, got {word!r}")
        self.index += 1
        return word

    def run(self) -> Any:
        value = self.either()
        if self.peek() is not None:
            raise ExpressionError(f"unexpected {self.peek()!r} in {self.text!r}")
        return value

    def either(self) -> Any:
        value = self.both()
        while self.peek() == "||":
            self.take()
            right = self.both()
            value = value if truthy(value) else right
        return value

    def both(self) -> Any:
        value = self.compare()
        while self.peek() == "&&":
            self.take()
            right = self.compare()
            value = right if truthy(value) else value
        return value

    def compare(self) -> Any:
        value = self.unary()
        while self.peek() in ("==", "!="):
            equal = self.take() == "=="
            value = loose_equal(value, self.unary()) == equal
        return value

    def unary(self) -> Any:
        if self.peek() == "!":
            self.take()
            return not truthy(self.unary())
        return self.postfix(self.primary())

    def postfix(self, value: Any) -> Any:
        while self.peek() in (".", "["):
            if self.take() == ".":
                key: Any = self.take()
            else:
                key = self.either()
                self.take("]")
            if key == "*":  # object filter: `labels.*.name` is the list of every label's name
                value = (
                    list(value.values())
                    if isinstance(value, dict)
                    else value
                    if isinstance(value, list)
                    else []
                )
            elif isinstance(value, list) and isinstance(key, str):
                value = [item.get(key) for item in value if isinstance(item, dict)]
            elif isinstance(value, dict):
                value = value.get(key)
            elif isinstance(value, list) and isinstance(key, int | float) and int(key) < len(value):
                value = value[int(key)]
            else:
                value = None
        return value

    def primary(self) -> Any:
        word = self.take()
        if word == "(":
            value = self.either()
            self.take(")")
            return value
        if word.startswith("'"):
            return word[1:-1].replace("''", "'")
        if re.fullmatch(r"\d+(\.\d+)?", word):
            return float(word) if "." in word else int(word)
        if word in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[word]
        if self.peek() == "(":
            self.take("(")
            args = []
            while self.peek() != ")":
                args.append(self.either())
                if self.peek() == ",":
                    self.take()
            self.take(")")
            if word.lower() not in FUNCTIONS:
                raise ExpressionError(f"unknown function {word}() in {self.text!r}")
            return FUNCTIONS[word.lower()](*args)
        return self.context.get(word)


def evaluate(text: str, context: dict[str, Any]) -> Any:
    return Evaluator(text, context).run()


def substitute(value: Any, context: dict[str, Any]) -> Any:
    """A workflow value: a lone `${{ x }}` keeps x's type; mixed text gets each expression as text."""
    if not isinstance(value, str):
        return value
    whole = re.fullmatch(r"\s*\$\{\{((?:(?!\}\}).)*)\}\}\s*", value, flags=re.S)
    if whole:
        return evaluate(whole.group(1), context)
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: to_string(evaluate(m.group(1), context)), value, flags=re.S)


@dataclass(frozen=True)
class Launch:
    """What the workflow hands the runner: the job's environment and the launch step's script."""

    env: dict[str, str]
    step_env: dict[str, str]
    script: str
    caller: str


def load(path: Path) -> dict[Any, Any]:
    data = yaml.safe_load(path.read_text())
    # PyYAML reads the `on:` key as True (YAML 1.1); GitHub reads it as "on".
    return {("on" if k is True else k): v for k, v in data.items()}


def caller_job(sweep: dict[str, Any], agentic: bool) -> tuple[str, dict[str, Any]]:
    """The run-sweep.yml job that dispatches this kind of multinode row to the template."""
    for name, job in sweep["jobs"].items():
        if (
            str(job.get("uses", "")).endswith(TEMPLATE)
            and "eval" not in name
            and ("agentic" in name) == agentic
        ):
            return name, job["with"]
    raise LookupError(
        f"no job in run-sweep.yml calls {TEMPLATE} for {'agentic' if agentic else 'fixed'} rows"
    )


def template_inputs(template: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    declared = template["on"]["workflow_call"]["inputs"]
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise LookupError(f"{TEMPLATE} declares no input {', '.join(unknown)}")
    inputs: dict[str, Any] = {}
    for name, spec in declared.items():
        value = given.get(name, spec.get("default"))
        if spec.get("type") == "string" and value is not None:
            value = to_string(value)
        inputs[name] = value
    return inputs


def launch(workflows: Path, row: dict[str, Any], runner_name: str) -> Launch:
    sweep, template = load(workflows / "run-sweep.yml"), load(workflows / TEMPLATE)
    name, mapping = caller_job(
        sweep, agentic=row.get("scenario-type") == "agentic-coding" or "duration" in row
    )
    outer = {"matrix": {"config": row}, "github": {"event": {}}, "inputs": {}, "vars": {}}
    inputs = template_inputs(template, {k: substitute(v, outer) for k, v in mapping.items()})
    context: dict[str, Any] = {"inputs": inputs, "secrets": {}, "vars": {}, "github": {"event": {}}}
    env = {k: to_string(substitute(v, context)) for k, v in template["env"].items()}
    step = next(s for s in template["jobs"]["benchmark"]["steps"] if s.get("name") == LAUNCH_STEP)
    context |= {"env": env, "runner": {"name": runner_name}}
    step_env = {k: to_string(substitute(v, context)) for k, v in step.get("env", {}).items()}
    return Launch(env, step_env, to_string(substitute(step["run"], context)), f"run-sweep.yml jobs.{name}")
