"""The rows of one master-config key, from InferenceX's own matrix generator run in its checkout."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

GENERATOR = "utils/matrix_logic/generate_sweep_configs.py"
TIMEOUT = 30.0


class RowError(LookupError):
    pass


def rows(checkout: Path, key: str) -> list[dict[str, Any]]:
    """`generate_sweep_configs.py test-config` for the key, multinode rows only. It imports pydantic and
    PyYAML, both in this repository's environment, so it runs on this Python."""
    command = [sys.executable, GENERATOR, "test-config", "--config-files", "configs/amd-master.yaml"]
    command += ["--runner-config", "configs/runners.yaml", "--config-keys", key, "--no-evals"]
    done = subprocess.run(command, cwd=checkout, capture_output=True, text=True, timeout=TIMEOUT)
    if done.returncode != 0:
        raise RowError(f"{GENERATOR} failed for {key} (exit {done.returncode}): {done.stderr.strip()[-600:]}")
    found = [row for row in json.loads(done.stdout) if isinstance(row, dict) and "prefill" in row]
    if not found:
        raise RowError(f"{GENERATOR} gave no multinode (prefill/decode) row for {key}")
    return found


def describe(row: dict[str, Any]) -> str:
    prefill, decode = row["prefill"], row["decode"]
    return (
        f"isl={row.get('isl')} osl={row.get('osl')} conc={row.get('conc')} "
        f"prefill={prefill['num-worker']}x tp{prefill['tp']} ep{prefill['ep']} dpa={prefill['dp-attn']} "
        f"decode={decode['num-worker']}x tp{decode['tp']} ep{decode['ep']} dpa={decode['dp-attn']}"
    )


def pick(found: list[dict[str, Any]], selector: str | int | None) -> dict[str, Any]:
    """By index, or by `field=value[,field=value]` over top-level and prefill./decode. fields (e.g.
    `isl=8192,decode.tp=8`); without a selector, the first row."""
    if selector is None:
        return found[0]
    if isinstance(selector, int) or str(selector).isdigit():
        index = int(selector)
        if index >= len(found):
            raise RowError(f"row {index} asked for, the generator gave {len(found)} rows")
        return found[index]
    wanted = dict(part.split("=", 1) for part in str(selector).split(","))
    matches = [row for row in found if all(_field(row, k) == v for k, v in wanted.items())]
    if len(matches) != 1:
        listing = "\n".join(f"  [{i}] {describe(r)}" for i, r in enumerate(found))
        raise RowError(f"selector {selector!r} matches {len(matches)} of {len(found)} rows:\n{listing}")
    return matches[0]


def _field(row: dict[str, Any], dotted: str) -> str:
    value: Any = row
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, list | dict) else str(value)
