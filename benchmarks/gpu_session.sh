#!/bin/bash
# The runtime's checks on a lent GPU machine (the workplace's device tool), as one prepared script: host <-> GPU
# copies, plans over the CPU and the GPU run beside their predictions (batch 1 in one process, batch 1 as a rank
# per device, and a batch of 8; graphs, plans and run reports kept in $OUT/keep.tar.gz), what two workers of one
# process cost each other, a one-piece plan on the GPU against its profile (overhead), and the CUDA tests. Run
# from the repository root there, with the wheels diviml needs and the machine lacks in .whl/ (see the tool's
# README); each stage stops at its own time limit, so the stages before it keep their results; tables are
# named after the GPU (runtime_fidelity_h200.md on an H200):
#     LATENCY_S=200 RANKS_S=200 BATCH_S=170 TESTS_S=200 bash benchmarks/gpu_session.sh overhead latency ranks tests
# (on a lent H100 in session 39, 110 s ran out with six of the eight CUDA tests done; on a lent H200 in session
# 47, latency with two models took 138 s, ranks ran out at 150 s after googlenet, tests at 170 s after seven)
set -u
OUT=${OUT:-/tmp/diviml-gpu}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,clocks.sm,utilization.gpu --format=csv > "$OUT/gpu.txt"
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
GPU=$(echo "$GPU_NAME" | grep -o -i -E "[A-Z][0-9]{2,3}" | head -1 | tr 'A-Z' 'a-z')  # h100, h200, a100
MACHINE="lent $GPU machine ($(nproc) cores, one $GPU_NAME), alone; CPU device 8 threads"
python3 -c "import torch, diviml, ortools, highspy; print('torch', torch.__version__, torch.cuda.get_device_name(0))" \
    | tee -a "$OUT/gpu.txt" || exit 1
platform=/tmp/cpu-$GPU-measured.yaml
python3 benchmarks/runtime_fidelity.py --cuda-link --platform-out $platform --out "$OUT/runtime_link_cuda.md" \
    > /dev/null || exit 1
cp $platform "$OUT/"
run_table() {  # objective, seconds, models, output name, ranks
    timeout "$2" python3 benchmarks/runtime_fidelity.py --platforms $platform --objective "$1" --batch 8 \
        --models $3 --nproc $5 --time-limit 5 --min-time 0.5 --repeats 10 --machine "$MACHINE" --out "$OUT/$4.md" \
        --keep /tmp/keep 2> "$OUT/$4.log"
    tail -3 "$OUT/$4.log"; tail -n +5 "$OUT/$4.md"
    tar czf "$OUT/keep.tar.gz" -C /tmp keep
}
for stage in "$@"; do
  case $stage in
    contention) timeout 90 python3 benchmarks/runtime_contention.py --out "$OUT/runtime_contention_$GPU.md" ;;
    overhead)  # a one-piece plan on the GPU against its profile and the module called directly, in one process
      timeout "${OVERHEAD_S:-150}" python3 benchmarks/runtime_fidelity.py --overhead --device cuda --min-time 0.5 \
          --models ${OVERHEAD_MODELS:-googlenet randwire-ws-s0 resnet50} --out "$OUT/runtime_overhead_$GPU.md" \
          2> "$OUT/runtime_overhead_$GPU.log"; cat "$OUT/runtime_overhead_$GPU.md" ;;
    latency) run_table latency "${LATENCY_S:-360}" "${LATENCY_MODELS:-resnet50 googlenet inception_v3 gpt2-small randwire-ws-s0}" runtime_fidelity_$GPU 1 ;;
    ranks) run_table latency "${RANKS_S:-300}" "${RANKS_MODELS:-googlenet randwire-ws-s0}" runtime_fidelity_${GPU}_ranks 2 ;;
    batch) run_table batch "${BATCH_S:-300}" "${BATCH_MODELS:-resnet50 googlenet inception_v3}" runtime_fidelity_${GPU}_batch 1 ;;
    tests)
      timeout "${TESTS_S:-200}" python3 -m pytest -q -p no:logging tests/runtime/test_run_gpu.py \
          "tests/frontends/test_pytorch.py::test_profiling_on_a_gpu_runs_the_captured_graph_there_and_records_its_times" \
          > "$OUT/tests.log" 2>&1
      grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -12 ;;
  esac
done
