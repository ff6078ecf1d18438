"""`make export CONFIG=<key>`: a config as the srt-slurm recipe and master row InferenceX now asks for.

Writes, under OUT/export/<key>/ (laid out as an InferenceX checkout, so the row renders back from it):
- benchmarks/multi_node/srt-slurm-recipes/exported/<key>/disagg-variants.yaml: the schema-2 bundle, one
  `override_<variant>` per distinct launch (recipes/outside/srt_export.py);
- configs/amd-master.yaml: the entry's row, each point's `srt-recipe:` pointing at its section.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import yaml

from schemas.findings import Finding

from .outside import srt_export
from .outside.srt_recipe import RecipeError
from .render import RenderError, add_configs_option, inside, load, render_config


def export(key: str, configs: list[Path] | None, out: Path, router: str | None = None) -> tuple[Path, Path]:
    """(recipe file, master file) written for config `key`; `router` (NAME@VERSION): the entry's router
    replaced first, for a config whose router srt-slurm cannot start."""
    loaded = load(key, configs)
    if router is not None:
        loaded = _with_router(key, loaded, router, out)
    entry = loaded.entries[key]
    targets = loaded.targets(key)
    rendered = render_config(key, loaded)
    sections: dict[str, dict] = {}  # section name -> recipe
    by_content: dict[str, str] = {}  # a recipe's YAML (its name aside) -> the section holding it
    pointers: dict[tuple, list[tuple[int | None, str]]] = {}  # point path -> [(concurrency, pointer)]
    path = srt_export.recipe_path(key)
    for t, r in zip(targets, rendered, strict=True):
        workers = {role: t.worker(role).num_worker for role in t.roles}
        recipe = srt_export.variant_recipe(r.plan.to_json(), workers, entry.precision)
        content = yaml.safe_dump({k: v for k, v in recipe.items() if k != "name"}, sort_keys=True)
        name = by_content.setdefault(content, re.sub(r"[^A-Za-z0-9_-]", "_", t.variant))
        sections.setdefault(name, recipe)
        pointers.setdefault(t.point.path, []).append((t.concurrency, f"{path}:override_{name}"))
    per_point: list[list[tuple[int | None, str]]] = [
        [(None, found[0][1])] if len({p for _, p in found}) == 1 else found for found in pointers.values()
    ]
    row = srt_export.master_row(entry.model_dump(by_alias=True, exclude_none=True, mode="json"), per_point)
    root = inside(out, "export", key)
    recipe_file, master = root / path, root / "configs" / "amd-master.yaml"
    recipe_file.parent.mkdir(parents=True, exist_ok=True)
    master.parent.mkdir(parents=True, exist_ok=True)
    recipe_file.write_text(yaml.safe_dump(srt_export.bundle(sections), sort_keys=False, width=120))
    master.write_text(yaml.safe_dump({key: row}, sort_keys=False, width=120))
    _round_trip(key, master, {r.plan.variant: srt_export.launched(r.plan.to_json()) for r in rendered})
    return recipe_file, master


def _with_router(key: str, loaded, router: str, out: Path):
    """The config with its router replaced, linted and loaded as any master file is (written beside the
    export, so what was proposed can be read)."""
    name, sep, version = router.partition("@")
    if not sep or not name or not version:
        raise RecipeError(f"ROUTER={router!r}: write NAME@VERSION (e.g. vllm-router@0.1.17)")
    entry = loaded.entries[key].model_dump(by_alias=True, exclude_none=True, mode="json")
    was = entry.get("router", {}).get("name", "the image's")
    entry["router"] = {"name": name, "version": version}
    source = inside(out, "export", f"{key}.router-{name}.yaml")
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text(yaml.safe_dump({key: entry}, sort_keys=False, width=120))
    print(f"export: {key}: router {was} replaced by {name} {version} ({source})", file=sys.stderr)
    return load(key, [source])


def _round_trip(key: str, master: Path, ours: dict) -> None:
    """The exported row renders the launch it was exported from, every process's environment and flags
    alike (engines, LMCache servers, the router), variant by variant in order (a point split per concurrency
    renders under new names); otherwise the export is refused, saying where it differs (the files stay)."""
    try:
        back = [srt_export.launched(r.plan.to_json()) for r in render_config(key, load(key, [master]))]
    except RenderError as exc:
        said = f"the exported row does not render back: what is under {master.parent.parent} is no proposal"
        raise RenderError([*exc.findings, Finding(str(master), 0, (key,), said)]) from None
    if len(back) != len(ours):
        raise RecipeError(f"the exported row renders {len(back)} variants, the config {len(ours)}")
    for (variant, processes), got_all in zip(ours.items(), back, strict=True):
        for process, (env, flags) in processes.items():
            got = got_all.get(process)
            if got is None or got != (env, flags):
                theirs_env, theirs_flags = got or ({}, {})
                names = sorted({k for k in {*env, *theirs_env} if env.get(k) != theirs_env.get(k)})
                names += sorted(
                    {f"--{k}" for k in {*flags, *theirs_flags} if flags.get(k) != theirs_flags.get(k)}
                )
                raise RecipeError(
                    f"{variant}/{process}: the exported recipe renders back otherwise: {', '.join(names)}"
                )
        if extra := sorted(set(got_all) - set(processes)):
            raise RecipeError(f"{variant}: the exported recipe renders back processes it had not: {extra}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="export", description=__doc__.splitlines()[0])
    p.add_argument("config", help="config key")
    p.add_argument("--out", type=Path, default=Path("out"), help="output folder (default: out)")
    p.add_argument(
        "--router",
        metavar="NAME@VERSION",
        help="replace the config's router first (srt-slurm runs vllm-router or sglang-router, not pd-proxy)",
    )
    add_configs_option(p)
    args = p.parse_args(argv)
    try:
        recipe, master = export(args.config, args.configs, args.out, args.router)
    except RenderError as exc:
        return exc.report("export", "exported as a proposal")
    except RecipeError as err:
        print(f"export: {err}", file=sys.stderr)
        return 1
    print(f"{recipe}\n{master}")
    print(f"render it back: make render CONFIG={args.config} CONFIGS={master}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
