// all.cu: the one translation unit that `cargo xtask ptx` compiles into lbm.ptx.
//
// It only includes every kernel family, so that all `extern "C" __global__`
// functions land in a single PTX module that lbm-cuda embeds and loads once.
// It defines no kernel of its own and is not meant to be compiled together with
// the files it includes (their shared header would then be compiled twice).
#include "lbm.cu"
#include "refine.cu"
#include "reflux.cu"
#include "exchange.cu"
#include "boundary.cu"
#include "health.cu"
#include "moments.cu"
#include "producer.cu"
