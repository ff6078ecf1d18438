"""Property tests: random mutations of a valid entry, and arbitrary text, never crash the linter.

Whatever the input, the in-process CLI exits 0 (nothing printed) or 1 (one well-formed finding per line).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.settings import REGISTRY

from .conftest import KEY, RUNNERS, baseline, dump, rows, run_lint

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _walk(node, path=()):
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _walk(value, path + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _walk(value, path + (i,))


BASE = baseline()
NODES = list(_walk(BASE))
PATHS = [path for path, _ in NODES if path]
DICTS = [path for path, node in NODES if isinstance(node, dict)]
LISTS = [path for path, node in NODES if isinstance(node, list) and node]
SETTING_LISTS = [path for path in LISTS if path[-1] == "additional-settings"]
KNOWN_KEYS = sorted({part for path in PATHS for part in path if isinstance(part, str)})

# Values that break shells, parsers and line-oriented output.
NASTY = [
    "$(touch x)",
    "`touch x`",
    "a b",
    "; rm -rf /",
    "x\ny",
    "x\ry",
    "'",
    '"',
    "\\",
    "ü",
    "\u0663",
    "\u202e",
    "",
    "=",
    "nan",
    "inf",
    "-1",
    "0",
    "1.5",
    "tcp",
    "rdma",
    "LRU",
    "/models/a b",
    "/models/ok",
    "1e9",
    " 8",
    "a: b",
    "\x1b[31m",
    "\x9b2J",
    "\u2066x",
]
scalars = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.booleans(),
    st.none(),
    st.text(max_size=24),
    st.sampled_from(NASTY),
)


def _containers(kids):
    return st.one_of(st.lists(kids, max_size=3), st.dictionaries(st.text(max_size=10), kids, max_size=3))


values = st.recursive(scalars, _containers, max_leaves=8)
keys = st.one_of(
    st.text(max_size=16), st.sampled_from(KNOWN_KEYS + NASTY), st.integers(), st.booleans(), st.none()
)
setting_items = st.one_of(
    st.text(max_size=40),
    st.builds(
        "{}={}".format,
        st.sampled_from([*REGISTRY, "MC_PROTOKOL", "mc_protocol", "", "A B"]),
        st.one_of(st.sampled_from(NASTY), st.text(max_size=16)),
    ),
)
YAMLISH = st.text(
    alphabet=st.sampled_from(list(":-[]{}!&*#|>'\"\n ,?%@`=<.\t") + list("abk01yn~")), max_size=60
)
ROLES = st.sampled_from(["config", "runners", "changelog"])


def _node(data, path):
    for part in path:
        data = data[part]
    return data


def _delete(data, path):
    del _node(data, path[:-1])[path[-1]]


def _replace(data, path, value):
    _node(data, path[:-1])[path[-1]] = value


def _insert(data, path, key, value):
    _node(data, path)[key] = value


def _rename(data, path, new):
    node = _node(data, path[:-1])
    items = [(new if k == path[-1] else k, v) for k, v in node.items()]
    node.clear()
    node.update(items)


def _duplicate(data, path, index):
    node = _node(data, path)
    node.insert(index % len(node), node[index % len(node)])


def _set_setting(data, path, index, item):
    node = _node(data, path)
    node.insert(index % (len(node) + 1), item)


RENAMEABLE = [p for p in PATHS if isinstance(p[-1], str)]
mutations = st.one_of(
    st.tuples(st.just(_delete), st.sampled_from(PATHS)),
    st.tuples(st.just(_replace), st.sampled_from(PATHS), values),
    st.tuples(st.just(_insert), st.sampled_from(DICTS), keys, values),
    st.tuples(st.just(_rename), st.sampled_from(RENAMEABLE), keys),
    st.tuples(st.just(_duplicate), st.sampled_from(LISTS), st.integers(0, 20)),
    st.tuples(st.just(_set_setting), st.sampled_from(SETTING_LISTS), st.integers(0, 20), setting_items),
)


def mutated(ops) -> dict:
    entry = baseline()
    for op, *args in ops:
        try:
            op(entry, *args)
        except (KeyError, IndexError, TypeError, AttributeError, ZeroDivisionError):
            pass  # an earlier mutation removed or retyped what this one targets
    return entry


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("props")


def assert_well_formed(code, out, err, file):
    assert code in (0, 1), err
    assert "Traceback" not in err and "internal error" not in err
    assert (code == 1) == bool(rows(out, file)), out
    assert all(line.isprintable() for line in out.splitlines()), out  # no control or bidi character raw


@SETTINGS
@given(ops=st.lists(mutations, min_size=1, max_size=3))
def test_mutated_entry_never_crashes(folder, ops):
    file = folder / "master.yaml"
    file.write_text(dump({KEY: mutated(ops)}), encoding="utf-8")
    for profile in ("strict", "inferencex-legacy"):  # our runners.yaml is in the older form
        assert_well_formed(*run_lint("--profile", profile, "--runners", RUNNERS, file), file)


@SETTINGS
@given(items=st.lists(setting_items, min_size=1, max_size=6), where=st.sampled_from(SETTING_LISTS))
def test_random_additional_settings_never_crash(folder, items, where):
    entry = baseline()
    _replace(entry, where, items)
    file = folder / "settings.yaml"
    file.write_text(dump({KEY: entry}), encoding="utf-8")
    code, out, err = run_lint("--runners", RUNNERS, file)
    assert_well_formed(code, out, err, file)
    for item in items:  # nothing with a shell metacharacter gets through unreported
        if any(c in item.partition("=")[2] for c in "$`;|&<> \n'\"\\"):
            assert code == 1


@SETTINGS
@given(text=st.one_of(st.text(max_size=200), YAMLISH), role=ROLES)
def test_arbitrary_text_never_crashes(folder, text, role):
    file = folder / f"{role}.yaml"
    file.write_text(text, encoding="utf-8")
    argv = {"config": [file], "runners": ["--runners", file], "changelog": ["--changelog", file]}[role]
    assert_well_formed(*run_lint(*argv), file)
