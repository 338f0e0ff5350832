#!/usr/bin/env bash
# Train on the 8 NeuronCores of the instance (the program starts one process per core itself).
set -euo pipefail
cd "$(dirname "$0")"
export PJRT_DEVICE=NEURON
python train.py --epochs 2 --batch-size 256 "$@"
