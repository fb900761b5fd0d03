#!/usr/bin/env bash
# The swiss-roll regime study of docs/swiss-roll.md, in one command:
#
#   scripts/swiss-roll-study.sh [OUT]      (default OUT: runs/swiss-roll-study)
#
# Four grids of `vlgo swiss-roll --grid`, each writing OUT/<grid>/study.md (the paper's four
# conclusions per regime, the MSE table and the diagnostics) beside one run folder per regime.
# Every grid resumes: run the script again after a stop and finished regimes are skipped.
# About 45 minutes on 2 cores. VLGO=path/to/vlgo uses a built binary instead of `cargo run`.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/swiss-roll-study}
if [ -n "${VLGO:-}" ]; then
  vlgo() { "$VLGO" "$@"; }
else
  cargo build --release --quiet
  vlgo() { cargo run --release --quiet -- "$@"; }
fi
J="fista,laplace_j1,laplace_j5,laplace_j20,laplace_j100,thresholded_j1,thresholded_j5,thresholded_j20,thresholded_j100"

# 1. Regimes: the data's scale x the KL's pressure (beta with the prior's scale; beta = 0: no KL)
#    x the threshold variant, J in {1, 5, 20, 100}, 200 epochs.
vlgo swiss-roll --methods "$J" \
  --grid data_scale=1,3.1623,unit \
  --grid beta:prior.scale=5e-3:0.01,5e-4:1e-3,0:0.01 \
  --grid threshold_variant=noise,sample \
  --out "$OUT/regimes"

# 2. The amortisation gap on the raw roll: the encoder's input standardised, a cosine schedule.
vlgo swiss-roll --methods fista,laplace_j1,laplace_j20,thresholded_j20 \
  --grid standardise_encoder_input=false,true \
  --grid lr_schedule=constant,cosine \
  --out "$OUT/gap"

# 3. Thresholding at unit variance: the threshold zeta against the coefficients' size.
vlgo swiss-roll --methods fista,laplace_j20,thresholded_j1,thresholded_j5,thresholded_j20 \
  --set data_scale=unit \
  --grid zeta=0.002,0.01,0.05 \
  --grid threshold_variant=noise,sample \
  --out "$OUT/zeta"

# 4. The paper's 1000 epochs at unit variance: do the operators prune further?
vlgo swiss-roll --full \
  --set data_scale=unit \
  --grid threshold_variant=noise,sample \
  --out "$OUT/full-unit"
