// Partitioned models equal the whole model: tensor-parallel shards (with and without sequence
// parallelism, ranks as threads in one process) and pipeline stages chained by hand give the
// whole model's losses and, reassembled, its gradients (double precision, to 1e-10). Also:
// several micro-batches in flight in separate activation slots, and slice bookkeeping.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "model/gpt.h"
#include "tests/support/model_shapes.h"
#include "tests/support/partitioned_ranks.h"

namespace strata {
namespace {

using testing::PartitionedRanks;
using testing::slice_of;

const GptShape kShape{3, 4, 16, 6, 37};  // 3 layers, 4 heads, C 16, T 6, vocab 37 (padded 128)
constexpr int kBatch = 2;

// The same with experts in its middle block: 4 experts, top-2, a capacity that drops tokens.
GptShape moe_shape() {
  MoeConfig moe;
  moe.experts = 4;
  moe.top_k = 2;
  moe.every = 2;
  moe.capacity_factor = 1.0;  // 3 of the 6 tokens of a sequence per expert
  moe.aux_loss = 0.1;
  moe.z_loss = 0.01;
  return GptShape(3, 4, 16, 6, 37, moe);
}

// The Llama family's block on kShape's sizes: RMSNorm, SwiGLU of width 24, rotary positions, 4
// query heads sharing 2 key/value heads, no biases, an untied head.
GptShape llama_shape() { return testing::llama_shape(kShape, 24, 2); }

// The same with moe_shape's experts, each a SwiGLU MLP of width 24 without biases.
GptShape llama_moe_shape() { return testing::llama_shape(moe_shape(), 24, 2); }

// Adds one to hits[e] for every logical element e (in `whole`) that tensor-parallel rank `rank`'s
// layout `part` holds, a replicated tensor's on rank 0 only; each slice has its tensor's logical
// shape.
void count_logical_elements(const ParameterLayout& whole, const ParameterLayout& part, int rank,
                            std::vector<int>& hits) {
  for (const TensorView& t : part.tensors()) {
    if (t.slice.is_whole() && rank > 0) continue;  // replicated: count once
    const TensorView& w = whole.at(t.name);
    EXPECT_EQ(t.slice.logical_shape, w.shape) << t.name;
    for (std::size_t i = 0; i < t.size; ++i)
      ++hits[w.offset + t.slice.logical_index(static_cast<std::int64_t>(i))];
  }
}

struct Batch {
  std::vector<std::int32_t> tokens, targets;
};

Batch random_batch(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Batch b;
  for (int i = 0; i < kBatch * kShape.seq_len; ++i) {
    b.tokens.push_back(static_cast<std::int32_t>(rng() % kShape.vocab_size));
    b.targets.push_back(static_cast<std::int32_t>(rng() % kShape.vocab_size));
  }
  return b;
}

std::vector<double> random_params(const ParameterLayout& layout) {
  std::vector<double> params(layout.total());
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(0.0, 0.3);
  for (double& p : params) p = normal(rng);
  for (const TensorView& t : layout.tensors())
    if (t.shape.size() == 1 && t.name.ends_with(".weight"))
      for (std::size_t i = 0; i < t.size; ++i) params[t.offset + i] += 1.0;
  return params;
}

struct Layout {
  int tp = 1, pp = 1;
  bool sequence_parallel = false;
  std::vector<std::pair<int, int>> stage_layers;  // [begin, end) per stage
};

// Runs `micro_batches` forwards (each into its own slot) then their backwards through every
// stage and tensor-parallel rank; returns the losses and the reassembled logical gradient.
struct Result {
  std::vector<double> losses;
  std::vector<double> grads;
};

Result run_partitioned(const Layout& layout, const std::vector<double>& params,
                       const std::vector<Batch>& batches, const GptShape& shape) {
  const ParameterLayout whole = ParameterLayout::for_gpt(shape);
  const int slots = static_cast<int>(batches.size());
  PartitionedRanks<double> grid(
      shape, layout.stage_layers, layout.tp, layout.sequence_parallel, kBatch, slots, GptOptions{},
      [&](const ParameterLayout& part) { return slice_of(whole, part, params); });
  auto& groups = grid.groups;
  auto& ranks = grid.ranks;
  const int T = kShape.seq_len;
  Result result;
  result.losses.assign(slots, 0.0);
  for (int mb = 0; mb < slots; ++mb) {
    for (int s = 0; s < layout.pp; ++s) {
      groups[s]->run([&](int r) {
        const double* input = s == 0 ? nullptr : ranks[s - 1][r].model->output(mb);
        const double loss =
            ranks[s][r].model->forward(mb, ranks[s][r].params.data(), batches[mb].tokens.data(),
                                       input, batches[mb].targets.data(), kBatch, T);
        if (s == layout.pp - 1 && r == 0) result.losses[mb] = loss;
      });
    }
  }
  for (int mb = 0; mb < slots; ++mb) {
    for (int s = layout.pp - 1; s >= 0; --s) {
      groups[s]->run([&](int r) {
        const double* output_grad =
            s == layout.pp - 1 ? nullptr : ranks[s + 1][r].model->input_grad(mb);
        ranks[s][r].model->backward(mb, ranks[s][r].params.data(), ranks[s][r].grads.data(),
                                    output_grad, 1.0);
      });
    }
  }
  // Reassemble: shards land on their logical elements; replicated tensors hold the full gradient
  // on every rank (checked equal) unless sequence parallelism leaves partial sums to add up.
  result.grads.assign(whole.total(), 0.0);
  for (int s = 0; s < layout.pp; ++s) {
    for (int r = 0; r < layout.tp; ++r) {
      const ParameterLayout& part = ranks[s][r].model->layout();
      for (const TensorView& t : part.tensors()) {
        const TensorView& w = whole.at(t.name);
        const bool replicated = t.slice.is_whole() && layout.tp > 1;
        for (std::size_t i = 0; i < t.size; ++i) {
          const double g = ranks[s][r].grads[t.offset + i];
          if (replicated && !layout.sequence_parallel) {
            EXPECT_EQ(g, ranks[s][0].grads[ranks[s][0].model->layout().at(t.name).offset + i])
                << t.name << " differs between tensor-parallel ranks";
            if (r != 0) continue;
          }
          result.grads[w.offset + t.slice.logical_index(static_cast<std::int64_t>(i))] += g;
        }
      }
    }
  }
  return result;
}

Result run_whole(const std::vector<double>& params, const std::vector<Batch>& batches,
                 const GptShape& shape) {
  Gpt<double> model(shape, kBatch);
  Result result;
  result.grads.assign(model.layout().total(), 0.0);
  for (const Batch& b : batches) {
    result.losses.push_back(
        model.forward(params.data(), b.tokens.data(), b.targets.data(), kBatch, kShape.seq_len));
    model.backward(params.data(), result.grads.data(), 1.0);
  }
  return result;
}

void expect_same_run(const Layout& layout, const GptShape& shape = kShape) {
  const ParameterLayout whole = ParameterLayout::for_gpt(shape);
  const std::vector<double> params = random_params(whole);
  const std::vector<Batch> batches = {random_batch(1), random_batch(2)};
  const Result expected = run_whole(params, batches, shape);
  const Result actual = run_partitioned(layout, params, batches, shape);
  for (std::size_t i = 0; i < batches.size(); ++i)
    EXPECT_NEAR(actual.losses[i], expected.losses[i], 1e-12 * std::abs(expected.losses[i]));
  double max_error = 0, max_grad = 0;
  for (std::size_t i = 0; i < expected.grads.size(); ++i) {
    max_error = std::max(max_error, std::abs(actual.grads[i] - expected.grads[i]));
    max_grad = std::max(max_grad, std::abs(expected.grads[i]));
  }
  EXPECT_GT(max_grad, 1e-2);
  EXPECT_LT(max_error, 1e-10 * max_grad);
}

TEST(ModelPartition, TensorParallelEqualsWholeModel) {
  for (int tp : {1, 2, 4}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    expect_same_run({tp, 1, false, {{0, 3}}});
  }
}

TEST(ModelPartition, SequenceParallelEqualsWholeModel) {
  for (int tp : {2, 4}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    expect_same_run({tp, 1, true, {{0, 3}}});
  }
}

TEST(ModelPartition, PipelineStagesEqualWholeModel) {
  expect_same_run({1, 2, false, {{0, 2}, {2, 3}}});
  expect_same_run({1, 3, false, {{0, 1}, {1, 2}, {2, 3}}});
  expect_same_run({2, 2, true, {{0, 1}, {1, 3}}});
  expect_same_run({4, 2, false, {{0, 1}, {1, 3}}});
}

// Experts split over tp like the MLP (the gates' gradient summed over the group), their router
// and biases replicated, under sequence parallelism and over pipeline stages: the whole model's
// losses and gradients, the capacity dropping the same tokens everywhere.
TEST(ModelPartition, ExpertBlocksEqualTheWholeModel) {
  expect_same_run({2, 1, false, {{0, 3}}}, moe_shape());
  expect_same_run({2, 1, true, {{0, 3}}}, moe_shape());
  expect_same_run({1, 2, false, {{0, 2}, {2, 3}}}, moe_shape());
  expect_same_run({2, 2, true, {{0, 1}, {1, 3}}}, moe_shape());
}

// Key/value heads split over tp with their query heads' groups, the fused gate-up split into
// each rank's [gate | up] rows, the untied head split by vocabulary rows like wte and held by the
// last stage alone.
TEST(ModelPartition, LlamaBlockEqualsTheWholeModel) {
  expect_same_run({2, 1, false, {{0, 3}}}, llama_shape());
  expect_same_run({2, 1, true, {{0, 3}}}, llama_shape());
  expect_same_run({1, 2, false, {{0, 2}, {2, 3}}}, llama_shape());
  expect_same_run({2, 2, true, {{0, 1}, {1, 3}}}, llama_shape());
}

// SwiGLU experts split over tp as the Llama MLP ([gate | up] rows of every expert per rank), no
// biases to take on tp rank 0, under sequence parallelism and over pipeline stages.
TEST(ModelPartition, LlamaExpertBlocksEqualTheWholeModel) {
  expect_same_run({2, 1, false, {{0, 3}}}, llama_moe_shape());
  expect_same_run({2, 1, true, {{0, 3}}}, llama_moe_shape());
  expect_same_run({1, 2, false, {{0, 2}, {2, 3}}}, llama_moe_shape());
  expect_same_run({2, 2, true, {{0, 1}, {1, 3}}}, llama_moe_shape());
}

TEST(ModelPartition, LlamaTensorsSplitByHeadsAndGateAndUp) {
  const GptShape shape = llama_shape();
  const ParameterLayout whole = ParameterLayout::for_gpt(shape);
  EXPECT_FALSE(whole.has("wpe"));
  EXPECT_FALSE(whole.has("h.0.attn.qkv.weight"));
  EXPECT_FALSE(whole.has("h.0.ln1.bias"));
  EXPECT_FALSE(whole.has("h.0.mlp.fc.bias"));
  EXPECT_FALSE(whole.has("lnf.bias"));
  EXPECT_EQ(whole.at("h.0.attn.q.weight").shape, (std::vector<std::int64_t>{16, 16}));
  EXPECT_EQ(whole.at("h.0.attn.k.weight").shape, (std::vector<std::int64_t>{8, 16}));
  EXPECT_EQ(whole.at("h.0.attn.v.weight").shape, (std::vector<std::int64_t>{8, 16}));
  EXPECT_EQ(whole.at("h.0.mlp.fc.weight").shape, (std::vector<std::int64_t>{48, 16}));
  EXPECT_EQ(whole.at("h.0.mlp.proj.weight").shape, (std::vector<std::int64_t>{16, 24}));
  EXPECT_EQ(whole.at("lm_head.weight").shape, (std::vector<std::int64_t>{128, 16}));
  EXPECT_EQ(whole.tensors().back().name, "lm_head.weight");
  EXPECT_EQ(static_cast<std::int64_t>(whole.total()), shape.params_excluding_positions());
  // MFU's N: the untied wte is a lookup, not a product.
  EXPECT_EQ(shape.params_excluding_positions() - shape.active_params_excluding_positions(),
            128 * 16);
  std::vector<int> hits(whole.total(), 0);
  for (int r = 0; r < 2; ++r) {
    ModelPartition p = ModelPartition::whole(shape);
    p.tp_rank = r;
    p.tp_size = 2;
    const ParameterLayout part = ParameterLayout::for_partition(shape, p);
    EXPECT_EQ(part.at("h.1.attn.k.weight").shape, (std::vector<std::int64_t>{4, 16}));
    EXPECT_EQ(part.at("h.1.mlp.fc.weight").shape, (std::vector<std::int64_t>{24, 16}));
    // This rank's gate rows [12r, 12r + 12), then its up rows [24 + 12r, ...).
    const TensorView& fc = part.at("h.1.mlp.fc.weight");
    EXPECT_EQ(fc.slice.logical_index(0), 12 * r * 16);
    EXPECT_EQ(fc.slice.logical_index(12 * 16), (24 + 12 * r) * 16);
    count_logical_elements(whole, part, r, hits);
  }
  for (std::size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i], 1) << "element " << i;
  // Pipeline ends: the first stage has wte only, the last lnf and lm_head only.
  ModelPartition first = ModelPartition::whole(shape), last = first;
  first.layer_end = 1;
  first.has_head = false;
  last.layer_begin = 1;
  last.has_embedding = false;
  EXPECT_TRUE(ParameterLayout::for_partition(shape, first).has("wte"));
  EXPECT_FALSE(ParameterLayout::for_partition(shape, first).has("lm_head.weight"));
  EXPECT_FALSE(ParameterLayout::for_partition(shape, last).has("wte"));
  EXPECT_TRUE(ParameterLayout::for_partition(shape, last).has("lm_head.weight"));
}

TEST(ModelPartition, SlicesTileEveryLogicalTensorExactlyOnce) {
  const ParameterLayout whole = ParameterLayout::for_gpt(kShape);
  std::vector<int> hits(whole.total(), 0);
  for (int r = 0; r < 4; ++r) {
    ModelPartition p = ModelPartition::whole(kShape);
    p.tp_rank = r;
    p.tp_size = 4;
    const ParameterLayout part = ParameterLayout::for_partition(kShape, p);
    count_logical_elements(whole, part, r, hits);
    EXPECT_EQ(part.at("h.0.attn.qkv.weight").shape, (std::vector<std::int64_t>{12, 16}));
    EXPECT_EQ(part.at("h.0.attn.proj.weight").shape, (std::vector<std::int64_t>{16, 4}));
    EXPECT_EQ(part.at("h.0.mlp.proj.weight").shape, (std::vector<std::int64_t>{16, 16}));
    EXPECT_EQ(part.at("wte").shape, (std::vector<std::int64_t>{32, 16}));
  }
  for (std::size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i], 1) << "element " << i;
}

TEST(ModelPartition, InitialisationDoesNotDependOnThePartition) {
  const ParameterLayout whole = ParameterLayout::for_gpt(kShape);
  std::vector<float> reference(whole.total());
  initialize_gpt_parameters(whole, kShape, 9, reference.data());
  ModelPartition p;
  p.tp_rank = 1;
  p.tp_size = 2;
  p.layer_begin = 1;
  p.layer_end = 3;
  p.has_embedding = false;
  const ParameterLayout part = ParameterLayout::for_partition(kShape, p);
  std::vector<float> local(part.total());
  initialize_gpt_parameters(part, kShape, 9, local.data());
  for (const TensorView& t : part.tensors()) {
    const TensorView& w = whole.at(t.name);
    for (std::size_t i = 0; i < t.size; ++i)
      ASSERT_EQ(local[t.offset + i],
                reference[w.offset + t.slice.logical_index(static_cast<std::int64_t>(i))])
          << t.name << "[" << i << "]";
  }
}

// Experts replace the MLP of every `every`-th block: the router (E, C) replicated, each expert's
// fc and proj split over tp as the dense MLP's; the slices tile every logical tensor once, and
// the parameter counts follow (all experts; active: top_k of them).
TEST(ModelPartition, ExpertBlocksHaveARouterAndExpertsSplitLikeTheMlp) {
  MoeConfig moe;
  moe.experts = 3;
  moe.top_k = 2;
  moe.every = 2;
  const GptShape shape(4, 4, 16, 8, 40, moe);
  const ParameterLayout whole = ParameterLayout::for_gpt(shape);
  EXPECT_TRUE(whole.has("h.0.mlp.fc.weight"));
  EXPECT_FALSE(whole.has("h.1.mlp.fc.weight"));
  EXPECT_EQ(whole.at("h.1.moe.router.weight").shape, (std::vector<std::int64_t>{3, 16}));
  EXPECT_EQ(whole.at("h.3.moe.experts.2.proj.weight").shape, (std::vector<std::int64_t>{16, 64}));
  EXPECT_EQ(static_cast<std::int64_t>(whole.total() - whole.at("wpe").size),
            shape.params_excluding_positions());
  const std::int64_t expert = 8 * 16 * 16 + 5 * 16;
  EXPECT_EQ(shape.params_excluding_positions() - shape.active_params_excluding_positions(),
            2 * expert);  // one unused expert in each of the two MoE blocks
  std::vector<int> hits(whole.total(), 0);
  for (int r = 0; r < 2; ++r) {
    ModelPartition p = ModelPartition::whole(shape);
    p.tp_rank = r;
    p.tp_size = 2;
    const ParameterLayout part = ParameterLayout::for_partition(shape, p);
    EXPECT_EQ(part.at("h.1.moe.experts.0.fc.weight").shape, (std::vector<std::int64_t>{32, 16}));
    EXPECT_EQ(part.at("h.1.moe.experts.0.proj.weight").shape, (std::vector<std::int64_t>{16, 32}));
    count_logical_elements(whole, part, r, hits);
  }
  for (std::size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i], 1) << "element " << i;
}

// Where the MoE layer reads its tensors (MoeWeightOffsets, model/moe/moe_mlp.h) is where the
// layout puts them: GPT-2's experts, and SwiGLU experts without biases, split over tp and ep.
TEST(ModelPartition, ExpertOffsetsFollowTheLayout) {
  for (const GptShape& shape : {moe_shape(), llama_moe_shape()})
    for (int tp : {1, 2})
      for (int ep : {1, 2}) {
        SCOPED_TRACE("swiglu " + std::to_string(shape.expert_shape().swiglu) + " tp " +
                     std::to_string(tp) + " ep " + std::to_string(ep));
        ModelPartition p = ModelPartition::whole(shape);
        p.tp_size = tp;
        p.tp_rank = tp - 1;
        p.ep_size = ep;
        p.ep_rank = ep - 1;
        const ParameterLayout layout = ParameterLayout::for_partition(shape, p);
        const int E = shape.moe.experts, held = p.experts_held(E);
        const MoeWeightOffsets at = MoeWeightOffsets::of(shape.expert_shape(), tp, E, held);
        const std::size_t router = layout.at("h.1.moe.router.weight").offset;
        auto offset = [&](const std::string& name) { return layout.at(name).offset - router; };
        std::string e;
        for (int j = 0; j < held; ++j) {
          e = "h.1.moe.experts." + std::to_string(p.first_expert(E) + j) + ".";
          EXPECT_EQ(offset(e + "fc.weight"), at.fc_weight(j));
          EXPECT_EQ(layout.at(e + "fc.weight").size, at.Fc * at.C);
          EXPECT_EQ(offset(e + "proj.weight"), at.proj_weight(j));
          EXPECT_EQ(layout.at(e + "proj.weight").size, at.C * at.H);
          ASSERT_EQ(layout.has(e + "fc.bias"), at.has_bias);
          ASSERT_EQ(layout.has(e + "proj.bias"), at.has_bias);
          if (!at.has_bias) continue;
          EXPECT_EQ(offset(e + "fc.bias"), at.fc_bias(j));
          EXPECT_EQ(offset(e + "proj.bias"), at.proj_bias(j));
        }
        const TensorView& last = layout.at(e + (at.has_bias ? "proj.bias" : "proj.weight"));
        EXPECT_EQ(last.offset + last.size - router, at.total());
      }
}

}  // namespace
}  // namespace strata
