"""What the benchmark reads that is not rendered, staged before the job: hashed at submission into lock.json,
checked on the first node at preflight (stdlib only). Nothing is fetched on a compute node, so a trace set
or tokenizer that is missing, changed or half-copied fails here, naming the file, instead of hours later.

    inputs.py verify --lock RUN_DIR/lock.json --recipe-dir RECIPE_DIR
    inputs.py tokenizer MODEL_OR_TOKENIZER_DIR [--remote-code] [--out FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

CHUNK = 1 << 20
MAX_FILES = 100_000  # a trace set is hundreds of files; far more is a wrong folder, not a trace set
TOKENIZER_FILES = ("tokenizer_config.json",)


class InputError(Exception):
    """A staged input that is missing or differs from what was staged."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def files_of(path: Path) -> list[Path]:
    """A file, or every regular file under a folder (sorted, symlinks followed as the reader would)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise InputError(f"{path} does not exist")
    found = sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    if not found:
        raise InputError(f"{path} holds no file")
    if len(found) > MAX_FILES:
        raise InputError(f"{path} holds {len(found)} files (more than {MAX_FILES}): not a staged input")
    return found


def digest(path: Path) -> dict:
    """{sha256, files: {relative name: sha256}, bytes}: one digest over the names and hashes of every file."""
    files = {}
    total = 0
    for f in files_of(path):
        name = f.name if f == path else f.relative_to(path).as_posix()
        files[name] = _sha256(f)
        total += f.stat().st_size
    whole = hashlib.sha256("".join(f"{n}\0{h}\n" for n, h in sorted(files.items())).encode()).hexdigest()
    return {"sha256": whole, "files": files, "bytes": total}


def verify(staged: dict, root: Path) -> str:
    """Compare one lock entry with what is on disk now; the first difference raises, named."""
    path = Path(staged["path"])
    path = path if path.is_absolute() else root / path
    now = digest(path)
    if now["sha256"] == staged["sha256"]:
        size = f"{len(now['files'])} file(s), {now['bytes']} bytes"
        return f"{path}: {size}, sha256 {now['sha256'][:12]} as staged"
    for name, sha in sorted(staged["files"].items()):
        if name not in now["files"]:
            raise InputError(f"{path}: {name} is missing (staged at submission)")
        if now["files"][name] != sha:
            raise InputError(
                f"{path}: {name} changed since submission (sha256 {now['files'][name][:12]}, "
                f"staged {sha[:12]})"
            )
    extra = sorted(set(now["files"]) - set(staged["files"]))
    raise InputError(f"{path}: {extra[0]} was added since submission ({len(extra)} file(s) not in lock.json)")


def tokenizer(folder: Path, remote_code: bool) -> dict:
    """The tokenizer's files present (and the code its auto_map names, when the model needs remote code)."""
    config = folder / "tokenizer_config.json"
    if not config.is_file():
        raise InputError(f"{folder}: no tokenizer_config.json (the tokenizer is read from here, offline)")
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{config}: not readable JSON ({exc})") from None
    needed = list(TOKENIZER_FILES)
    refs = (data.get("auto_map") or {}).get("AutoTokenizer") or []
    modules = sorted({r.split(".")[0] for r in refs if isinstance(r, str) and "." in r})
    if modules and not remote_code:
        raise InputError(
            f"{folder}: its tokenizer is code ({', '.join(modules)}.py) but the model is not "
            "marked remote-code: the client would refuse to load it"
        )
    needed += [f"{m}.py" for m in modules]
    missing = [n for n in needed if not (folder / n).is_file()]
    if missing:
        raise InputError(f"{folder}: {', '.join(missing)} missing")
    return {"path": str(folder), "files": {n: _sha256(folder / n) for n in needed}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="inputs.py", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("verify", help="every staged input of lock.json, as staged")
    v.add_argument("--lock", type=Path, required=True)
    v.add_argument("--recipe-dir", type=Path, required=True)
    t = sub.add_parser("tokenizer", help="a tokenizer folder's files present")
    t.add_argument("folder", type=Path)
    t.add_argument("--remote-code", action="store_true")
    t.add_argument("--out", type=Path, help="write what was found (names and sha256) here")
    args = p.parse_args(argv)
    try:
        if args.command == "verify":
            staged = json.loads(args.lock.read_text(encoding="utf-8")).get("inputs") or {}
            for name in sorted(staged):
                print(f"staged {name}: {verify(staged[name], args.recipe_dir)}")
        else:
            found = tokenizer(args.folder, args.remote_code)
            print(f"tokenizer {args.folder}: {', '.join(found['files'])} present")
            if args.out:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps(found, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    except (InputError, OSError, ValueError, KeyError, TypeError) as exc:
        print(f"inputs.py {args.command}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
