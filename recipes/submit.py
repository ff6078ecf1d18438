"""`make submit`: render one variant, snapshot it into a run folder, sbatch it under a unique job name.

The run folder holds everything the job reads (rendered files, scripts/, proxy/, and on runners with a
node-setup the pinned wheels of the tools the image lacks), so later edits of the checkout never change a
running or finished job. --dry-run prints the exact sbatch command and those wheels with their SHA-256.
"""

from __future__ import annotations

import argparse
import compileall
import datetime as dt
import hashlib
import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from schemas.findings import Finding
from schemas.images import parse_image
from schemas.pins import pinned_version

from . import nodes, nodesetup, resume, staging
from .render import (
    ROOT_DIR,
    Rendered,
    RenderError,
    add_configs_option,
    add_soak_option,
    inside,
    load,
    render_config,
    write,
)


@dataclass(frozen=True)
class Submission:
    job_id: str
    job_name: str
    run_dir: Path
    resumed: resume.Resume | None = None  # RESUME=<run>: what the job reuses from it and what it runs
    exclusion: nodes.Exclusion | None = None  # the nodes the node ledger left out, and why


def new_run_id(now: dt.datetime | None = None) -> str:
    """Unique per submission: a shared job name once let `scancel --name` kill someone else's job."""
    now = now or dt.datetime.now(dt.UTC)
    return f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def sbatch_command(
    rendered: Rendered, run_dir: Path, run_id: str, exclude: list[str] | tuple[str, ...] = ()
) -> list[str]:
    """`env RUN_DIR=... RECIPE_DIR=... sbatch ...`: the job's two paths travel in the environment that
    --export=ALL passes on, never inside --export's comma-separated list (a comma there adds variables).
    EXCLUDE: nodes the node ledger leaves out (recipes/nodes.py)."""
    plan = rendered.plan
    recipe = run_dir / "recipe"
    return [
        "env",
        f"RUN_DIR={run_dir}",
        f"RECIPE_DIR={recipe}",
        "sbatch",
        "--parsable",
        f"--job-name={plan.slurm.job_name}-{run_id}",
        f"--chdir={run_dir}",
        f"--output={run_dir}/job.out",
        *([f"--exclude={','.join(exclude)}"] if exclude else []),
        "--export=ALL",
        str(recipe / "job.sbatch"),
    ]


def node_exclusion(rendered: Rendered, out: Path) -> nodes.Exclusion:
    """The nodes of the plan's runner the node ledger under OUT leaves out (it learns from OUT's runs)."""
    plan = rendered.plan
    try:
        return nodes.exclusions(out, plan.runner, plan.slurm.nodes, nodes.runner_nodes(plan.runner))
    except nodes.LedgerError as exc:
        raise SubmitError(str(exc)) from None


SECRET_FILE = "job.secret"  # in the run folder: what proves a barrier peer belongs to this job


def snapshot(rendered: Rendered, run_dir: Path) -> None:
    recipe = run_dir / "recipe"
    run_dir.mkdir(parents=True, exist_ok=True)
    write_secret(run_dir / SECRET_FILE)
    write(rendered, run_dir / "rendered")  # out/<key>/<variant>/ layout, then flattened into recipe/
    shutil.move(str(run_dir / "rendered" / rendered.plan.config_key / rendered.plan.variant), recipe)
    shutil.rmtree(run_dir / "rendered")
    for name, source in rendered.plan.shipped:  # only what the job reads: node tools, proxy, traces
        shutil.copytree(ROOT_DIR / source, recipe / name, ignore=shutil.ignore_patterns("__pycache__"))
    # Every node starts the node tools a dozen times; an image (or host) with PYTHONDONTWRITEBYTECODE
    # recompiles their modules from source each time (~0.1 s of CPU a call). Compiled once here: a node
    # whose python3 is this one reads them, any other ignores them (the cache is named by version).
    if not compileall.compile_dir(recipe / "scripts", quiet=1, workers=1):
        raise SubmitError(f"{recipe}: a shipped Python file does not compile (above)")
    setup = node_setup(rendered, recipe)
    try:
        staged = staging.stage(rendered.plan, recipe, run_dir)
        image = staging.stage_image(rendered.plan)
    except (staging.StagingError, subprocess.TimeoutExpired) as exc:
        raise SubmitError(str(exc)) from None
    locked = lock(rendered, setup, staged, image)
    (run_dir / "lock.json").write_text(json.dumps(locked, indent=2, sort_keys=True) + "\n")


def node_setup(rendered: Rendered, recipe: Path) -> dict | None:
    """Each set's hashed requirements into recipe/setup/ and its wheels into recipe/wheelhouse/ (every hash
    checked); what the lock file records of them."""
    setup = rendered.plan.node_setup
    if setup is None:
        return None
    (recipe / "setup").mkdir()
    sets = {}
    for s in setup.sets:
        target = recipe / "setup" / f"{s.name}.txt"
        try:
            if s.lock is not None:
                shutil.copyfile(nodesetup.LOCKS / s.lock, target)
            else:
                target.write_text(nodesetup.requirement(s.name, s.version, s.sha256))
            if hashlib.sha256(target.read_bytes()).hexdigest() != s.requirements_sha256:
                raise SubmitError(f"{s.lock or s.name} changed since the plan was rendered: render again")
            if s.lock is not None:
                lock_file = nodesetup.LOCKS / s.lock
                wheels = nodesetup.wheelhouse(lock_file, setup.python, setup.platform, recipe / "wheelhouse")
            else:
                assert s.source is not None  # a set without a lock is a site wheel, from its source
                wheels = [nodesetup.site_wheel(s.source, s.sha256, recipe / "wheelhouse")]
        except nodesetup.SetupError as exc:
            raise SubmitError(str(exc)) from None
        sets[s.name] = {
            "lock" if s.lock else "source": s.lock or s.source,
            "requirements_sha256": s.requirements_sha256,
            "installed_on": s.where,
            "wheels": [{"file": w.file, "version": w.version, "sha256": w.sha256} for w in wheels],
        }
    return {"python": setup.python, "platform": setup.platform, "sets": sets}


def dry_run_setup(rendered: Rendered) -> list[str]:
    """What a submission would put in the wheelhouse: every pinned wheel with its accepted SHA-256s."""
    plan, setup = rendered.plan, rendered.plan.node_setup
    if setup is None:
        return []
    out = [f"# node setup (python {setup.python}, {setup.platform}), from the run's wheelhouse:"]
    for s in setup.sets:
        where = "rank 0" if s.where == "leader" else f"{s.where} nodes"
        if s.lock is None:
            out.append(f"#   {s.name}: site wheel {s.source} sha256:{s.sha256} ({where}, on the image's "
                       "Python path)")  # fmt: skip
            continue
        pins = nodesetup.read_lock(nodesetup.LOCKS / s.lock)
        out.append(f"#   {s.name}: {s.lock} (sha256 {s.requirements_sha256}), {len(pins)} wheels ({where}), "
                   f"puts on PATH: {', '.join(s.commands)}")  # fmt: skip
        out += [f"#     {p.name}=={p.version} sha256:{' sha256:'.join(p.hashes)}" for p in pins]
    named = {s.name for s in setup.sets}
    for role in plan.roles:
        for p in role.pinned:
            if p.dist in named:
                continue
            imports = f", and that it imports {', '.join(p.imports)}" if p.imports else ""
            out.append(
                f"# {p.dist} {p.version} behind `{p.command}` on {role.name} nodes: {p.source} "
                f"(preflight checks the version{imports})"
            )
    return out


def write_secret(path: Path) -> None:
    """A fresh random secret per run, readable by its owner only (the nodes read it from the shared file
    system; it never enters a rendered file, a log or the lock)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_hex(32) + "\n")


def image_digest(reference: str) -> str | None:
    parsed = parse_image(reference)
    return parsed.digest if parsed is not None else None


def lock(
    rendered: Rendered, setup: dict | None = None, staged: dict | None = None, image: dict | None = None
) -> dict:
    """What a result depends on, fixed at submission (the report adds the nodes the job ran on); SETUP: the
    wheels the nodes install (node_setup)."""
    plan = rendered.plan
    rendered_hash = hashlib.sha256()
    for name in sorted(rendered.files):
        rendered_hash.update(f"{name}\0{rendered.files[name]}\0".encode())
    return {
        "config_key": plan.config_key,
        "variant": plan.variant,
        "image": plan.image,
        "container_image": plan.container.image,  # what ran: the runner's own on a local container runner
        # of container_image: pinned by the config (name@sha256:...), else what every node resolved it to
        # (filled in by make report)
        "image_digest": image_digest(plan.container.image),
        # how the nodes get it without a pull (the runner's image-staging): the id each node is held to
        "image_staging": image,
        "components": {**dict(plan.components), "aiperf": pinned_version("bench", "aiperf")},
        "config_sha256": plan.config_sha256,
        "rendered_sha256": rendered_hash.hexdigest(),
        "mode": plan.mode,
        # Known-issue workarounds change performance: results of such a run compare only with its like.
        "workarounds": list(plan.workarounds),
        "node_setup": setup,
        "inputs": staged or {},
    }


class SubmitError(Exception):
    """sbatch is missing or refused the job."""


def run_dir_for(rendered: Rendered, out: Path, run_id: str) -> Path:
    return inside(out / "runs", rendered.plan.config_key, rendered.plan.variant, run_id)


def resume_of(rendered: Rendered, run_dir: Path, env: dict[str, str] | None) -> resume.Resume:
    """RESUME=<run>: what a new run reuses from it (recipes/resume.py), refused as a SubmitError."""
    try:
        return resume.plan_resume(rendered, lock(rendered), run_dir, env=env)
    except resume.ResumeError as exc:
        raise SubmitError(str(exc)) from None


def submit(
    rendered: Rendered, out: Path, *, env: dict[str, str] | None = None, resume_from: Path | None = None
) -> Submission:
    """Snapshot the variant into a new run folder and sbatch it; env is what the job inherits; RESUME_FROM:
    an earlier run of the same lock whose finished concurrencies the job skips (recipes/resume.py)."""
    run_id = new_run_id()
    run_dir = run_dir_for(rendered, out, run_id)
    if shutil.which("sbatch", path=(env or os.environ).get("PATH")) is None:
        raise SubmitError(
            "sbatch not found: run on a SLURM login node, or `make cluster-up` for the local cluster"
        )
    exclusion = node_exclusion(rendered, out)
    cmd = sbatch_command(rendered, run_dir, run_id, exclusion.nodes)
    resumed = resume_of(rendered, resume_from, env) if resume_from else None
    try:
        snapshot(rendered, run_dir)
        if exclusion.excluded or exclusion.kept:  # the evidence beside the run it shaped
            doc = {"excluded": exclusion.nodes, "entries": [e.model_dump() for e in exclusion.excluded]}
            doc["kept_in"] = [e.model_dump() for e in exclusion.kept]
            (run_dir / "excluded-nodes.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        if resumed:
            resume.apply(resumed, run_dir)
    except SubmitError:
        shutil.rmtree(run_dir, ignore_errors=True)  # a run folder without its wheels is no run
        raise
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    job_id = re.fullmatch(r"(\d+)(;.*)?", done.stdout.strip())
    if done.returncode != 0 or job_id is None:
        raise SubmitError(f"sbatch failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()}")
    job_name = next(a for a in cmd if a.startswith("--job-name=")).split("=", 1)[1]
    return Submission(job_id[1], job_name, run_dir, resumed, exclusion)


def pick(variants: list[Rendered], wanted: str | None) -> Rendered:
    names = [r.plan.variant for r in variants]
    if wanted is None and len(variants) == 1:
        return variants[0]
    for r in variants:  # a soak plan is named <variant>_soak; either name picks it
        if wanted in (r.plan.variant, r.plan.variant.removesuffix("_soak")):
            return r
    what = f"no variant {wanted!r}" if wanted else "several variants"
    raise RenderError(
        [_finding(variants[0].plan.config_key, f"{what}; choose VARIANT=one of: {', '.join(names)}")]
    )


def _finding(key: str, message: str) -> Finding:
    return Finding("configs", 0, (key,), message)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="submit", description=__doc__.splitlines()[0])
    p.add_argument("config")
    p.add_argument("--variant")
    p.add_argument("--dry-run", action="store_true", help="print the sbatch command, submit nothing")
    p.add_argument("--out", default="out", help="runs go to <out>/runs/<key>/<variant>/<run-id>/")
    add_soak_option(p)
    add_configs_option(p)
    p.add_argument("--resume", type=Path, metavar="RUN_DIR", help="run only what this earlier run left")
    args = p.parse_args(argv)
    try:
        loaded = load(args.config, args.configs)
        rendered = pick(render_config(args.config, loaded, soak_seconds=args.soak), args.variant)
    except RenderError as exc:
        for finding in exc.findings:
            print(finding.format())
        return 1
    if args.dry_run:
        run_id = new_run_id()
        try:
            exclusion = node_exclusion(rendered, Path(args.out))
        except SubmitError as exc:
            print(f"submit: {exc}", file=sys.stderr)
            return 1
        run_dir = run_dir_for(rendered, Path(args.out), run_id)
        print(shlex.join(sbatch_command(rendered, run_dir, run_id, exclusion.nodes)))
        for text in exclusion.lines():
            print(f"# {text}")
        for text in dry_run_setup(rendered) + staging.dry_run_lines(rendered.plan):
            print(text)
        try:
            resumed = resume_of(rendered, args.resume, None) if args.resume else None
        except SubmitError as exc:
            print(f"submit: {exc}", file=sys.stderr)
            return 1
        for text in resumed.lines() if resumed else []:
            print(f"# {text}")
        return 0
    try:
        job = submit(rendered, Path(args.out), resume_from=args.resume)
    except SubmitError as exc:
        print(f"submit: {exc}", file=sys.stderr)
        return 1
    for text in job.resumed.lines() if job.resumed else []:
        print(text)
    for text in job.exclusion.lines() if job.exclusion else []:
        print(text)
    print(f"submitted job {job.job_id} ({job.job_name})")
    print(f"run folder: {job.run_dir}")
    print(f"main output: {job.run_dir}/job.out\nnode logs: {job.run_dir}/logs/<node>/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
