"""Strict rules of runners whose engines are not an image's: the local CPU cluster's (configs/launch.yaml
engine-build cpu). One named rule per function, each yielding Problems, as in rules_strict.py.

Such a runner runs the CPU build pinned in a tool venv (engine-venv), whatever image the config names; so
the image must name that very release, or lock.json, the recipe page and the known-issue checks would speak
of another engine than the one that ran. And a known-issue workaround the runner applies (its own connector
module) counts only on a runner that names it.
"""

from __future__ import annotations

from collections.abc import Iterator

from . import engine_builds as eb
from . import known_issues as ki
from . import settings as reg
from .context import Context
from .findings import Problem
from .launch import LaunchProfile
from .pins import requirements

BUILDS = eb.BUILDS_FILE


def _profile(ctx: Context) -> LaunchProfile | None:
    if ctx.launch is None:
        return None
    return ctx.launch.profiles.get(ctx.runner)


def venv_engine(venv: str) -> tuple[str, str] | None:
    """(distribution, version) of the engine a tool venv holds: its extra's first pin."""
    try:
        first = requirements(venv)[0]
    except (KeyError, IndexError):
        return None
    name, _, version = first.partition("==")
    return (name, version) if version else None


def _cpu_engines_are_the_images_release(ctx: Context) -> Iterator[Problem]:
    """On a runner with engine-build cpu, the image names the release its tool venv runs."""
    profile = _profile(ctx)
    if profile is None or profile.engine_build != "cpu" or ctx.builds is None:
        return
    assert profile.engine_venv is not None  # LaunchProfile: engine-build cpu names its engine-venv
    where = ctx.path + ("image",)
    engine = venv_engine(profile.engine_venv)
    if engine is None:
        yield Problem(
            ctx.path + ("runner",),
            f"runner {ctx.entry.runner!r} takes its engines from engine-venv {profile.engine_venv!r}, which "
            "pyproject.toml does not pin",
            f"add the extra {profile.engine_venv} to pyproject.toml, the engine's pin first",
        )
        return
    build = eb.build_of(ctx.entry.image, ctx.builds)
    if build is None:
        return  # _image_has_engine_build says why
    dist, version = engine
    if build.engine != reg.engine_of(ctx.entry.framework) or build.version != version:
        yield Problem(
            where,
            f"runner {ctx.entry.runner!r} runs {dist} {version} from .venv-{profile.engine_venv}, but image "
            f"{ctx.entry.image} carries {build.id}",
            f"name an image of a {version} {build.engine} CPU build listed in {BUILDS}",
        )


def _connector_module_workaround_applied(ctx: Context) -> Iterator[Problem]:
    """A recorded workaround that is a runner's connector module is applied only where the runner's launch
    profile names that module (a config cannot apply it with settings)."""
    profile = _profile(ctx)
    if ctx.launch is None:
        return
    by_id = {issue.id: issue for issue in ctx.issues}
    module = profile.kv_connector_module.module if profile and profile.kv_connector_module else None
    for i, record in enumerate(ctx.entry.known_issue_workarounds):
        issue = by_id.get(record.issue)
        workaround = (
            next((w for w in issue.workarounds if w.id == record.workaround), None) if issue else None
        )
        if issue is None or workaround is None or workaround.kv_connector_module is None:
            continue  # unknown ids: _known_issues_handled reports them
        if workaround.kv_connector_module != module:
            yield Problem(
                ctx.path + (ki.RECORDS, i),
                f"recorded workaround {workaround.id} of {issue.id} is the connector module "
                f"{workaround.kv_connector_module}, which runner {ctx.entry.runner!r} does not load "
                f"(its kv-connector-module: {module or 'none'})",
                "run it on a local runner whose launch profile names that module, or choose another "
                "workaround",
            )


LOCAL = (_cpu_engines_are_the_images_release, _connector_module_workaround_applied)
