"""Node setup, the submitting side: the tools a job needs that its image lacks (AIPerf is in no engine image,
docs/upstream-facts.md#aiperf) or carries at other versions than the tested ones (the proxy's server stack),
as pinned wheels with their SHA-256, fetched into the run's wheelhouse at submission, so that nodes install
them with no network (scripts/nodesetup.py: --no-index --require-hashes).

What a set holds is a pyproject.toml extra (SETS); its lock, one per target Python and platform of a runner's
node-setup (configs/launch.yaml), is recipes/nodesetup/locks/<extra>-cp<XY>-<platform>.txt, written by
`make lock-setup` (uv, every wheel with its hash) and reviewed like any pin. Wheels are downloaded once into
.cache/wheelhouse/ (pip checks every hash) and hard-linked into each run folder.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from schemas.pins import requirements

ROOT = Path(__file__).resolve().parents[2]
LOCKS = Path(__file__).resolve().parent / "locks"
CACHE = ROOT / ".cache" / "wheelhouse"
# The proxy's server stack (uvicorn, httptools, ...) as tested here, not as the image carries it: its
# environment's python3 is on rank 0's PATH under this name (scripts/nodesetup.py, NAME=python3).
PROXY_PYTHON = "proxy-python3"
# A pyproject.toml extra -> the commands it puts on a node's PATH. Every set goes to rank 0; proxy only
# when the router is ours, eval only when the job runs the graded eval (recipes/build.py).
SETS = {"bench": ("aiperf",), "proxy": (f"{PROXY_PYTHON}=python3",), "eval": ("lm-eval",)}
DOWNLOAD_TIMEOUT_S = 1800
SITE_WHEEL_BYTES = 4 << 30  # far above any build of a library; a server streaming forever is cut here
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
_PLATFORM = re.compile(r"manylinux_2_([0-9]{1,2})_(x86_64|aarch64)")


class SetupError(Exception):
    """The wheelhouse could not be made; one line."""


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    hashes: tuple[str, ...]


@dataclass(frozen=True)
class Wheel:
    file: str
    name: str
    version: str
    sha256: str


def wheel_name_version(source: str) -> tuple[str, str]:
    """(distribution, version) from a wheel's file name (PEP 427: name-version-...-tags.whl), name
    normalized as pip compares it."""
    parts = source.rsplit("/", 1)[-1].split("-")
    if len(parts) < 5 or not parts[-1].endswith(".whl"):
        raise SetupError(f"{source}: not a wheel file name (name-version-python-abi-platform.whl)")
    return _normal(parts[0]).replace("_", "-"), parts[1]


def requirement(name: str, version: str, sha256: str) -> str:
    """The one hashed requirement line a site wheel is installed by."""
    return f"{name}=={version} --hash=sha256:{sha256}\n"


def lock_name(extra: str, python: str, platform: str) -> str:
    return f"{extra}-cp{python.replace('.', '')}-{platform}.txt"


def lock_path(extra: str, python: str, platform: str) -> Path:
    return LOCKS / lock_name(extra, python, platform)


def read_lock(path: Path) -> list[Pin]:
    """NAME==VERSION lines, each with its --hash=sha256 lines (uv pip compile --generate-hashes)."""
    pins: list[Pin] = []
    name: str | None = None
    version = ""
    hashes: list[str] = []
    for raw in path.read_text().splitlines() + [""]:
        text = raw.split("#", 1)[0].rstrip()
        pin = _PIN.match(text)
        if pin or not text.startswith(" "):
            if name is not None:
                if not hashes:
                    raise SetupError(f"{path.name}: {name}=={version} has no --hash=sha256")
                pins.append(Pin(name, version, tuple(hashes)))
            name, version = None, ""
            hashes = []
        if pin:
            name, version = pin[1], pin[2]
        hashes += _HASH.findall(text)
    return pins


def platform_tags(platform: str) -> list[str]:
    """manylinux_2_28_x86_64 -> every tag a wheel for that glibc may carry (pip download --platform)."""
    match = _PLATFORM.fullmatch(platform)
    if match is None:
        raise SetupError(f"platform {platform!r} is not manylinux_2_<N>_<arch>")
    glibc, arch = int(match[1]), match[2]
    tags = [f"manylinux_2_{g}_{arch}" for g in range(glibc, 4, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    return tags + [f"{name}_{arch}" for g, name in legacy.items() if g <= glibc]


def fits(wheel: str, python: str, platform: str) -> bool:
    """A wheel file a node of this Python and platform installs: a lock names every build's hash, and one
    cache holds the builds of every runner's Python (a cp311 build in a cp312 wheelhouse fails the node)."""
    pythons, abis, platforms = (set(tags.split(".")) for tags in wheel.removesuffix(".whl").split("-")[-3:])
    minor = int(python.split(".")[1])
    python_ok = bool(pythons & {"py3", f"py3{minor}", f"cp3{minor}"}) or (
        "abi3" in abis and any(t.startswith("cp3") and int(t[3:]) <= minor for t in pythons)
    )
    return python_ok and ("any" in platforms or bool(platforms & set(platform_tags(platform))))


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(lock: Path, python: str, platform: str, cache: Path = CACHE) -> None:
    """Every wheel of the lock into the cache; pip verifies each hash and skips files already there."""
    cache.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
            "--require-hashes", "--implementation", "cp", "--python-version", python,
            "--dest", str(cache), "--requirement", str(lock)]  # fmt: skip
    for tag in platform_tags(platform):
        argv += ["--platform", tag]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, errors="replace", timeout=DOWNLOAD_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise SetupError(f"pip download of {lock.name} took over {DOWNLOAD_TIMEOUT_S} s") from None
    if done.returncode != 0:
        errors = [x for x in done.stderr.splitlines() if x.startswith("ERROR")] or done.stderr.splitlines()[
            -3:
        ]
        raise SetupError(f"pip download of {lock.name} exited {done.returncode}: {' '.join(errors)[:600]}")


def wheelhouse(
    lock: Path, python: str, platform: str, dest: Path, *, cache: Path = CACHE, say: Callable = print
) -> list[Wheel]:
    """The lock's wheels in DEST (hard links into the cache where it can), each checked against its pin's
    hashes; the list, in lock order."""
    pins = read_lock(lock)
    say(f"node setup: {len(pins)} pinned wheels of {lock.name} (cache {cache})")
    download(lock, python, platform, cache)
    by_name: dict[str, list[Path]] = {}
    for path in cache.glob("*.whl"):
        by_name.setdefault(_normal(path.name.split("-", 1)[0]), []).append(path)
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for pin in pins:
        found = [
            (p, digest)
            for p in sorted(by_name.get(_normal(pin.name), []))
            if p.name.split("-")[1] == pin.version
            and fits(p.name, python, platform)
            and (digest := _sha256(p)) in pin.hashes
        ]
        if not found:
            raise SetupError(f"no wheel of {pin.name}=={pin.version} with a pinned hash in {cache}")
        path, digest = found[0]
        target = dest / path.name
        target.unlink(missing_ok=True)
        try:
            os.link(path, target)
        except OSError:
            shutil.copy2(path, target)
        out.append(Wheel(path.name, pin.name, pin.version, digest))
    say(f"node setup: wheelhouse {dest} ({sum((dest / w.file).stat().st_size for w in out) / 1e6:.0f} MB)")
    return out


def site_wheel(source: str, sha256: str, dest: Path, *, cache: Path = CACHE, say: Callable = print) -> Wheel:
    """The site's wheel in DEST, checked against its SHA-256: a path is read where it is, an https URL is
    downloaded once into the cache under its hash."""
    name, version = wheel_name_version(source)
    filename = source.rsplit("/", 1)[-1]
    if source.startswith("https://"):
        path = cache / "site" / sha256 / filename
        if not path.is_file():
            say(f"node setup: downloading {source}")
            _download(source, path, sha256)
    else:
        path = Path(source)
        if not path.is_file():
            raise SetupError(f"site wheel {source}: no such file on this host")
    digest = _sha256(path)
    if digest != sha256:
        raise SetupError(f"site wheel {source} has SHA-256 {digest}; the runner's node-setup pins {sha256}")
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / filename
    target.unlink(missing_ok=True)
    try:
        os.link(path, target)
    except OSError:
        shutil.copy2(path, target)
    say(f"node setup: site wheel {filename} ({path.stat().st_size / 1e6:.0f} MB, sha256 {digest[:16]})")
    return Wheel(filename, name, version, digest)


def _download(url: str, out: Path, sha256: str) -> None:
    """URL into OUT, only if it has the SHA-256 (streamed, bounded; https to the end of any redirect)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_name(f"{out.name}.part-{os.getpid()}")
    digest, size = hashlib.sha256(), 0
    try:
        with httpx.stream("GET", url, follow_redirects=True, timeout=60) as response:
            if response.url.scheme != "https":
                raise SetupError(f"{url} redirected to {response.url.scheme}://: only https is fetched")
            if response.status_code != 200:
                raise SetupError(f"{url} answered HTTP {response.status_code}")
            with part.open("wb") as handle:
                for chunk in response.iter_bytes(1 << 20):
                    size += len(chunk)
                    if size > SITE_WHEEL_BYTES:
                        raise SetupError(f"{url} sent more than {SITE_WHEEL_BYTES >> 30} GiB")
                    digest.update(chunk)
                    handle.write(chunk)
    except httpx.HTTPError as exc:
        part.unlink(missing_ok=True)
        raise SetupError(f"{url}: {type(exc).__name__}: {exc}") from None
    except SetupError:
        part.unlink(missing_ok=True)
        raise
    if digest.hexdigest() != sha256:
        part.unlink(missing_ok=True)
        raise SetupError(f"{url} has SHA-256 {digest.hexdigest()}; the runner's node-setup pins {sha256}")
    part.rename(out)


def relock(extra: str, python: str, platform: str) -> Path:
    """Re-resolve one lock from pyproject.toml's extra (uv; every wheel's hash)."""
    match = _PLATFORM.fullmatch(platform)
    if match is None:
        raise SetupError(f"platform {platform!r} is not manylinux_2_<N>_<arch>")
    out = lock_path(extra, python, platform)
    inputs = out.with_suffix(".in")
    inputs.write_text(f"# `make lock-setup` from pyproject.toml's extra {extra}; do not edit.\n")
    with inputs.open("a") as handle:
        handle.writelines(f"{r}\n" for r in requirements(extra))
    subprocess.run(
        [str(ROOT / ".venv" / "bin" / "uv"), "pip", "compile", str(inputs), "--generate-hashes",
         "--no-header", "--quiet", "--python-version", python,
         "--python-platform", f"{match[2]}-manylinux_2_{match[1]}", "--output-file", str(out)],
        check=True,
        env={**os.environ, "UV_NO_CONFIG": "1"},
    )  # fmt: skip
    return out
