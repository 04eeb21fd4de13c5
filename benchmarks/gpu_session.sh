#!/usr/bin/env bash
# One device call: every GPU check and timing of medha-jax, each stage under its own time limit.
# Logs and results go to a work folder; after every stage it is packed into $OUT/all.tgz and the
# .md reports and session.log are copied beside it (the device tool brings back at most 8 files,
# and what a killed call had left under $OUT), $OUT defaulting to benchmarks/results/gpu_run/.
#
#   bash benchmarks/gpu_session.sh [stage ...]     stages: env host kernels kernel-tests hf llama8b profile
#                                                  profile-unrolled profile-cublas profile-31m vs-hf tune layers
#                                                  (default: all, in order)
# host (no GPU needed, the GPU machine's CPU): #16's scheduler goal (batch formation p99 < 0.5 ms at
# 1,000 waiting + 256 running) and the engine's host step, on the CPU that feeds the GPU in production
# (the 2-core development VM misses the goal: p99 ~2x p50 there, 0.8-1.0 ms).
# vs-hf (medha-jax vs Hugging Face `generate` on the GPU, #16's offline goal) needs the wheels of
# `bash benchmarks/hf_wheels.sh`, carried: the image has torch but not transformers.
# The device tool sends at most 64 MiB of working tree: move benchmarks/results/ aside for the call.
# With 15 minutes of device time, one call of ~340 s on an H200 (2026-11-27) ran env..llama8b with
#   ENV_S=40 KERNELS_S=170 KERNEL_TESTS_S=100 HF_S=90 LLAMA8B_S=185
# and later calls on the still-warm machine (30 s) ran the rest (KERNELS_S=330 for every case).
# The second lease (2026-11-27) ran `env vs-hf profile` (393 s, carry ["benchmarks/.hf_wheels"]
# after `bash benchmarks/hf_wheels.sh`) and `llama8b kernels` (254 s on the warm machine).
# The third lease (2026-11-27, 15 min) ran `env profile vs-hf` (577 s): the scan's weight slices are
# the copies (loop_dynamic_slice_fusion -> MemcpyD2D, 13.5 GB a tick); unrolled, one 8K decode took
# 8.2 ms a token against the scan's 21.1 (gemms at 4.8 TB/s), but its compile took 134 s to the first
# batch and the 32 x 1,024 batch was still compiling when the stage's 260 s ran out. A scan with
# only --xla_gpu_enable_dynamic_slice_fusion changed nothing: the dots were Triton gemm fusions.
# Since then (CPU-tested, not yet timed on a GPU): the kernels' work lists are built once a step
# instead of in every layer, and the decode kernel's static splits shrink as the bucket's
# sequences fill the GPU (32 x 1,024 had 16 splits: ~34 MB of partials a layer to merge). And since
# stop 53 a tick is two programs (the step up to the logits, then the sampler, compiled once per
# sequence count): the profile stages' per-tick kernels include the sampler's, and the logits'
# round trip through HBM (S x V x 4 bytes) shows there as a copy if XLA makes one. Since stop 54
# the layer loop runs feature-major ([D, T] activations, weights stored [out, in]: 1.9x faster on
# XLA:CPU at 16 tokens); `layers` (~60 s) times both forms on the GPU, and the profile stages show
# whether XLA:GPU's gemms or the q/k/v transposes cost more than before (compare with run7).
# Next lease (15 min, ~40 s of it the start), in one call of ~570 s:
#   ENV_S=20 HOST_S=60 PROFILE_S=110 PROFILE_CUBLAS_S=110 PROFILE_UNROLLED_S=270 bash benchmarks/gpu_session.sh \
#       env host profile profile-cublas profile-unrolled
# (profile: the scan now, vs run7; profile-cublas: the scan with cuBLAS dots that may read the
# weight slice in place; profile-unrolled: the unrolled loop's compile time and TPOT at both
# batches), then, warm, the kernels' knobs (the decode kernel took 61 us a layer for one 8K
# sequence, ~9x its KV read floor; the prefill kernel reached 15% of the matmul peak):
#   LAYERS_S=60 TUNE_S=200 bash benchmarks/gpu_session.sh layers tune   # or PROFILE31M_S=150 ... profile-31m
# Stage limits (seconds) can be changed with e.g. KERNELS_S=300. A stage that fails or times out
# is logged and the next one still runs; the exit code is the number of failed stages.
set -uo pipefail
cd "$(dirname "$0")/.."
DEST="${OUT:-benchmarks/results/gpu_run}"
OUT="$(mktemp -d)"
mkdir -p "$DEST"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.92}"
PY="${PY:-python3}"
stages=("$@"); [ ${#stages[@]} -eq 0 ] && stages=(env host kernels kernel-tests hf llama8b profile profile-unrolled profile-cublas profile-31m vs-hf tune layers)
failed=0
run() {  # run NAME LIMIT_S CMD...: tee into $OUT/NAME.log, record rc and seconds
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  echo "=== $name (limit ${limit}s): $*" | tee -a "$OUT/session.log"
  timeout --signal=INT --kill-after=15 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$OUT/$name.log"
  echo "=== $name: rc=$rc in $((SECONDS - t0)) s" | tee -a "$OUT/session.log"
  [ $rc -ne 0 ] && failed=$((failed + 1))
  tar czf "$DEST/all.tgz" -C "$OUT" . && cp "$OUT"/*.md "$OUT/session.log" "$DEST"/ 2>/dev/null
}
for s in "${stages[@]}"; do
  case $s in
    env) run env 60 bash -c "nvidia-smi; $PY -c 'import jax, jaxlib, triton; print(jax.__version__, jaxlib.__version__, triton.__version__); print(jax.devices()); print(jax.devices()[0].device_kind, getattr(jax.devices()[0], \"core_count\", None))'" ;;
    host) run host "${HOST_S:-90}" bash -c "$PY benchmarks/scheduler_overhead.py --iterations 1000 --policies slo,edf,fcfs \
        --gc engine --phases --out '$OUT/scheduler_overhead_gpu_host.json' && $PY benchmarks/host_step_cost.py --steps 200 \
        --name gpu_host --out '$OUT'" ;;
    kernels) run kernels "${KERNELS_S:-300}" $PY benchmarks/kernels_gpu.py --budget-s "$(( ${KERNELS_S:-300} - 60 ))" --out "$OUT" ;;
    kernel-tests) run kernel-tests "${KERNEL_TESTS_S:-150}" env JAX_PLATFORMS=cuda XLA_PYTHON_CLIENT_PREALLOCATE=false \
        $PY -m pytest -q -n 4 -p no:cacheprovider \
        tests/kernels/test_prefill_kernel.py tests/kernels/test_decode_kernel.py tests/kernels/test_pod_kernel.py \
        tests/kernels/test_kvp_merge.py tests/kernels/test_api.py ;;
    hf) run hf "${HF_S:-200}" $PY benchmarks/engine_gpu.py --hf --budget-s "$(( ${HF_S:-200} - 50 ))" --out "$OUT" ;;
    llama8b) run llama8b "${LLAMA8B_S:-480}" $PY benchmarks/engine_gpu.py --llama8b --budget-s "$(( ${LLAMA8B_S:-480} - 90 ))" --out "$OUT" ;;
    profile) run profile "${PROFILE_S:-260}" $PY benchmarks/decode_profile_gpu.py --loops "${PROFILE_LOOPS:-scan}" \
        --out "$OUT" ;;
    profile-unrolled) run profile-unrolled "${PROFILE_UNROLLED_S:-330}" $PY benchmarks/decode_profile_gpu.py \
        --loops unrolled --tag unrolled --out "$OUT" ;;
    profile-cublas)  # the scan's dots as cuBLAS calls, which dynamic-slice fusion lets read a weight slice in place
      run profile-cublas "${PROFILE_CUBLAS_S:-150}" env XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_gpu_enable_triton_gemm=false --xla_gpu_enable_dynamic_slice_fusion=true" \
          $PY benchmarks/decode_profile_gpu.py --loops scan --tag cublas_dsf --out "$OUT" ;;
    profile-31m) run profile-31m "${PROFILE31M_S:-150}" $PY benchmarks/decode_profile_gpu.py --model llama-31m \
        --prompt 16384 --out "$OUT" ;;
    vs-hf) hf_site="$(mktemp -d)"  # transformers beside the image's torch, for the HF worker only
      run vs-hf-install 120 bash -c "for w in benchmarks/.hf_wheels/*.whl; do $PY -m zipfile -e \"\$w\" '$hf_site'; done"  # a wheel is a zip
      run vs-hf "${VS_HF_S:-300}" env XLA_PYTHON_CLIENT_MEM_FRACTION=0.5 $PY benchmarks/vs_hf.py --hf-python "$PY" \
          --hf-path "$hf_site" --device gpu --dtype "${VS_HF_DTYPE:-bfloat16}" --out "$OUT" ;;
    layers) run layers "${LAYERS_S:-90}" $PY benchmarks/feature_major_layers.py --tokens 1,16,64,512,2048 \
        --rounds 5 --out "$OUT" ;;
    tune) run tune "${TUNE_S:-200}" $PY benchmarks/kernel_tune_gpu.py --budget-s "$(( ${TUNE_S:-200} - 40 ))" --out "$OUT" ;;
    *) echo "unknown stage $s (env host kernels kernel-tests hf llama8b profile profile-unrolled profile-cublas profile-31m vs-hf tune layers)"; failed=$((failed + 1)) ;;
  esac
done
echo "=== $failed failed stage(s); archive $DEST/all.tgz" | tee -a "$OUT/session.log"
cp "$OUT/session.log" "$DEST"/
exit $failed
