#!/usr/bin/env bash
# GPU readiness check: run roofline's measure and validate on CUDA and collect the figures (< 8 minutes on one GPU).
#   bash benchmarks/gpu_check.sh OUTDIR [--cpu]
# Runs from the source tree, nothing installed: `python3 -m roofline` with the checkout as the working folder, so a
# GPU image holding torch, typer, rich, pyyaml, numpy (matplotlib, transformers, httpx) runs it as it is. PYTHON
# picks the interpreter. --cpu skips the CUDA steps and runs the same commands on the CPU, small (validate's models
# cut to 2 layers), to prove the script and its packages here.
# Writes OUTDIR/measure-default.json, measure-quick.json, validate-gpt2.json, validate-llama-3.2-1b.json,
# measure-transformers.json (where transformers imports), simulate-llama-3.2-1b.json, collectives.json (2+ GPUs
# only), the stderr of each step (*.log) and OUTDIR/summary.txt (figures vs datasheet). Each step has its own time limit; a failing step is recorded in the summary and the others
# still run.
set -uo pipefail
out="${1:?usage: benchmarks/gpu_check.sh OUTDIR [--cpu]}"
device=cuda
small=()
if [ "${2:-}" = "--cpu" ]; then
  device=cpu
  small=(--layers 2 --batch 1,4)
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
cd "$(dirname "$0")/.."
py="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1

step() {  # step NAME SECONDS ARGS...: run `roofline ARGS` with a time limit, JSON to OUTDIR/NAME.json
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout "$limit" "$py" -m roofline "$@" >"$out/$name.json" 2>"$out/$name.log"
  local rc=$?
  echo "$name: exit $rc in $((SECONDS - start)) s (roofline $*)" >>"$out/steps.txt"
}

: >"$out/steps.txt"
if [ "$device" = cuda ]; then
  "$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0), 'x', torch.cuda.device_count())" \
    >"$out/device.txt" 2>&1 || { echo "no CUDA device visible: $(cat "$out/device.txt")" | tee "$out/summary.txt"; exit 1; }
else
  "$py" -c "import torch, typer; print('torch', torch.__version__, 'cpu (--cpu: CUDA steps skipped), typer', typer.__version__)" \
    >"$out/device.txt" 2>&1 || { echo "torch or typer missing: $(cat "$out/device.txt")" | tee "$out/summary.txt"; exit 1; }
fi
step measure-default 120 measure --device "$device" --json --save "$out/profile.yaml"
step measure-quick 60 measure --device "$device" --quick --json
profile=()  # validate predicts with the default run's profile; without one it measures quickly itself
[ -s "$out/profile.yaml" ] && profile=(-H "$out/profile.yaml")
step validate-gpt2 150 validate -m gpt2 --device "$device" "${profile[@]}" "${small[@]}" --json
step validate-llama-3.2-1b 150 validate -m llama-3.2-1b --device "$device" "${profile[@]}" "${small[@]}" --json
# transformers' fixed costs and its GPT-2 Conv1D slowdown (engines.transformers), where the image has transformers.
if "$py" -c 'import transformers' 2>/dev/null; then
  step measure-transformers 120 measure --engine transformers --device "$device" --quick --json
fi
# The simulator on the measured profile: the profile's rates and eager's measured fixed cost on every step.
step simulate-llama-3.2-1b 60 simulate -m llama-3.2-1b "${profile[@]}" --rate 20/s --requests 500 --json
if [ "$device" = cuda ] && [ "$("$py" -c 'import torch; print(torch.cuda.device_count())')" -ge 2 ]; then
  step collectives 120 measure --collectives --device cuda --json
fi
"$py" benchmarks/gpu_summary.py "$out" | tee "$out/summary.txt"
