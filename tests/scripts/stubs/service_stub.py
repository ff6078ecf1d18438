"""A fake service for node.sh tests: an HTTP /health endpoint with scripted misbehaviour."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--marker", default="", help="only there so tests can find this process with pgrep -f")
    p.add_argument("--healthy-after", type=float, default=0.0, help="answer 503 until then")
    p.add_argument("--never-healthy", action="store_true")
    p.add_argument("--body", default='{"status": "ok"}', help="JSON served once healthy")
    p.add_argument("--exit-at-start", type=int, help="print an error and exit with this code at once")
    p.add_argument("--exit-after", type=float, help="exit (with --exit-code) this long after start")
    p.add_argument("--exit-code", type=int, default=0)
    p.add_argument("--crash-after", type=float, help="raise an exception this long after start")
    p.add_argument("--ignore-term", action="store_true")
    p.add_argument("--no-server", action="store_true", help="just sleep (a long foreground command)")
    return p.parse_args()


def _handler(args: argparse.Namespace, started: float) -> type:
    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            ready = not args.never_healthy and time.monotonic() - started >= args.healthy_after
            body = args.body.encode() if ready else b'{"status": "starting"}'
            self.send_response(200 if ready else 503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    return Health


def _exit_later(delay: float, code: int) -> None:
    time.sleep(delay)
    print(f"stub: exiting with code {code}", flush=True)
    os._exit(code)


def _crash() -> None:
    raise RuntimeError("engine core died (stub crash)")


def main() -> None:
    args = _parse()
    started = time.monotonic()
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.exit_at_start is not None:
        print(
            f"stub: fatal: bad configuration, exiting with {args.exit_at_start}", file=sys.stderr, flush=True
        )
        sys.exit(args.exit_at_start)
    print(f"stub: starting pid {os.getpid()} args {json.dumps(sys.argv[1:])}", flush=True)
    if args.exit_after is not None:
        threading.Thread(target=_exit_later, args=(args.exit_after, args.exit_code), daemon=True).start()
    if args.no_server:
        time.sleep(3600)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), _handler(args, started))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"stub: serving on 127.0.0.1:{args.port}", flush=True)
    if args.crash_after is not None:
        time.sleep(args.crash_after)
        _crash()
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
