"""Command line → Config: the form the renderer emits, defaults, and every refusal."""

from __future__ import annotations

import pytest

from proxy.config import API_KEY_ENV, Config, Limits, Prefill, Timeouts, parse_config, redact

# Exactly what recipes/build.py renders for a 2P1D job.
RENDERED = [
    "--host",
    "10.0.0.1",
    "--port",
    "30000",
    "--prefill",
    "http://10.0.0.1:8000",
    "8998",
    "--prefill",
    "http://10.0.0.2:8000",
    "8998",
    "--decode",
    "http://10.0.0.3:8000",
]


def test_rendered_command_line():
    config = parse_config(RENDERED, {})
    assert config == Config(
        prefill=(Prefill("http://10.0.0.1:8000", 8998), Prefill("http://10.0.0.2:8000", 8998)),
        decode=("http://10.0.0.3:8000",),
        host="10.0.0.1",
        port=30000,
    )
    assert config.prefill[1].bootstrap_addr == "http://10.0.0.2:8998"
    assert config.api_key is None


def test_options():
    argv = [
        "--prefill",
        "http://p:1/",
        "--prefill",
        "http://[fd00::1]:8000",
        "9000",
        "--decode",
        "http://d:2",
        "--decode",
        "https://d2:3",
        "--policy",
        "least-loaded",
        "--session-header",
        "X-Conv",
        "--affinity-chars",
        "100",
        "--max-concurrency",
        "64",
        "--health-interval",
        "0.5",
        "--decode-first-byte-timeout",
        "30",
        "--decode-idle-timeout",
        "5",
        "--prefill-timeout",
        "900",
        "--connect-timeout",
        "1",
        "--pool-timeout",
        "2",
        "--decode-total-timeout",
        "60",
        "--health-timeout",
        "0.5",
        "--log-level",
        "debug",
        "--header-timeout",
        "3",
        "--body-timeout",
        "30",
        "--keep-alive-timeout",
        "2",
        "--send-timeout",
        "20",
        "--max-body-bytes",
        "1000",
        "--max-header-bytes",
        "2000",
        "--max-json-depth",
        "32",
        "--max-answer-bytes",
        "4000",
        "--max-clients",
        "50",
    ]
    config = parse_config(argv, {})
    assert config.prefill == (Prefill("http://p:1", 8998), Prefill("http://[fd00::1]:8000", 9000))
    assert config.prefill[1].bootstrap_addr == "http://[fd00::1]:9000"
    assert config.decode == ("http://d:2", "https://d2:3")
    assert (config.policy, config.session_header, config.affinity_chars) == ("least-loaded", "x-conv", 100)
    assert (config.max_concurrency, config.health_interval, config.log_level) == (64, 0.5, "debug")
    assert config.timeouts == Timeouts(
        connect=1,
        pool=2,
        prefill=900,
        decode_first_byte=30,
        decode_idle=5,
        decode_total=60,
        health=0.5,
        header=3,
        body=30,
        keep_alive=2,
        send=20,
    )
    assert config.limits == Limits(
        body_bytes=1000, header_bytes=2000, json_depth=32, answer_bytes=4000, clients=50
    )


def test_defaults_listen_on_loopback_with_bounds():
    config = parse_config(["--prefill", "http://p:1", "--decode", "http://d:1"], {})
    assert config.host == "127.0.0.1"  # the rendered job passes the node address explicitly
    assert config.limits == Limits()
    assert (config.limits.body_bytes, config.limits.header_bytes) == (16 << 20, 64 << 10)
    assert (config.limits.json_depth, config.timeouts.prefill) == (128, 600.0)


SECRET = "s3cr3t-pw"


@pytest.mark.parametrize(
    "url",
    [
        f"http://user:{SECRET}@10.0.0.1:8000",
        f"http://:{SECRET}@10.0.0.1:8000",
        f"https://admin:{SECRET}@engine.example:443/",
        f"http://{SECRET}@10.0.0.1:8000",
        f"http://user:p@ss{SECRET}@10.0.0.1:8000",
    ],
)
@pytest.mark.parametrize("role", ["--prefill", "--decode"])
def test_credentials_in_a_url_are_refused_without_showing_them(url, role, capsys):
    argv = ["--prefill", "http://p:1", "--decode", "http://d:1", role, url]
    with pytest.raises(SystemExit) as exit_info:
        parse_config(argv, {})
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert "carries credentials" in err and "***@" in err
    assert SECRET not in err


@pytest.mark.parametrize(
    "url",
    [
        f"http://10.0.0.1:8000?token={SECRET}",
        f"http://10.0.0.1:8000#{SECRET}",
        f"http://user:pa/{SECRET}@10.0.0.1:8000",  # a '/' in the password ends the host part early
    ],
)
def test_other_bad_urls_are_refused_without_showing_secrets(url, capsys):
    with pytest.raises(SystemExit):
        parse_config(["--prefill", url, "--decode", "http://d:1"], {})
    err = capsys.readouterr().err
    assert "expected http://host:port" in err and SECRET not in err


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://u:p@h:1", "http://***@h:1"),
        ("http://h:1", "http://h:1"),
        ("http://h:1/x?k=v#f", "http://h:1/x"),
        ("h:1", "h:1"),
    ],
)
def test_redact(url, shown):
    assert redact(url) == shown


@pytest.mark.parametrize("key", ["has space", "new\nline", "tab\tkey", "naïve"])
def test_api_key_that_would_break_a_header_is_refused_without_showing_it(key, capsys):
    with pytest.raises(SystemExit):
        parse_config(RENDERED, {API_KEY_ENV: key})
    err = capsys.readouterr().err
    assert "printable ASCII" in err and key not in err


def test_api_key_comes_from_the_environment_and_stays_out_of_repr():
    config = parse_config(RENDERED, {API_KEY_ENV: "sk-secret"})
    assert config.api_key == "sk-secret"
    assert "sk-secret" not in repr(config)
    assert parse_config(RENDERED, {API_KEY_ENV: ""}).api_key is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--decode", "http://d:1"], "--prefill"),
        (["--prefill", "http://p:1"], "--decode"),
        (["--prefill", "p:1", "--decode", "http://d:1"], "expected http://host:port"),
        (["--prefill", "http://p:1", "99999", "--decode", "http://d:1"], "expected a port"),
        (["--prefill", "http://p:1", "8998", "x", "--decode", "http://d:1"], "URL [BOOTSTRAP_PORT]"),
        (["--prefill", "http://p:1", "--decode", "ftp://d:1"], "expected http://host:port"),
        (["--prefill", "http://p:1/v1", "--decode", "http://d:1"], "expected http://host:port"),
        (["--prefill", "http://p:1", "--decode", "http://d:1", "--prefill-timeout", "inf"], "positive"),
        (["--prefill", "http://p:1", "--decode", "http://d:1", "--decode-idle-timeout", "nan"], "positive"),
        (["--prefill", "http://p:1", "--decode", "http://p:1"], "listed twice: http://p:1"),
        (["--prefill", "http://p:1", "--decode", "http://d:1", "--health-interval", "0"], "positive"),
        (["--prefill", "http://p:1", "--decode", "http://d:1", "--max-concurrency", "x"], "positive"),
        (["--prefill", "http://p:1", "--decode", "http://d:1", "--policy", "random"], "invalid choice"),
        (["--prefill", "http://p:1", "--decode", "http://d:1", "--max-json-depth", "600"], "at most 512"),
        (["--prefill", "http://p:1", "--decode", "http://d:1", "--max-body-bytes", "0"], "positive"),
        (["--prefill", "http://p:1", "--decode", "http://d:1", "--header-timeout", "inf"], "positive"),
    ],
)
def test_refusals(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_config(argv, {})
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
