# shellcheck shell=bash disable=SC2034
# Rendered from config local-sim-sglang-disagg, variant fsl1k64_p2x8_d1x8; do not edit: change the config and run `make render`.
# The single home of this variant's Mooncake, ROCm and LMCache (or MoRI) values. Sourcing it only sets
# variables: engines read the exported ones; server_sglang.sh expands the others into commands.

# Read by the engines: sglang, Mooncake and ROCm libraries, and what the runner's launch
# profile adds (configs/launch.yaml: a local runner's simulator knobs, SIM_*). The Hub's offline switches
# hold for every process of the node: nothing is fetched on a compute node.
export DO_NOT_TRACK=1
export HF_DATASETS_OFFLINE=1
export HF_HUB_OFFLINE=1
export MC_IB_SL=3
export MC_IB_TC=96
export SIM_KV_WAIT_S=30
export TRANSFORMERS_OFFLINE=1
export VLLM_NO_USAGE_STATS=1

