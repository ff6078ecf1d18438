"""Run each engine's probe, in its tool virtualenv, over every line its builds' parser judges: one process
per engine, all engines at once, caches under the repository's .cache/ (never the home directory)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from schemas.engine_builds import tool_extra

from .lines import Line
from .recorded import judge as recorded_judge

ROOT = Path(__file__).resolve().parents[2]
PROBES = Path(__file__).resolve().parent / "probes"
DEFAULT_CACHE = ROOT / ".cache" / "engines"
ENGINE_TIMEOUT_S = 1800  # a first import under heavy load took 170 s; this only bounds a hang


class ToolMissing(RuntimeError):
    """A parser's virtualenv is not there (or holds another version): `make tools` builds it."""


@dataclass(frozen=True)
class Verdict:
    line: Line
    ok: bool
    message: str = ""  # the engine's own words (rejected)
    stage: str = ""  # where the engine refused it
    ms: float = 0.0


@dataclass(frozen=True)
class Tool:
    """A parser: the PyPI release and the virtualenv that holds it (a recorded parser has none)."""

    package: str
    version: str
    installed: bool = True

    @property
    def venv(self) -> Path:
        return ROOT / f".venv-{tool_extra(self.package)}"  # make tools builds it from that extra

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def __str__(self) -> str:
        return f"{self.package} {self.version}"


def tools_of(builds) -> tuple:
    """The parsers that judge these builds, once each (a recorded one has no virtualenv: installed False)."""
    return tuple(
        dict.fromkeys(Tool(b.parser.package, b.parser.version, b.parser.recorded is None) for b in builds)
    )


def tool_of(line: Line) -> Tool:
    return Tool(line.build.parser.package, line.build.parser.version)


def probe_env(cache: Path) -> dict:
    """A clean environment: no hub, no home directory, no stray engine variable of the caller's."""
    home = cache / "home"
    home.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "HOME": str(home),
        "TMPDIR": os.environ.get("TMPDIR", "/tmp"),
        "XDG_CACHE_HOME": str(cache / "xdg"),
        "HF_HOME": str(cache / "hf"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_CACHE_ROOT": str(cache / "vllm"),
        "TRITON_CACHE_DIR": str(cache / "triton"),
        "SGLANG_CACHE_DIR": str(cache / "sglang"),
    }


def _request(tool: Tool, lines: list, dump: Path | None, work: Path) -> Path:
    items = [
        {"id": str(i), "argv": list(line.argv), "env": dict(line.env), "depth": line.depth}
        for i, line in enumerate(lines)
    ]
    path = work / f"request-{tool.package}.json"
    path.write_text(json.dumps({"lines": items, "dump": str(dump) if dump else None}, indent=1) + "\n")
    return path


def _start(tool: Tool, lines: list, dump: Path | None, cache: Path, work: Path) -> tuple:
    request = _request(tool, lines, dump, work)
    answer, log = work / f"answer-{tool.package}.json", work / f"probe-{tool.package}.log"
    answer.unlink(missing_ok=True)
    script = PROBES / f"probe_{tool.package}.py"
    with log.open("w") as out:  # the engine's own output: kept for when a probe itself fails
        process = subprocess.Popen(
            [str(tool.python), "-E", "-s", str(script), str(request), str(answer)],
            env=probe_env(cache),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    return process, answer, log


def _finish(tool: Tool, process, answer: Path, log: Path) -> dict:
    code = process.wait()
    if code != 0 or not answer.is_file():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise RuntimeError(f"the {tool} probe failed (exit {code}); the end of {log}:\n{tail}")
    data = json.loads(answer.read_text())
    if data["version"] != tool.version:
        raise ToolMissing(
            f"{tool.venv.name} holds {tool.package} {data['version']}, not {tool.version}: run `make tools`"
        )
    return data


def judge(
    lines: list[Line],
    *,
    cache: Path = DEFAULT_CACHE,
    dump_dir: Path | None = None,
    tools: tuple = (),
    say: Callable[[str], None] = lambda text: print(text, file=sys.stderr, flush=True),
) -> list[Verdict]:
    """Verdicts in the order of `lines`. `dump_dir`: also write <package>-<version>.json, a description of
    each parser run (every tool in `tools` runs, with lines or not)."""
    groups: dict[Tool, list] = {tool: [] for tool in tools if tool.installed}
    recorded = {id(line): recorded_judge(line) for line in lines if line.build.parser.recorded}
    for line in lines:
        if id(line) not in recorded:
            groups.setdefault(tool_of(line), []).append(line)
    _check_tools(groups)
    (cache / "runs").mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=cache / "runs"))  # runs at once do not mix files
    running = {}
    try:
        for tool, mine in groups.items():
            dump = dump_dir / f"{tool.package}-{tool.version}.json" if dump_dir else None
            say(f"engines: {tool} judging {len(mine)} line(s) in {tool.venv.name} (a first run: 20-70 s)")
            running[tool] = _start(tool, mine, dump, cache, work)
        by_line = _collect(running, groups, say)
    finally:
        for process, _, _ in running.values():  # a probe still running after another one failed
            process.kill()
    shutil.rmtree(work, ignore_errors=True)  # kept when a probe failed: its log is named in the error
    by_line.update(recorded)
    return [by_line[id(line)] for line in lines]


def _check_tools(groups: dict) -> None:
    """Before any probe starts: none is left running because another tool is missing."""
    for tool, mine in groups.items():
        if not tool.python.is_file():
            raise ToolMissing(
                f"{tool} judges {len(mine)} line(s) but {tool.venv.name} is missing: run `make tools` "
                f"(pyproject.toml extra {tool_extra(tool.package)}); `make check-engines` builds it itself"
            )


def _collect(running: dict, groups: dict, say) -> dict:
    """Each tool's verdicts as its probe finishes (reported then), by id() of their lines; `running` is
    emptied as they finish."""
    started, by_line = time.monotonic(), {}
    while running:
        done = [tool for tool, (process, _, _) in running.items() if process.poll() is not None]
        if not done and time.monotonic() - started > ENGINE_TIMEOUT_S:
            raise RuntimeError(f"{', '.join(map(str, running))}: no verdicts after {ENGINE_TIMEOUT_S} s")
        time.sleep(0 if done else 0.2)
        for tool in done:
            data = _finish(tool, *running.pop(tool))
            say(f"engines: {tool} done after {time.monotonic() - started:.0f} s ({_timing(data)})")
            for line, result in zip(groups[tool], data["results"], strict=True):
                by_line[id(line)] = _verdict(line, result)
    return by_line


def _timing(data: dict) -> str:
    ms = [r["ms"] for r in data["results"]]
    text = f"import {data['import_s']} s"
    if ms:
        text += f", first line {ms[0] / 1000:.1f} s"
    if len(ms) > 1:
        text += f", then {sum(ms[1:]) / len(ms[1:]):.0f} ms a line"
    return text


def _verdict(line: Line, result: dict) -> Verdict:
    message = result["message"].replace(line.stub, line.model_path) if line.stub else result["message"]
    return Verdict(line, result["verdict"] == "ok", message, result["stage"], result["ms"])
