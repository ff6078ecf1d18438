#!/usr/bin/env bash
# Rendered from config minicpm-sala-bf16-h200-sglang, variant fsl8k1k_tp1; do not edit: change the config and run `make render`.
# The one node of a single-node job, started by job.sbatch through srun: the sglang server and
# the benchmark against it. Every step is named; any failure ends the job.
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
STALL_GRACE_S=600
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
  0) ROLE=server ;;
  *) fail "rank $RANK is not in the plan (1 nodes)" ;;
esac

if [[ $RANK == 0 ]]; then
  step "node setup"
  install_set bench 3.12 "$RUN_DIR/setup-env" env aiperf
  install_set eval 3.12 "$RUN_DIR/setup-env" env lm-eval
fi

step "preflight"
case "$ROLE" in
  server)
    require_commands python3
    ;;
esac
if [[ $RANK == 0 ]]; then
  require_commands python3 aiperf lm-eval
  require_version aiperf aiperf 0.13.0
  # make submit RESUME=<run> lists the benchmarks an earlier run of the same lock collected.
  load_resumed "$RUN_DIR/resume.json"
  # Nothing is fetched here: the trace set and tokenizer were staged, and are checked as lock.json has them.
  run_cmd python3 "${SCRIPTS_DIR}"/inputs.py verify \
    --lock "${RUN_DIR}"/lock.json \
    --recipe-dir "${RECIPE_DIR}"
  run_cmd python3 "${SCRIPTS_DIR}"/inputs.py tokenizer /models/openbmb/MiniCPM-SALA \
    --remote-code \
    --out "${STATE_DIR}"/tokenizer.json
fi

step "resolve address"
NODE_ADDR=$(python3 "$SCRIPTS_DIR/sync.py" addr --interface eth0 "$NODE_NAME")

step "ports free"
listens=()
case "$ROLE" in
  server) listens+=(sglang="${NODE_ADDR}":8000) ;;
esac
if [[ $RANK == 0 ]]; then
  listens+=()
fi
require_free_ports "${listens[@]}"

step "start barrier"
# Every barrier line is sealed with the job's secret (written by make submit): only this job's nodes join.
barrier start "$RANK" 1 "$LEADER_ADDR:29500" 600 \
  --nodes "$NODE_NAMES" --secret-file "$RUN_DIR/job.secret" --publish-field addr="$NODE_ADDR" \
  --out "$STATE_DIR/$STATE_PEERS" --peer-addresses "$STATE_DIR/$STATE_PEER_ADDRS"
mapfile -t PEER_ADDR < "$STATE_DIR/$STATE_PEER_ADDRS"
supervise


start_server() {
  step "server known-issues"
  start_service known-issues python3 "${SCRIPTS_DIR}"/logwatch.py \
    --plan "${RECIPE_DIR}"/plan.json \
    --log "${LOG_DIR}"/sglang.log \
    --interval 1
  step "server sglang"
  start_service sglang python3 \
    -m sglang.launch_server \
    --model-path /models/openbmb/MiniCPM-SALA \
    --served-model-name openbmb/MiniCPM-SALA \
    --host "${NODE_ADDR}" \
    --port 8000 \
    --tp-size 1 \
    --trust-remote-code \
    --disable-radix-cache \
    --chunked-prefill-size 8192 \
    --max-running-requests 32 \
    --skip-server-warmup \
    --attention-backend minicpm_flashattn \
    --dense-as-sparse \
    --enable-metrics
  wait_http sglang http://"${NODE_ADDR}":8000/health 3600
}

# Rank 0, per benchmark: its run, its result gated, then every engine's and the router's counters.
benchmark_conc8() {
  step "benchmark conc8"
  run_cmd env \
    -u HF_HUB_OFFLINE \
    -u TRANSFORMERS_OFFLINE aiperf profile \
    --url http://"${NODE_ADDR}":8000 \
    --endpoint /v1/chat/completions \
    --endpoint-type chat \
    --streaming \
    --model openbmb/MiniCPM-SALA \
    --tokenizer /models/openbmb/MiniCPM-SALA \
    --tokenizer-trust-remote-code \
    --concurrency 8 \
    --benchmark-duration 600 \
    --random-seed 42 \
    --failed-request-threshold 0.10 \
    --use-server-token-count \
    --no-gpu-telemetry \
    --no-server-metrics \
    --extra-inputs ignore_eos:true \
    --output-artifact-dir "${RESULTS_DIR}"/conc8 \
    --synthetic-input-tokens-mean 8192 \
    --synthetic-input-tokens-stddev 0 \
    --output-tokens-mean 1024 \
    --output-tokens-stddev 0
  collect_result "$RESULTS_DIR/conc8/profile_export_aiperf.json" "$RESULTS_DIR"/minicpm-sala-bf16-h200-sglang_fsl8k1k_tp1_conc8.json \
    0.10 300
  run_cmd python3 "$SCRIPTS_DIR/results.py" scrape --out "$RESULTS_DIR/metrics/conc8" \
    server0=http://"${PEER_ADDR[0]}":8000/metrics
}

benchmark_conc16() {
  step "benchmark conc16"
  run_cmd env \
    -u HF_HUB_OFFLINE \
    -u TRANSFORMERS_OFFLINE aiperf profile \
    --url http://"${NODE_ADDR}":8000 \
    --endpoint /v1/chat/completions \
    --endpoint-type chat \
    --streaming \
    --model openbmb/MiniCPM-SALA \
    --tokenizer /models/openbmb/MiniCPM-SALA \
    --tokenizer-trust-remote-code \
    --concurrency 16 \
    --benchmark-duration 600 \
    --random-seed 42 \
    --failed-request-threshold 0.10 \
    --use-server-token-count \
    --no-gpu-telemetry \
    --no-server-metrics \
    --extra-inputs ignore_eos:true \
    --output-artifact-dir "${RESULTS_DIR}"/conc16 \
    --synthetic-input-tokens-mean 8192 \
    --synthetic-input-tokens-stddev 0 \
    --output-tokens-mean 1024 \
    --output-tokens-stddev 0
  collect_result "$RESULTS_DIR/conc16/profile_export_aiperf.json" "$RESULTS_DIR"/minicpm-sala-bf16-h200-sglang_fsl8k1k_tp1_conc16.json \
    0.10 300
  run_cmd python3 "$SCRIPTS_DIR/results.py" scrape --out "$RESULTS_DIR/metrics/conc16" \
    server0=http://"${PEER_ADDR[0]}":8000/metrics
}

benchmark_conc32() {
  step "benchmark conc32"
  run_cmd env \
    -u HF_HUB_OFFLINE \
    -u TRANSFORMERS_OFFLINE aiperf profile \
    --url http://"${NODE_ADDR}":8000 \
    --endpoint /v1/chat/completions \
    --endpoint-type chat \
    --streaming \
    --model openbmb/MiniCPM-SALA \
    --tokenizer /models/openbmb/MiniCPM-SALA \
    --tokenizer-trust-remote-code \
    --concurrency 32 \
    --benchmark-duration 600 \
    --random-seed 42 \
    --failed-request-threshold 0.10 \
    --use-server-token-count \
    --no-gpu-telemetry \
    --no-server-metrics \
    --extra-inputs ignore_eos:true \
    --output-artifact-dir "${RESULTS_DIR}"/conc32 \
    --synthetic-input-tokens-mean 8192 \
    --synthetic-input-tokens-stddev 0 \
    --output-tokens-mean 1024 \
    --output-tokens-stddev 0
  collect_result "$RESULTS_DIR/conc32/profile_export_aiperf.json" "$RESULTS_DIR"/minicpm-sala-bf16-h200-sglang_fsl8k1k_tp1_conc32.json \
    0.10 300
  run_cmd python3 "$SCRIPTS_DIR/results.py" scrape --out "$RESULTS_DIR/metrics/conc32" \
    server0=http://"${PEER_ADDR[0]}":8000/metrics
}

"start_$ROLE"

step "ready barrier"
barrier ready "$RANK" 1 "$LEADER_ADDR:29500" 3600 \
  --nodes "$NODE_NAMES" --secret-file "$RUN_DIR/job.secret"

if [[ $RANK == 0 ]]; then
  step "smoke"
  run_cmd python3 "${SCRIPTS_DIR}"/proof.py smoke \
    --engine sglang \
    --router http://"${NODE_ADDR}":8000 \
    --model openbmb/MiniCPM-SALA
  # Counters before the sweep and after each concurrency: the report turns them into per-run deltas (in a
  # resumed run, "before the sweep" is before its first benchmark measured here, never another job's).
  mkdir -p "$RESULTS_DIR"
  run_cmd python3 "$SCRIPTS_DIR/results.py" scrape --out "$RESULTS_DIR/metrics/start" \
    server0=http://"${PEER_ADDR[0]}":8000/metrics
  # Serving that stops (requests held, no token) fails the job, instead of waiting out the benchmark.
  start_service tokenwatch python3 "$SCRIPTS_DIR/tokenwatch.py" --state-dir "$STATE_DIR" \
    --grace 300 server0=http://"${PEER_ADDR[0]}":8000/metrics
  # A resumed run (make submit RESUME=<run>) skips the benchmarks an earlier run already measured.
  if ! benchmark_resumed conc8; then
    benchmark_conc8
  fi
  if ! benchmark_resumed conc16; then
    benchmark_conc16
  fi
  if ! benchmark_resumed conc32; then
    benchmark_conc32
  fi

  # The answers are good enough, not only fast: the model's graded eval through the router, after the sweep
  # (its shared few-shot prefix would warm the caches an agentic point starts without).
  step "accuracy"
  run_cmd python3 "${SCRIPTS_DIR}"/accuracy.py \
    --url http://"${NODE_ADDR}":8000/v1/chat/completions \
    --model openbmb/MiniCPM-SALA \
    --eval gsm8k \
    --questions "${RECIPE_DIR}"/evals/gsm8k \
    --threshold 0.9000 \
    --concurrency 32 \
    --max-tokens 12288 \
    --seconds 3600 \
    --out "${RESULTS_DIR}"/accuracy
fi

step "finish barrier"
barrier finish "$RANK" 1 "$LEADER_ADDR:29500" 14400 \
  --nodes "$NODE_NAMES" --secret-file "$RUN_DIR/job.secret"
step "teardown"
