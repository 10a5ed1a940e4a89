#!/usr/bin/env bash
# The bulk-kernel variants of docs/PERFORMANCE.md ("The bulk kernel"), each
# timed against a device-to-device copy in the same process, and the bits of
# the kept variant compared with the first one. Needs nvcc and a GPU; with the
# device tool: `bash tools/bulk-variants/run.sh` (the working tree is copied).
set -e
cd "$(dirname "$0")"
nvcc -O3 -arch=sm_90 -fmad=false -prec-div=true -prec-sqrt=true -ftz=false -Xptxas -v -o /tmp/bulk-variants bulk.cu -lcuda 2>&1 |
  grep -E "registers|spill|Compiling entry" | paste - - - | sed 's/ptxas info    ://g'
/tmp/bulk-variants
