"""The one quoting place: whatever a value holds, bash receives it unchanged and executes nothing."""

from __future__ import annotations

import json
import subprocess

from hypothesis import given, settings
from hypothesis import strategies as st

from recipes.words import Ref, bash_argv, bash_word, json_word, word

HOSTILE = [
    "a b",
    "it's",
    '"quoted"',
    "$(touch {p})",
    "`touch {p}`",
    "${{HOME}}",
    "x;touch {p}",
    "\n",
    "*",
    "-",
    "",
]


def echo_args(rendered: str, env: dict | None = None) -> list[str]:
    out = subprocess.run(
        ["bash", "-c", f"printf '%s\\0' {rendered}"], capture_output=True, env=env, check=True
    ).stdout  # bytes: text mode would turn \r into \n
    return out.decode().split("\0")[:-1]


def test_hostile_values_arrive_unchanged_and_execute_nothing(tmp_path):
    pwned = tmp_path / "pwned"
    values = [v.format(p=pwned) for v in HOSTILE]
    assert echo_args(bash_argv([word(v) for v in values])) == values
    assert not pwned.exists()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0")),
        min_size=1,
        max_size=5,
    )
)
def test_any_text_round_trips_through_bash(values):
    assert echo_args(bash_argv([word(v) for v in values])) == values


def test_refs_expand_inside_double_quotes_only():
    w = word("http://", Ref("PEER_ADDR[1]"), ":8000")
    assert bash_word(w) == 'http://"${PEER_ADDR[1]}":8000'
    script = f"PEER_ADDR=(a 'b c'); printf '%s\\0' {bash_word(w)}"
    assert (
        subprocess.run(["bash", "-c", script], capture_output=True, text=True).stdout == "http://b c:8000\0"
    )


def test_json_word_round_trips_through_a_json_parser_with_runtime_values():
    obj = {
        "host": word("tcp://", Ref("LOCAL_ADDR")),
        "addr": word(Ref("LOCAL_ADDR")),  # a Word of one Ref is still a string
        "port": Ref("PORT"),
        "text": 'a\'b $(x) `y` "z"',
        "list": [1, {"k": None}],
    }
    env = {"LOCAL_ADDR": "127.0.0.12", "PORT": "5555", "PATH": "/usr/bin:/bin"}
    script = f"printf '%s' {bash_word(json_word(obj))}"
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env).stdout
    assert json.loads(out) == {
        "host": "tcp://127.0.0.12",
        "addr": "127.0.0.12",
        "port": 5555,
        "text": obj["text"],
        "list": [1, {"k": None}],
    }


def test_bad_variable_names_are_refused():
    import pytest

    with pytest.raises(ValueError):
        Ref("X; rm -rf /")
