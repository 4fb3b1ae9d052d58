// `eval --gradients FILE.safetensors` (tools/eval_gradients.h): the file holds every checkpoint
// tensor under its name with its logical shape (padded vocabulary rows included, their gradient
// zero), its metadata the val_loss eval printed; on a tiny GPT-2, a tiny Llama-style model
// (RMSNorm, SwiGLU, RoPE, grouped-query attention, no biases, an untied head) and a tiny mixture
// of experts (whose router losses must not enter val_loss's gradient), over windows that fill one
// and a half micro-batches, the gradient matches a central finite difference of val_loss as eval
// computes it (train/evaluate.h's evaluate_loss on the checkpoint's model) on the largest-gradient
// element of every tensor. Misuse is one error line.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tests/support/checkpoint_support.h"
#include "tests/support/test_support.h"
#include "tools/hf/safetensors.h"
#include "train/checkpoint/saved_model.h"
#include "train/evaluate.h"

namespace strata {
namespace {

using testing::TempDir;

// seq_len 8 and the default micro_batch 8: 100 tokens make 12 windows, batches of 8 and 4.
constexpr int kTokens = 100;

GptShape llama_shape() {
  GptArchitecture arch;
  arch.norm = Norm::rmsnorm;
  arch.mlp = MlpKind::swiglu;
  arch.d_ff = 24;
  arch.position = Position::rope;
  arch.kv_heads = 2;
  arch.bias = false;
  arch.tie_embeddings = false;
  return GptShape{2, 4, 16, 8, 64, {}, arch};
}

// Initialised parameters moved off their initial values (biases 0, gains 1) so that every
// tensor's gradient is generic; padding rows stay zero.
std::vector<float> parameters(const GptShape& shape) {
  const ParameterLayout layout = ParameterLayout::for_gpt(shape);
  std::vector<float> params(layout.total());
  initialize_gpt_parameters(layout, shape, 7, params.data());
  std::mt19937_64 rng(3);
  std::normal_distribution<float> noise(0.0f, 0.05f);
  for (const TensorView& t : layout.tensors()) {
    const bool table = t.name == "wte" || t.name == "lm_head.weight";
    const std::size_t used =
        table ? static_cast<std::size_t>(shape.vocab_size) * shape.d_model : t.size;
    for (std::size_t i = 0; i < used; ++i) params[t.offset + i] += noise(rng);
  }
  return params;
}

void check_gradients(const GptShape& shape, const std::string& tag) {
  TempDir dir("eval_gradients_" + tag);
  testing::write_synthetic_dataset(dir / "data", shape.vocab_size, 1000);
  const std::string checkpoint =
      testing::write_strata_checkpoint(dir / "ckpt", shape, parameters(shape));
  const auto run =
      testing::run_command("OMP_NUM_THREADS=1 " + testing::bin("eval") + " --checkpoint " +
                           checkpoint + " --data " + (dir / "data/val") + " --tokens " +
                           std::to_string(kTokens) + " --gradients " + (dir / "grads.safetensors"));
  ASSERT_EQ(run.status, 0) << run.output;
  ASSERT_EQ(run.output.rfind("val_loss ", 0), 0u) << run.output;
  EXPECT_NE(run.output.find(" over 96 tokens in 12 windows "), std::string::npos) << run.output;
  const double printed = std::stod(run.output.substr(9));

  const SafetensorsFile file = read_safetensors(dir / "grads.safetensors");
  const ParameterLayout layout = ParameterLayout::for_gpt(shape);
  ASSERT_EQ(file.tensors.size(), layout.tensors().size());
  for (std::size_t i = 0; i < file.tensors.size(); ++i) {
    EXPECT_EQ(file.tensors[i].name, layout.tensors()[i].name);
    EXPECT_EQ(file.tensors[i].shape, layout.tensors()[i].slice.logical_shape)
        << file.tensors[i].name;
  }
  const auto meta = [&](const std::string& key) {
    for (const auto& [k, v] : file.metadata)
      if (k == key) return v;
    return std::string("absent");
  };
  EXPECT_EQ(meta("targets"), "96");
  EXPECT_EQ(meta("windows"), "12");
  EXPECT_NEAR(std::stod(meta("loss")), printed, 5e-7);

  // eval's val_loss at params, in process: the function eval prints.
  SavedModel saved = load_saved_model(checkpoint, 0);
  const TokenSource split = TokenSource::open(dir / "data/val");
  const auto val_loss = [&] {
    const LossSum loss = evaluate_loss(*saved.model, saved.params.data(), split, kTokens,
                                       saved.config.train.micro_batch, 0, 1);
    return loss.sum / static_cast<double>(loss.count);
  };
  EXPECT_NEAR(val_loss(), printed, 5e-7);
  for (const SafetensorsTensor& g : file.tensors) {
    SCOPED_TRACE(g.name);
    const TensorView& view = layout.at(g.name);
    if (g.name == "wte" || g.name == "lm_head.weight") {  // the padded rows: never used
      for (std::size_t i = static_cast<std::size_t>(shape.vocab_size) * shape.d_model;
           i < g.values.size(); ++i)
        ASSERT_EQ(g.values[i], 0.0f) << "padding element " << i;
    }
    // A central difference on the element of largest gradient (well above fp32's noise in the
    // loss: about 1e-7 over 2h), step h = 4e-3 of a weight of order 0.05–1; measured: within 0.3 %
    // and 7e-6 of it on every tensor of both models.
    std::size_t at = 0;
    for (std::size_t i = 0; i < g.values.size(); ++i)
      if (std::fabs(g.values[i]) > std::fabs(g.values[at])) at = i;
    float& weight = saved.params[view.offset + at];
    const float original = weight, h = 4e-3f;
    weight = original + h;
    const double up = val_loss();
    weight = original - h;
    const double down = val_loss();
    weight = original;
    const double numeric = (up - down) / (static_cast<double>(original + h) - (original - h));
    EXPECT_NEAR(g.values[at], numeric, 5e-3 * std::fabs(numeric) + 1e-5)
        << "element " << at << ": eval " << g.values[at] << ", finite difference " << numeric;
  }
}

TEST(EvalGradients, Gpt2MatchesFiniteDifferences) { check_gradients({2, 2, 16, 8, 64}, "gpt2"); }

TEST(EvalGradients, LlamaStyleMatchesFiniteDifferences) { check_gradients(llama_shape(), "llama"); }

// Every token to every expert (top_k = experts, dropless), so that a step of h moves no token to
// another expert (with 2 of 4, one does: the loss jumps, and a central difference with it); the
// router still learns through the gates. Its gradient is val_loss's alone, without the auxiliary
// losses (load balance, z-loss) that training adds.
TEST(EvalGradients, MixtureOfExpertsMatchesFiniteDifferences) {
  MoeConfig moe;
  moe.experts = 2;
  moe.top_k = 2;
  moe.capacity_factor = 0;
  check_gradients({2, 2, 16, 8, 64, moe}, "moe");
}

TEST(EvalGradients, MisuseIsOneErrorLine) {
  TempDir dir("eval_gradients_misuse");
  const GptShape shape{1, 2, 16, 8, 64};
  testing::write_synthetic_dataset(dir / "data", shape.vocab_size, 1000);
  const std::string checkpoint =
      testing::write_strata_checkpoint(dir / "ckpt", shape, parameters(shape));
  const std::string eval = testing::bin("eval") + " --checkpoint " + checkpoint;
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {" --multiple-choice x.jsonl --gradients g.safetensors",
            "error: --gradients needs --data\n"},
           {" --data " + (dir / "data/val") + " --gradients " + (dir / "none/g.safetensors"),
            "error: "}}) {
    const auto run = testing::run_command(eval + args);
    EXPECT_NE(run.status, 0) << args;
    const auto error = run.output.find("error: ");
    ASSERT_NE(error, std::string::npos) << run.output;
    EXPECT_EQ(run.output.substr(error).rfind(message, 0), 0u) << run.output;
    EXPECT_EQ(run.output.find('\n', error), run.output.size() - 1) << "one line: " << run.output;
  }
}

}  // namespace
}  // namespace strata
