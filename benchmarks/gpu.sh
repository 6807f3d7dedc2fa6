#!/usr/bin/env bash
# GPU benchmarks, on a machine with an NVIDIA GPU and the project installed (.venv, a CUDA paddlepaddle build):
#   - training samples/s of steps.train on the ERNIE 3.0-medium-sized model, AMP off, fp16 and bf16;
#   - serving texts/s of Paddle Inference fp32 and fp16 on CUDA and Paddle-TensorRT fp16 (where Paddle is built
#     with TensorRT), in process, against Paddle fp32 on the CPU as the reference for the logits.
# Results go to $OUT (default benchmarks/results/gpu-<UTC time>/): one text file per measurement plus
# serving.json and nvidia-smi.txt. Exit 2 without a GPU.
#
#   benchmarks/gpu.sh                 # ~10 minutes on one data-centre GPU
#   STEPS=20 ROUNDS=5 benchmarks/gpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
STEPS=${STEPS:-60}
ROUNDS=${ROUNDS:-20}
OUT=${OUT:-benchmarks/results/gpu-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"

if ! nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1; then
  echo "benchmarks/gpu.sh: no GPU (nvidia-smi failed; see $OUT/nvidia-smi.txt)" >&2
  exit 2
fi
"$PY" -c "import paddle; assert paddle.device.cuda.device_count() > 0, 'paddle sees no CUDA device'" \
  || { echo "benchmarks/gpu.sh: this paddlepaddle has no CUDA (install the GPU wheel)" >&2; exit 2; }

# ERNIE 3.0-medium: hidden 768, 6 layers, 12 heads, intermediate 3072, 64-token sequences (benchmarks/serving.py MEDIUM).
MEDIUM=(--set model.hidden_size=768 --set model.num_hidden_layers=6 --set model.num_attention_heads=12
        --set model.intermediate_size=3072 --set model.max_seq_len=64)
for amp in off fp16 bf16; do
  echo "== training, AMP $amp"
  "$PY" -m benchmarks.train_throughput --steps "$STEPS" --rounds 3 --batch-size 32 "${MEDIUM[@]}" \
    --set "training.amp=$amp" | tee "$OUT/train-amp-$amp.txt"
done

echo "== serving, GPU engine variants"
"$PY" -m benchmarks.engines --gpu --rounds "$ROUNDS" --json "$OUT/serving.json" | tee "$OUT/serving.txt"
echo "results in $OUT"
