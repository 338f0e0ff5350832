#!/usr/bin/env bash
# Single NeuronCore training run.
set -euo pipefail
export PJRT_DEVICE=NEURON
export NEURON_CC_FLAGS="--model-type=cnn-training"
python train.py --steps 200 "$@"
