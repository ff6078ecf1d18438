# shellcheck shell=bash disable=SC2034
# Rendered from config local-sim-vllm-disagg-agentic, variant agentic_p2x8_d1x8_vllm-router_conc4; do not edit: change the config and run `make render`.
# The single home of this variant's Mooncake, ROCm and LMCache (or MoRI) values. Sourcing it only sets
# variables: engines read the exported ones; server_vllm.sh expands the others into commands.

# Read by the engines: vllm, Mooncake and ROCm libraries, and what the runner's launch
# profile adds (configs/launch.yaml: a local runner's simulator knobs, SIM_*). The Hub's offline switches
# hold for every process of the node: nothing is fetched on a compute node.
export DO_NOT_TRACK=1
export HF_DATASETS_OFFLINE=1
export HF_HUB_OFFLINE=1
export SIM_HBM_CACHE_TOKENS=2048
export SIM_KV_WAIT_S=30
export SIM_L2_CHUNK_TOKENS=256
export TRANSFORMERS_OFFLINE=1
export VLLM_ENGINE_READY_TIMEOUT_S=120
export VLLM_MOONCAKE_ABORT_REQUEST_TIMEOUT=480
export VLLM_MOONCAKE_BOOTSTRAP_PORT=8998
export VLLM_NO_USAGE_STATS=1

# LMCache MP server on prefill nodes (one L1 pool per node).
# L1 is the prefill server's KV-offload DRAM budget as InferenceX states it: per server, proportional
# to the GPUs its engine uses, in GB, at most 3000 GB a server; lmcache --l1-size-gb counts GiB.
#   min(4096 MiB available, 2861022 MiB cap) x 2^20 B x dram-utilization 0.75
#   x 8/8 GPUs = 3 GB = 2 GiB
LMCACHE_CHUNK_SIZE=256
LMCACHE_EVICTION_POLICY=LRU
LMCACHE_L1_INIT_SIZE_GB=1
LMCACHE_L1_SIZE_GB=2
LMCACHE_MP_MQ_TIMEOUT=30

