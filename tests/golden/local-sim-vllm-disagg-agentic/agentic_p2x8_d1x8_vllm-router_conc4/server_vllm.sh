#!/usr/bin/env bash
# Rendered from config local-sim-vllm-disagg-agentic, variant agentic_p2x8_d1x8_vllm-router_conc4; do not edit: change the config and run `make render`.
# One per node, started by job.sbatch through srun. Rank 0 = first prefill + router + benchmark; then
# the other prefill nodes; then decode nodes. Every step is named; any failure ends the job.
set -Eeuo pipefail
: "${RUN_DIR:?set by job.sbatch}"
: "${RECIPE_DIR:?set by job.sbatch}"
: "${LEADER_ADDR:?set by job.sbatch}"
: "${NODE_NAMES:?set by job.sbatch}"
RANK=${SLURM_NODEID:?run under srun}
NODE_NAME=${SLURMD_NODENAME:-$(hostname)}
SCRIPTS_DIR=$RECIPE_DIR/scripts
LOG_DIR=$RUN_DIR/logs/$NODE_NAME
RESULTS_DIR=$RUN_DIR/results
# The runner's timeouts, teardown graces and failure-report lengths (configs/launch.yaml), for node.sh.
POLL_INTERVAL=1
STOPPED_GRACE_S=10
STALL_GRACE_S=15
GRACE_S=15
FAIL_GRACE_S=2
LOG_TAIL_LINES=20
ROUTER_WARNING_LINES=5
export NODE_NAME SCRIPTS_DIR LOG_DIR POLL_INTERVAL STOPPED_GRACE_S STALL_GRACE_S GRACE_S FAIL_GRACE_S
export LOG_TAIL_LINES ROUTER_WARNING_LINES
# shellcheck source=/dev/null
source "$RECIPE_DIR/env.sh"
# shellcheck source=/dev/null
source "$SCRIPTS_DIR/lib/node.sh"
STATE_DIR=$RUN_DIR/$STATE_FOLDER/$NODE_NAME  # the folder's name is scripts/statefiles.py's, loaded by node.sh
export STATE_DIR
node_init

case "$RANK" in
  0) ROLE=prefill ;;
  1) ROLE=prefill ;;
  2) ROLE=decode ;;
  *) fail "rank $RANK is not in the plan (3 nodes)" ;;
esac

step "preflight"
case "$ROLE" in
  prefill)
    require_commands python3 lmcache vllm
    require_version lmcache lmcache 0.5.6
    ;;
  decode)
    require_commands python3 vllm
    ;;
esac
if [[ $RANK == 0 ]]; then
  require_commands python3 vllm-router aiperf lm-eval
  require_version aiperf aiperf 0.13.0
  # make submit RESUME=<run> lists the benchmarks an earlier run of the same lock collected.
  load_resumed "$RUN_DIR/resume.json"
  # Nothing is fetched here: the trace set and tokenizer were staged, and are checked as lock.json has them.
  run_cmd python3 "${SCRIPTS_DIR}"/inputs.py verify \
    --lock "${RUN_DIR}"/lock.json \
    --recipe-dir "${RECIPE_DIR}"
  run_cmd python3 "${SCRIPTS_DIR}"/inputs.py tokenizer "${RECIPE_DIR}"/traces/tokenizer \
    --remote-code \
    --out "${STATE_DIR}"/tokenizer.json
fi

step "resolve address"
NODE_ADDR=$(python3 "$SCRIPTS_DIR/sync.py" addr --slurm-nodeaddr --allow-loopback "$NODE_NAME")
LOCAL_ADDR="${NODE_ADDR}"

step "ports free"
listens=()
case "$ROLE" in
  prefill) listens+=(lmcache="${LOCAL_ADDR}":5555 lmcache="${LOCAL_ADDR}":8080 vllm="${NODE_ADDR}":8000) ;;
  decode) listens+=(vllm="${NODE_ADDR}":8000) ;;
esac
if [[ $RANK == 0 ]]; then
  listens+=(router="${NODE_ADDR}":30000 router="${NODE_ADDR}":29000)
fi
require_free_ports "${listens[@]}"

step "start barrier"
# Every barrier line is sealed with the job's secret (written by make submit): only this job's nodes join.
barrier start "$RANK" 3 "$LEADER_ADDR:29500" 60 \
  --nodes "$NODE_NAMES" --secret-file "$RUN_DIR/job.secret" --publish-field addr="$NODE_ADDR" \
  --out "$STATE_DIR/$STATE_PEERS" --peer-addresses "$STATE_DIR/$STATE_PEER_ADDRS"
mapfile -t PEER_ADDR < "$STATE_DIR/$STATE_PEER_ADDRS"
supervise


start_prefill() {
  step "prefill lmcache"
  start_service lmcache lmcache server \
    --host "${LOCAL_ADDR}" \
    --port 5555 \
    --http-host "${LOCAL_ADDR}" \
    --http-port 8080 \
    --l1-size-gb "${LMCACHE_L1_SIZE_GB}" \
    --eviction-policy "${LMCACHE_EVICTION_POLICY}" \
    --l1-init-size-gb "${LMCACHE_L1_INIT_SIZE_GB}" \
    --chunk-size "${LMCACHE_CHUNK_SIZE}"
  wait_http lmcache http://"${LOCAL_ADDR}":8080/healthcheck 120
  step "prefill known-issues"
  start_service known-issues python3 "${SCRIPTS_DIR}"/logwatch.py \
    --plan "${RECIPE_DIR}"/plan.json \
    --log "${LOG_DIR}"/vllm.log \
    --log "${LOG_DIR}"/lmcache.log \
    --interval 1
  step "prefill vllm"
  start_service vllm env VLLM_HOST_IP="${NODE_ADDR}" vllm serve /tmp/disagg-recipes-sim/models/amd/Kimi-K2.5-MXFP4 \
    --served-model-name amd/Kimi-K2.5-MXFP4 \
    --host "${NODE_ADDR}" \
    --port 8000 \
    --tensor-parallel-size 8 \
    --trust-remote-code \
    --mm-encoder-tp-mode data \
    --kv-cache-dtype fp8 \
    --block-size 1 \
    --compilation-config '{"cudagraph_mode":"PIECEWISE"}' \
    --gpu-memory-utilization 0.9 \
    --enable-prefix-caching \
    --max-model-len 32768 \
    --kv-transfer-config '{"kv_connector":"MultiConnector","kv_connector_extra_config":{"connectors":[{"kv_connector":"MooncakeConnector","kv_connector_extra_config":{"mooncake_protocol":"tcp","num_workers":10},"kv_role":"kv_producer"},{"kv_connector":"LMCacheMPConnector","kv_connector_extra_config":{"lmcache.mp.host":"tcp://'"${LOCAL_ADDR}"'","lmcache.mp.mq_timeout":'"${LMCACHE_MP_MQ_TIMEOUT}"',"lmcache.mp.port":5555},"kv_connector_module_path":"lmcache.integration.vllm.lmcache_mp_connector","kv_role":"kv_both"}]},"kv_load_failure_policy":"recompute","kv_role":"kv_producer"}'
  wait_http vllm http://"${NODE_ADDR}":8000/health 120
}

start_decode() {
  step "decode known-issues"
  start_service known-issues python3 "${SCRIPTS_DIR}"/logwatch.py \
    --plan "${RECIPE_DIR}"/plan.json \
    --log "${LOG_DIR}"/vllm.log \
    --interval 1
  step "decode vllm"
  start_service vllm env VLLM_HOST_IP="${NODE_ADDR}" vllm serve /tmp/disagg-recipes-sim/models/amd/Kimi-K2.5-MXFP4 \
    --served-model-name amd/Kimi-K2.5-MXFP4 \
    --host "${NODE_ADDR}" \
    --port 8000 \
    --tensor-parallel-size 8 \
    --trust-remote-code \
    --mm-encoder-tp-mode data \
    --kv-cache-dtype fp8 \
    --block-size 1 \
    --compilation-config '{"cudagraph_mode":"PIECEWISE"}' \
    --gpu-memory-utilization 0.9 \
    --enable-prefix-caching \
    --max-model-len 32768 \
    --kv-transfer-config '{"kv_connector":"MooncakeConnector","kv_connector_extra_config":{"mooncake_protocol":"tcp","num_workers":10},"kv_load_failure_policy":"fail","kv_role":"kv_consumer"}'
  wait_http vllm http://"${NODE_ADDR}":8000/health 120
}

# Rank 0, per benchmark: its run, its result gated, then every engine's and the router's counters.
benchmark_conc4() {
  step "benchmark conc4"
  run_cmd env \
    -u HF_HUB_OFFLINE \
    -u TRANSFORMERS_OFFLINE HF_DATASETS_CACHE="${RUN_DIR}"/datasets-cache AIPERF_DATASET_CONFIGURATION_TIMEOUT=300 AIPERF_SERVICE_PROFILE_CONFIGURE_TIMEOUT=300 aiperf profile \
    --url http://"${NODE_ADDR}":30000 \
    --endpoint /v1/chat/completions \
    --endpoint-type chat \
    --streaming \
    --model amd/Kimi-K2.5-MXFP4 \
    --tokenizer "${RECIPE_DIR}"/traces/tokenizer \
    --tokenizer-trust-remote-code \
    --concurrency 4 \
    --benchmark-duration 10 \
    --random-seed 42 \
    --failed-request-threshold 0.10 \
    --use-server-token-count \
    --no-gpu-telemetry \
    --no-server-metrics \
    --extra-inputs ignore_eos:true \
    --output-artifact-dir "${RESULTS_DIR}"/conc4 \
    --session-header X-Session-ID \
    --scenario inferencex-agentx-mvp \
    --trajectory-start-min-ratio 0.25 \
    --trajectory-start-max-ratio 0.75 \
    --agentic-cache-warmup-duration 5 \
    --warmup-grace-period 60 \
    --stats-interval 30 \
    --num-dataset-entries 16 \
    --slice-duration 1.0 \
    --max-context-length 32768 \
    --unsafe-override \
    --public-dataset semianalysis_cc_traces_weka_062126_256k
  collect_result "$RESULTS_DIR/conc4/profile_export_aiperf.json" "$RESULTS_DIR"/local-sim-vllm-disagg-agentic_agentic_p2x8_d1x8_vllm-router_conc4.json \
    0.10 5 --scenario inferencex-agentx-mvp \
    --submission invalid
  run_cmd python3 "$SCRIPTS_DIR/results.py" scrape --out "$RESULTS_DIR/metrics/conc4" \
    prefill0=http://"${PEER_ADDR[0]}":8000/metrics prefill1=http://"${PEER_ADDR[1]}":8000/metrics decode0=http://"${PEER_ADDR[2]}":8000/metrics router=http://"${NODE_ADDR}":29000/metrics
}

"start_$ROLE"

step "ready barrier"
barrier ready "$RANK" 3 "$LEADER_ADDR:29500" 120 \
  --nodes "$NODE_NAMES" --secret-file "$RUN_DIR/job.secret"

if [[ $RANK == 0 ]]; then
  step "router"
  start_service router vllm-router \
    --vllm-pd-disaggregation \
    --kv-connector mooncake \
    --prefill http://"${PEER_ADDR[0]}":8000 8998 \
    --prefill http://"${PEER_ADDR[1]}":8000 8998 \
    --decode http://"${PEER_ADDR[2]}":8000 \
    --host "${NODE_ADDR}" \
    --port 30000 \
    --policy consistent_hash \
    --prometheus-host "${NODE_ADDR}" \
    --prometheus-port 29000 \
    --request-timeout-secs 1800 \
    --health-check-endpoint /health
  wait_http router http://"${NODE_ADDR}":30000/health 60

  step "smoke and KV proof"
  run_cmd python3 "${SCRIPTS_DIR}"/proof.py smoke \
    --engine vllm \
    --router http://"${NODE_ADDR}":30000 \
    --model amd/Kimi-K2.5-MXFP4 \
    --decode-metrics http://"${PEER_ADDR[2]}":8000/metrics
  # The answers are right, not only fast: the router's equal the prefill's served whole (no transfer).
  step "same answers"
  run_cmd python3 "${SCRIPTS_DIR}"/proof.py same-answers \
    --router http://"${NODE_ADDR}":30000 \
    --direct http://"${PEER_ADDR[0]}":8000 \
    --model amd/Kimi-K2.5-MXFP4
  # Counters before the sweep and after each concurrency: the report turns them into per-run deltas (in a
  # resumed run, "before the sweep" is before its first benchmark measured here, never another job's).
  mkdir -p "$RESULTS_DIR"
  run_cmd python3 "$SCRIPTS_DIR/results.py" scrape --out "$RESULTS_DIR/metrics/start" \
    prefill0=http://"${PEER_ADDR[0]}":8000/metrics prefill1=http://"${PEER_ADDR[1]}":8000/metrics decode0=http://"${PEER_ADDR[2]}":8000/metrics router=http://"${NODE_ADDR}":29000/metrics
  # Agentic: measured on empty caches; the counters just saved show no engine served a cache hit yet.
  step "cold start proof"
  run_cmd python3 "${SCRIPTS_DIR}"/proof.py cold \
    --metrics-dir "${RESULTS_DIR}"/metrics/start
  # Serving that stops (requests held, no token) fails the job, instead of waiting out the benchmark.
  start_service tokenwatch python3 "$SCRIPTS_DIR/tokenwatch.py" --state-dir "$STATE_DIR" \
    --grace 15 prefill0=http://"${PEER_ADDR[0]}":8000/metrics prefill1=http://"${PEER_ADDR[1]}":8000/metrics decode0=http://"${PEER_ADDR[2]}":8000/metrics router=http://"${NODE_ADDR}":29000/metrics
  # A resumed run (make submit RESUME=<run>) skips the benchmarks an earlier run already measured.
  if ! benchmark_resumed conc4; then
    benchmark_conc4
  fi

  step "LMCache proof"
  run_cmd python3 "${SCRIPTS_DIR}"/proof.py l2 \
    --metrics-dir "${RESULTS_DIR}"/metrics/conc4

  # The answers are good enough, not only fast: the model's graded eval through the router, after the sweep
  # (its shared few-shot prefix would warm the caches an agentic point starts without).
  step "accuracy"
  run_cmd python3 "${SCRIPTS_DIR}"/accuracy.py \
    --url http://"${NODE_ADDR}":30000/v1/chat/completions \
    --model amd/Kimi-K2.5-MXFP4 \
    --eval gsm8k \
    --questions "${RECIPE_DIR}"/evals/gsm8k \
    --threshold 0.9000 \
    --concurrency 4 \
    --limit 8 \
    --max-tokens 48 \
    --seconds 120 \
    --out "${RESULTS_DIR}"/accuracy
fi

step "finish barrier"
barrier finish "$RANK" 3 "$LEADER_ADDR:29500" 1800 \
  --nodes "$NODE_NAMES" --secret-file "$RUN_DIR/job.secret"
step "teardown"
