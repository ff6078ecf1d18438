"""The failure vocabulary and catalog (scripts/failures.py): what recipe pages say the job prints is
what the node scripts print, and make bench-failfast checks its faults against the same entries."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import failures
from scripts.failures import CLASSES, WORDS, fill, pattern

HEADLINE, VERDICT = WORDS["headline"], WORDS["verdict"]
text = fill

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def scripts_text() -> str:
    return "\n".join(p.read_text() for p in sorted(SCRIPTS.rglob("*")) if p.suffix in (".py", ".sh"))


def phrases(template: str) -> list[str]:
    """Runs of two or more lowercase words outside placeholders and quotes (a quoted part of a message is
    the command that failed, not the message)."""
    literal = re.sub(r"'[^']*'", "\0", re.sub(r"<(?:\w+|\.\.\.)>", "\0", template))
    return re.findall(r"[a-z][a-z-]*(?: [a-z][a-z-]*)+", literal)


def example(template: str) -> str:
    """TEMPLATE with every placeholder filled: digits where the job prints numbers."""
    numbers = {"code", "timeout", "line", "C"}
    return re.sub(r"<(\w+|\.\.\.)>", lambda m: "7" if m[1] in numbers else f"x-{m[1]}", template)


@pytest.mark.parametrize("fc", CLASSES, ids=lambda fc: fc.name)
def test_each_message_matches_its_own_pattern(fc):
    values = fc.values(engine="vllm")
    for template in fc.prints:
        line = example(text(template, **values))
        assert re.search(fc.prints_pattern(engine="vllm"), line), (template, line)


@pytest.mark.parametrize("fc", CLASSES, ids=lambda fc: fc.name)
def test_each_message_is_made_of_what_the_node_scripts_print(fc):
    """The longest phrase of each line the catalog quotes is in scripts/: a message reworded there must
    be reworded here, where recipe pages and the bench read it."""
    source = scripts_text()
    for template in (*fc.prints, fc.cause, fc.detail):
        found = phrases(template)
        if found:
            longest = max(found, key=len)
            assert longest in source, f"{fc.name}: {longest!r} is not in scripts/"


def test_names_are_unique_and_kebab_case():
    names = [fc.name for fc in CLASSES]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", n) for n in names)


def test_headline_is_the_node_library_s():
    """The node library prints the vocabulary's own headline (it loads its words from failures.py)."""
    script = f'set -Eeuo pipefail; source {SCRIPTS}/lib/node.sh; _node_word headline "a b" sim1 "x %s y"'
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30, check=False)
    assert done.stdout == text(HEADLINE, step="a b", node="sim1", message="x %s y") + "\n", done.stderr


def test_every_word_the_node_library_prints_is_in_the_vocabulary():
    used = set()
    for path in sorted((SCRIPTS / "lib").glob("*.sh")):
        used |= set(re.findall(r"_node_word ([a-z][a-z-]*)", path.read_text()))
    assert used and used <= set(WORDS), used - set(WORDS)


def test_verdict_is_outcome_py_s(monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))  # scripts/ is not a package: it runs on the nodes
    sys.modules.pop("outcome", None)
    from outcome import Outcome, verdict

    code, line = verdict({"sim2": Outcome("sim2", 4, "failure", 1.0, "prefill lmcache")}, 143)
    assert line.splitlines()[0] == text(VERDICT, node="sim2", step="prefill lmcache", code=code)


def test_pattern_takes_given_values_literally_and_others_loosely():
    regex = pattern("<service> exited (code <code>) on <node>", service="a.b")
    assert re.fullmatch(regex, "a.b exited (code 12) on sim1")
    assert not re.fullmatch(regex, "axb exited (code 12) on sim1")
    assert not re.fullmatch(regex, "a.b exited (code 0) on sim1")  # an unnamed exit code is a failure's


def test_the_bench_injects_catalog_classes_only():
    from tests.bench.failfast_faults import FAULTS

    assert {f.failure for f in FAULTS} <= set(CLASSES)
    for f in FAULTS:
        assert f.name == f.failure.name and "<" not in f.title and re.compile(f.expect.what)
    assert failures.BY_NAME["lmcache-exit-at-start"] in {f.failure for f in FAULTS}
