# shellcheck shell=bash disable=SC2034
# Rendered from config local-cpu-vllm-disagg-agentic, variant agentic_p1x1_d1x1_vllm-router_conc2; do not edit: change the config and run `make render`.
# The single home of this variant's Mooncake, ROCm and LMCache (or MoRI) values. Sourcing it only sets
# variables: engines read the exported ones; server_vllm.sh expands the others into commands.

# Read by the engines: vllm, Mooncake and ROCm libraries, and what the runner's launch
# profile adds (configs/launch.yaml: a local runner's simulator knobs, SIM_*). The Hub's offline switches
# hold for every process of the node: nothing is fetched on a compute node.
export DO_NOT_TRACK=1
export HF_DATASETS_OFFLINE=1
export HF_HUB_OFFLINE=1
export MC_TCP_PROGRESS_TIMEOUT_SEC=120
export MC_TCP_STATUS_TIMEOUT_SEC=120
export MC_TRANSFER_TIMEOUT=120
export OMP_WAIT_POLICY=PASSIVE
export TORCHINDUCTOR_CACHE_DIR=/tmp/disagg-recipes-cpu/cache/inductor
export TRANSFORMERS_OFFLINE=1
export VLLM_CACHE_ROOT=/tmp/disagg-recipes-cpu/cache/vllm
export VLLM_CPU_KVCACHE_SPACE=1
export VLLM_CPU_OMP_THREADS_BIND=nobind
export VLLM_ENGINE_READY_TIMEOUT_S=900
export VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT=480
export VLLM_MOONCAKE_BOOTSTRAP_PORT=18998
export VLLM_NO_USAGE_STATS=1
export VLLM_USE_AOT_COMPILE=0
export XDG_CACHE_HOME=/tmp/disagg-recipes-cpu/cache/xdg

# LMCache MP server on prefill nodes (one L1 pool per node).
# L1 is the prefill server's KV-offload DRAM budget as InferenceX states it: per server, proportional
# to the GPUs its engine uses, in GB, at most 3000 GB a server; lmcache --l1-size-gb counts GiB.
#   min(4096 MiB available, 2861022 MiB cap) x 2^20 B x dram-utilization 0.5
#   x 1/1 GPUs = 2 GB = 1 GiB
LMCACHE_CHUNK_SIZE=256
LMCACHE_EVICTION_POLICY=LRU
LMCACHE_L1_INIT_SIZE_GB=1
LMCACHE_L1_SIZE_GB=1
LMCACHE_MP_MQ_TIMEOUT=300

