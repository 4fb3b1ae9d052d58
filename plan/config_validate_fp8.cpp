// The rules of precision.fp8* (docs/ARCHITECTURE.md §3, §6 "FP8"): FP8 GEMMs scale bf16 operands,
// and what the delayed recipe's state does not follow yet is refused by name.
#include "plan/config_rules.h"

namespace strata::config_detail {

void validate_fp8(const Config& c, const Rules& rules) {
  const Fp8Settings& f = c.precision.fp8;
  if (!(f.history >= 1 && f.history <= 1024))
    rules.fail("precision.fp8_history", "must be in [1, 1024], got ", f.history);
  rules.at_least("precision.fp8_min_size", f.min_size, 0);
  if (!f.enabled()) return;
  // The casts take bf16 operands, as Transformer Engine's and torchao's recipes do: fp32 would
  // make FP8 the only reduced precision of the run, fp16 would stack a loss scale on the casts'.
  if (c.precision.compute != cpu::ComputeDtype::bf16)
    rules.fail("precision.fp8", "(", kFp8ScalingChoices.word(f.scaling),
               ") needs precision.compute: bf16, got ",
               cpu::compute_dtype_name(c.precision.compute));
  if (f.layers.empty())
    rules.fail("precision.fp8_layers", "is empty: no GEMM would multiply in FP8 (use fp8: none)");
  if (f.scaling != Fp8Scaling::delayed) return;
  // The amax histories are reduced at the end of a step of the pipeline schedule and stored once
  // per job; a swarm stage and DiLoCo's workers step on their own.
  if (c.swarm.enabled())
    rules.fail("precision.fp8",
               "(delayed) keeps amax histories per step of a whole job; it does "
               "not run under swarm yet (tensorwise and rowwise do)");
  if (c.diloco.enabled)
    rules.fail("precision.fp8",
               "(delayed) keeps amax histories per step of a whole job; it does "
               "not run under diloco yet (tensorwise and rowwise do)");
}

}  // namespace strata::config_detail
