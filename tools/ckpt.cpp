// ckpt inspect CKPT        step, data position, loss scale, the run's config, every tensor with
//                          shape and norm
// ckpt export-hf | convert  (not implemented yet: reported as an error)
#include <cmath>
#include <cstdio>
#include <iostream>

#include "model/core/error.h"
#include "train/checkpoint.h"
#include "train/saved_model.h"

namespace {

constexpr const char* kUsage = "usage: ckpt inspect CKPT";

int inspect(const std::string& path) {
  const strata::SavedModel saved = strata::load_saved_model(path, 1);
  const strata::ParameterLayout& layout = saved.model->layout();
  std::printf("checkpoint   %s\n", path.c_str());
  std::printf("step         %lld\n", static_cast<long long>(saved.state.step));
  std::printf("data         %lld samples consumed (next global sample index)\n",
              static_cast<long long>(saved.state.data_position));
  std::printf("seed         %llu\n", static_cast<unsigned long long>(saved.state.seed));
  std::printf("loss_scale   %.17g\n", saved.state.loss_scale);
  // -1: the run had no dynamic loss scale (fp32, bf16, a fixed fp16 scale), or predates the field.
  if (saved.state.loss_scale_clean_steps >= 0)
    std::printf("clean_steps  %lld (clean fp16 steps since the dynamic loss scale last changed)\n",
                static_cast<long long>(saved.state.loss_scale_clean_steps));
  else
    std::printf("clean_steps  none (no dynamic loss scale)\n");
  std::printf("adam_steps   %lld\n", static_cast<long long>(saved.state.adam_steps));
  std::printf("parameters   %zu\n", layout.total());
  std::printf("tokenizer    %s\n",
              saved.tokenizer_model.empty()
                  ? "none stored"
                  : (std::to_string(saved.tokenizer_model.size()) + " bytes").c_str());
  std::printf("\n%-28s %-14s %14s\n", "tensor", "shape", "l2 norm");
  for (const strata::TensorView& t : layout.tensors()) {
    double sum = 0;
    for (std::size_t i = 0; i < t.size; ++i)
      sum += double(saved.params[t.offset + i]) * saved.params[t.offset + i];
    std::string shape;
    for (std::size_t d = 0; d < t.shape.size(); ++d)
      shape.append(d ? "x" : "").append(std::to_string(t.shape[d]));
    std::printf("%-28s %-14s %14.6f\n", t.name.c_str(), shape.c_str(), std::sqrt(sum));
  }
  std::printf("\nconfig:\n%s", strata::read_checkpoint_config(path).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc < 2) strata::fail("missing command (", kUsage, ")");
    const std::string command = argv[1];
    if (command == "inspect") {
      if (argc != 3) strata::fail("inspect takes one checkpoint path (", kUsage, ")");
      return inspect(argv[2]);
    }
    if (command == "export-hf" || command == "convert")
      strata::fail("'ckpt ", command, "' is not implemented yet");
    strata::fail("unknown command '", command, "' (", kUsage, ")");
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
}
