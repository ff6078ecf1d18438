"""The pure pieces under the node tools' network and file reads: strict JSON (scripts/safejson.py) and the
barrier's sealed lines (scripts/barrierwire.py)."""

from __future__ import annotations

import sys
import time

import pytest
from conftest import SCRIPTS

sys.path.insert(0, str(SCRIPTS))
import safejson  # noqa: E402 (scripts/ is not a package: it runs on the nodes)
from barrierwire import AuthError, Session, hello_parts, new_nonce  # noqa: E402


def nested(depth: int) -> list:
    value: list = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    "text, value",
    [
        ('{"a": [1, 2.5, "x"]}', {"a": [1, 2.5, "x"]}),
        ("[" * 64 + "]" * 64, nested(64)),  # exactly the limit
        ('["' + "[" * 100 + '", "\\"' + "{" * 100 + '"]', ["[" * 100, '"' + "{" * 100]),  # inside strings
        ("1e308", 1e308),
    ],
    ids=lambda v: str(v)[:30],
)
def test_json_within_the_bounds_is_read_as_json_reads_it(text, value):
    assert safejson.loads(text) == value


@pytest.mark.parametrize(
    "text, problem",
    [
        ("[" * 65 + "]" * 65, "nested deeper than 64 levels"),
        ('{"a": ' * 65 + "1" + "}" * 65, "nested deeper than 64 levels"),
        ("[" * 100_000 + "]" * 100_000, "nested deeper than 64 levels"),
        ('{"x": [1, NaN]}', "x[1] is NaN, not a finite number"),
        ('{"x": {"y": Infinity}}', "x.y is Infinity, not a finite number"),
        ("-Infinity", "the document is -Infinity, not a finite number"),
        ('{"big": 1e999}', "big is 1e999, not a finite number"),
        ('{"a": 1', "Expecting ',' delimiter"),
        (b"\x80{}", "can't decode byte 0x80"),
    ],
    ids=lambda v: str(v)[:30],
)
def test_json_beyond_the_bounds_is_refused_naming_where(text, problem):
    with pytest.raises(safejson.JSONError) as refused:
        safejson.loads(text)
    assert problem in str(refused.value)


@pytest.mark.parametrize(
    "data",
    [b'"' + b'a\\"' * 30_000, b'"\\"' * 30_000, b'"' * 60_000, b'"aaaa\\' * 20_000],
    ids=["escaped-quotes", "quote-backslash", "quotes", "trailing-backslashes"],
)
def test_the_nesting_prescan_stays_linear_on_quote_heavy_input(data):
    start = time.process_time()  # CPU time: the machine's load does not count
    with pytest.raises(safejson.JSONError):
        safejson.loads(data)
    assert time.process_time() - start < 1  # a backtracking scan of 60 kB of quotes takes minutes


def test_a_sealed_line_opens_only_in_its_own_session_and_as_its_own_kind():
    key = bytes(32)
    session = Session(key, new_nonce(), new_nonce())
    line = session.sealed("release", {"ranks": {}})[:-1]
    assert session.opened(line, ("release",)) == ("release", b'{"ranks":{}}')
    others = {
        "another leader nonce (a replay)": Session(key, new_nonce(), session.rank_nonce),
        "another rank nonce (a replay)": Session(key, session.leader_nonce, new_nonce()),
        "another job's key": Session(b"k" * 32, session.leader_nonce, session.rank_nonce),
    }
    for other in others.values():
        with pytest.raises(AuthError, match="bad MAC"):
            other.opened(line, ("release",))
    with pytest.raises(AuthError):  # a release does not pass for a registration
        session.opened(line.replace(b"release", b"registered", 1), ("registered",))


def test_a_hello_is_verified_before_its_json_is_read():
    leader_nonce = new_nonce()
    session = Session(bytes(32), leader_nonce, new_nonce())
    line = session.hello_line({"rank": 1})[:-1]
    parsed, mac, data = hello_parts(bytes(32), leader_nonce, line)
    parsed.verify("hello", mac, data)
    tampered = line.replace(b'"rank":1', b'"rank":2')
    parsed, mac, data = hello_parts(bytes(32), leader_nonce, tampered)
    with pytest.raises(AuthError, match="bad MAC"):
        parsed.verify("hello", mac, data)
