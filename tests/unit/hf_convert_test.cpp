// Hugging Face GPT-2 and Llama export and import (tools/hf/hf_convert.h): export then import
// gives back the parameters bitwise (Llama tied and untied, grouped-query and multi-head, with and
// without biases), the exported tensors have the family's names, orientation and splits, F16 and
// BF16 files widen exactly, every malformed file or model is a one-line error naming it, and an
// imported checkpoint is one that `train --resume` (or `--init`) fine-tunes from.
// (transformers' own reading of the exported folders is tests/python/hf_gpt2_test.cpp and
// hf_llama_test.cpp.)
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "data/tokenizer.h"
#include "model/parameter_layout.h"
#include "plan/config.h"
#include "tests/support/checkpoint_support.h"
#include "tests/support/test_support.h"
#include "tools/hf/hf_convert.h"
#include "tools/hf/hf_gpt2.h"
#include "tools/hf/hf_llama.h"
#include "tools/hf/safetensors.h"
#include "train/checkpoint/checkpoint.h"

namespace strata {
namespace {

using testing::error_of;
using testing::TempDir;
namespace fs = std::filesystem;
using testing::small_tokenizer;
using testing::write_strata_checkpoint;

// 300 real tokens, padded to 384 rows: export must drop 84 rows and import restore them as zeros.
const GptShape kShape{2, 2, 16, 8, 300};

// Parameters where every element differs (random, LayerNorms and biases included), padded vocab
// rows zero as in a trained checkpoint.
std::vector<float> random_params(const GptShape& shape, std::uint64_t seed) {
  const ParameterLayout layout = ParameterLayout::for_gpt(shape);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<float> params(layout.total());
  for (float& p : params) p = normal(rng);
  for (const char* table : {"wte", "lm_head.weight"}) {
    if (!layout.has(table)) continue;
    const TensorView& t = layout.at(table);
    std::fill(params.begin() + t.offset + std::size_t(shape.vocab_size) * shape.d_model,
              params.begin() + t.offset + t.size, 0.0f);
  }
  return params;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A GPT-2 folder holding `tensors` (F32) and config.json for kShape (or `config_json`).
void write_hf_folder(const std::string& dir, const std::vector<SafetensorsTensor>& tensors,
                     const std::string& config_json = hf_gpt2_config_json(kShape, -1)) {
  fs::create_directories(dir);
  write_file(dir + "/config.json", config_json);
  write_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}});
}

const SafetensorsTensor& named(const std::vector<SafetensorsTensor>& tensors,
                               const std::string& name) {
  for (const SafetensorsTensor& t : tensors)
    if (t.name == name) return t;
  throw std::runtime_error("no tensor " + name);
}

TEST(HfConvert, ExportThenImportGivesBackTheParametersBitwise) {
  TempDir dir("hf_roundtrip");
  const std::vector<float> params = random_params(kShape, 1);
  const Tokenizer tokenizer = small_tokenizer(kShape.vocab_size);
  const std::string original =
      write_strata_checkpoint(dir / "ckpt", kShape, params, tokenizer.serialized());

  const HfExport exported = export_hf(original, dir / "hf");
  EXPECT_TRUE(exported.tokenizer);
  EXPECT_EQ(testing::read_file(dir / "hf/tokenizer.model"), tokenizer.serialized());
  const HfImport imported = import_hf(dir / "hf", dir / "imported.h5", "");
  EXPECT_EQ(imported.weights_dtype, "F32");
  EXPECT_EQ(imported.tokenizer_path, dir / "hf/tokenizer.model");

  const ParameterLayout layout = ParameterLayout::for_gpt(kShape);
  const Checkpoint back = read_checkpoint(dir / "imported.h5", layout, true);
  ASSERT_EQ(back.params.size(), params.size());
  EXPECT_EQ(std::memcmp(back.params.data(), params.data(), params.size() * sizeof(float)), 0);
  // A fresh start for fine-tuning: step 0, no data consumed, zero moments; the tokenizer kept.
  EXPECT_EQ(back.state.step, 0);
  EXPECT_EQ(back.state.data_position, 0);
  EXPECT_EQ(back.adam_m, std::vector<float>(layout.total(), 0.0f));
  EXPECT_EQ(back.adam_v, std::vector<float>(layout.total(), 0.0f));
  EXPECT_EQ(back.tokenizer_model, tokenizer.serialized());
  const Config config = parse_config(back.config_yaml, "imported");
  EXPECT_EQ(config.model.vocab_size, 300);
  EXPECT_EQ(config.model.seq_len, 8);  // n_positions
}

TEST(HfConvert, ExportWritesGpt2NamesConv1dOrientationAndTheUnpaddedVocabulary) {
  TempDir dir("hf_layout");
  const std::vector<float> params = random_params(kShape, 2);
  export_hf(write_strata_checkpoint(dir / "ckpt", kShape, params), dir / "hf");
  EXPECT_FALSE(fs::exists(dir / "hf/tokenizer.model"));
  const SafetensorsFile file = read_safetensors(dir / "hf/model.safetensors");
  EXPECT_EQ(file.metadata, (std::vector<std::pair<std::string, std::string>>{{"format", "pt"}}));
  EXPECT_EQ(file.tensors.size(), 2u + 12u * 2 + 2);
  const ParameterLayout layout = ParameterLayout::for_gpt(kShape);
  const int C = kShape.d_model;

  const SafetensorsTensor& wte = named(file.tensors, "transformer.wte.weight");
  EXPECT_EQ(wte.shape, (std::vector<std::int64_t>{300, C}));
  // c_attn.weight [C, 3C] holds qkv.weight [3C, C] transposed: element [in j][out i] = [i][j].
  const SafetensorsTensor& c_attn = named(file.tensors, "transformer.h.1.attn.c_attn.weight");
  ASSERT_EQ(c_attn.shape, (std::vector<std::int64_t>{C, 3 * C}));
  const TensorView& qkv = layout.at("h.1.attn.qkv.weight");
  for (int i : {0, 5, C + 3, 3 * C - 1})
    for (int j : {0, 7, C - 1})
      EXPECT_EQ(c_attn.values[std::size_t(j) * 3 * C + i], params[qkv.offset + i * C + j]);
  EXPECT_EQ(named(file.tensors, "transformer.h.0.mlp.c_fc.weight").shape,
            (std::vector<std::int64_t>{C, 4 * C}));
  EXPECT_EQ(named(file.tensors, "transformer.h.0.mlp.c_proj.weight").shape,
            (std::vector<std::int64_t>{4 * C, C}));
  const SafetensorsTensor& ln_f = named(file.tensors, "transformer.ln_f.bias");
  EXPECT_EQ(ln_f.values.front(), params[layout.at("lnf.bias").offset]);
  const std::string config = testing::read_file(dir / "hf/config.json");
  for (const char* field :
       {"\"n_layer\": 2", "\"n_head\": 2", "\"n_embd\": 16", "\"n_positions\": 8",
        "\"vocab_size\": 300", "\"layer_norm_epsilon\": 1e-05",
        "\"activation_function\": \"gelu_new\""})
    EXPECT_NE(config.find(field), std::string::npos) << field << " in " << config;
}

TEST(HfConvert, ImportTakesNamesWithoutPrefixIgnoresMaskBuffersAndATiedHead) {
  TempDir dir("hf_names");
  const std::vector<float> params = random_params(kShape, 3);
  std::vector<SafetensorsTensor> tensors = hf_gpt2_tensors(kShape, params);
  for (SafetensorsTensor& t : tensors) t.name = t.name.substr(std::strlen("transformer."));
  tensors.push_back(
      {"lm_head.weight", named(tensors, "wte.weight").shape, named(tensors, "wte.weight").values});
  tensors.push_back({"h.0.attn.bias", {1, 1, 8, 8}, std::vector<float>(64, 1.0f)});
  tensors.push_back({"h.1.attn.masked_bias", {}, {-1e4f}});
  write_hf_folder(dir / "hf", tensors);
  import_hf(dir / "hf", dir / "imported.h5", "");
  const Checkpoint back =
      read_checkpoint(dir / "imported.h5", ParameterLayout::for_gpt(kShape), false);
  EXPECT_EQ(back.params, params);
  EXPECT_TRUE(back.tokenizer_model.empty());
}

// Bit patterns of F16 / BF16 values and what they widen to.
TEST(HfConvert, HalfPrecisionTensorsWidenExactly) {
  EXPECT_EQ(float_from_f16(0x3C00), 1.0f);
  EXPECT_EQ(float_from_f16(0xC000), -2.0f);
  EXPECT_EQ(float_from_f16(0x7BFF), 65504.0f);
  EXPECT_EQ(float_from_f16(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(float_from_f16(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_TRUE(std::isinf(float_from_f16(0xFC00)) && float_from_f16(0xFC00) < 0);
  EXPECT_TRUE(std::isnan(float_from_f16(0x7E00)));
  EXPECT_EQ(float_from_bf16(0x3F80), 1.0f);
  EXPECT_EQ(float_from_bf16(0xC0A0), -5.0f);

  TempDir dir("hf_half");
  // One F16 tensor [2] and one BF16 tensor [1, 2], written byte by byte.
  const std::string header = R"({"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"BF16","shape":[1,2],"data_offsets":[4,8]}})";
  std::string bytes(8, '\0');
  const std::uint64_t length = header.size();
  std::memcpy(bytes.data(), &length, 8);
  bytes += header;
  for (const std::uint16_t bits : {0x3C00, 0x3555, 0x3F80, 0x4049}) {
    bytes.push_back(static_cast<char>(bits & 0xff));
    bytes.push_back(static_cast<char>(bits >> 8));
  }
  write_file(dir / "half.safetensors", bytes);
  const SafetensorsFile file = read_safetensors(dir / "half.safetensors");
  ASSERT_EQ(file.tensors.size(), 2u);
  EXPECT_EQ(file.tensors[0].dtype, "F16");
  EXPECT_EQ(file.tensors[0].values, (std::vector<float>{1.0f, 0x1.554p-2f}));
  EXPECT_EQ(file.tensors[1].dtype, "BF16");
  EXPECT_EQ(file.tensors[1].shape, (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(file.tensors[1].values, (std::vector<float>{1.0f, 0x1.92p1f}));
}

// A safetensors file of one F32 tensor with this header text and `data_bytes` bytes of data.
std::string safetensors_bytes(const std::string& header, std::size_t data_bytes) {
  std::string bytes(8, '\0');
  const std::uint64_t length = header.size();
  std::memcpy(bytes.data(), &length, 8);
  return bytes + header + std::string(data_bytes, '\0');
}

TEST(HfConvert, MalformedSafetensorsFilesAreErrorsNamingFileAndTensor) {
  TempDir dir("hf_bad_file");
  const std::string path = dir / "bad.safetensors";
  auto error = [&](const std::string& bytes) {
    write_file(path, bytes);
    return error_of([&] { read_safetensors(path); });
  };
  const std::string entry = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  EXPECT_EQ(error(safetensors_bytes(entry, 16)), "");
  EXPECT_EQ(error("abc"),
            path + ": is 3 bytes, too short for a safetensors file (8-byte header length)");
  std::string huge = safetensors_bytes(entry, 16);
  huge[5] = 1;  // header length ~2^40
  EXPECT_TRUE(error(huge).starts_with(path + ": header length 1099511627"));
  EXPECT_TRUE(
      error(huge).ends_with(" is more than the 73 bytes that follow it (not a "
                            "safetensors file, or truncated)"));
  EXPECT_NE(error(safetensors_bytes("{\"w\": [1,", 0)).find(path + ": header is not valid JSON"),
            std::string::npos);
  EXPECT_EQ(error(safetensors_bytes(entry, 12)),
            path +
                ": tensor 'w': data_offsets [0, 16] run past the data (12 bytes after the "
                "header; is the file truncated?)");
  EXPECT_EQ(error(safetensors_bytes(entry, 20)),
            path + ": the tensors hold 16 bytes of data but the file has 20 after the header");
  EXPECT_EQ(
      error(safetensors_bytes(R"({"w":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", 16)),
      path + ": tensor 'w': dtype I64 is not supported (F32, F16 or BF16)");
  EXPECT_EQ(
      error(safetensors_bytes(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", 16)),
      path + ": tensor 'w': data_offsets [0, 16] hold 16 bytes but F32 shape needs 12");
  EXPECT_EQ(error(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                    12)),
            path +
                ": tensor 'b' starts at data byte 4 but the tensors before overlap it (they "
                "end at 8)");
  EXPECT_EQ(error(safetensors_bytes(R"({"w":{"dtype":"F32","shape":[2]}})", 8)),
            path + ": tensor 'w': header entry has no \"data_offsets\"");
}

TEST(HfConvert, ImportRejectsModelsItCannotHoldWithOneLineErrors) {
  TempDir dir("hf_bad_model");
  const std::vector<SafetensorsTensor> good = hf_gpt2_tensors(kShape, random_params(kShape, 4));
  int attempt = 0;
  auto import_error = [&](const std::vector<SafetensorsTensor>& tensors,
                          const std::string& config_json = hf_gpt2_config_json(kShape, -1),
                          const std::string& tokenizer = "") {
    const std::string folder = dir / ("hf" + std::to_string(++attempt));
    write_hf_folder(folder, tensors, config_json);
    return error_of([&] { import_hf(folder, folder + ".h5", tokenizer); });
  };
  EXPECT_EQ(import_error(good), "");
  EXPECT_FALSE(fs::exists(dir / ".import_hf_" + std::to_string(::getpid()) + ".tmp"));

  std::vector<SafetensorsTensor> missing = good;
  missing.erase(missing.begin() + 5);
  EXPECT_EQ(import_error(missing),
            dir / "hf2/model.safetensors: missing tensor '" + good[5].name + "'");
  std::vector<SafetensorsTensor> extra = good;
  extra.push_back({"transformer.h.2.ln_1.weight", {16}, std::vector<float>(16)});
  EXPECT_EQ(import_error(extra), dir /
                                     "hf3/model.safetensors: unknown tensor "
                                     "'transformer.h.2.ln_1.weight' (not part of a GPT-2 model "
                                     "with 2 layers)");
  std::vector<SafetensorsTensor> transposed = good;
  for (SafetensorsTensor& t : transposed)
    if (t.name == "transformer.h.0.mlp.c_fc.weight") t.shape = {64, 16};
  EXPECT_EQ(import_error(transposed), dir /
                                          "hf4/model.safetensors: tensor "
                                          "'transformer.h.0.mlp.c_fc.weight' has shape [64, "
                                          "16], expected [16, 64]");
  std::vector<SafetensorsTensor> untied = good;
  untied.push_back(named(good, "transformer.wte.weight"));
  untied.back().name = "lm_head.weight";
  untied.back().values[3] += 1.0f;
  EXPECT_NE(import_error(untied).find("lm_head.weight differs from the token embedding"),
            std::string::npos);

  std::string relu = hf_gpt2_config_json(kShape, -1);
  relu.replace(relu.find("gelu_new"), 8, "relu");
  const std::string activation = import_error(good, relu);
  EXPECT_TRUE(activation.starts_with(dir / "hf6/config.json: line 1, column ")) << activation;
  EXPECT_TRUE(
      activation.ends_with(": \"activation_function\" must be the tanh GELU "
                           "(\"gelu_new\" or \"gelu_pytorch_tanh\"), as Strata's"))
      << activation;
  EXPECT_EQ(import_error(good, R"({"n_layer": 2, "n_head": 2, "n_embd": 16, "vocab_size": 300})"),
            dir / "hf7/config.json: no \"n_positions\" (a GPT-2 config.json has it)");

  // The tokenizer must have config.json's vocabulary: the message names both sizes.
  const std::string tokenizer = dir / "tokenizer.model";
  write_file(tokenizer, small_tokenizer(320).serialized());
  EXPECT_EQ(import_error(good, hf_gpt2_config_json(kShape, -1), tokenizer),
            "tokenizer '" + tokenizer + "' has a vocabulary of 320 tokens but " +
                (dir / "hf8/config.json") + " has vocab_size 300");
  EXPECT_FALSE(fs::exists(dir / "hf8.h5"));
}

// A Llama-style shape: RMSNorm, SwiGLU, RoPE, 300 tokens padded to 384 rows (also lm_head's when
// untied), head size 4; kv_heads 0 is multi-head (the fused qkv), 2 grouped-query (q, k, v).
GptShape llama_shape(int kv_heads, bool bias, bool tied) {
  GptArchitecture arch;
  arch.norm = Norm::rmsnorm;
  arch.mlp = MlpKind::swiglu;
  arch.position = Position::rope;
  arch.d_ff = 40;
  arch.kv_heads = kv_heads;
  arch.bias = bias;
  arch.tie_embeddings = tied;
  return GptShape{2, 4, 16, 8, 300, MoeConfig{}, arch};
}

TEST(HfConvert, LlamaExportThenImportGivesBackTheParametersAndTheModelBitwise) {
  TempDir dir("hf_llama_roundtrip");
  int index = 0;
  for (const int kv_heads : {0, 2})
    for (const bool bias : {false, true})
      for (const bool tied : {false, true}) {
        const std::string name = "case" + std::to_string(++index);
        SCOPED_TRACE(name + ": kv_heads " + std::to_string(kv_heads) + ", bias " +
                     std::to_string(bias) + ", tied " + std::to_string(tied));
        GptShape shape = llama_shape(kv_heads, bias, tied);
        if (index == 3) {  // numbers that round-trip through config.json in shortest form
          shape.arch.norm_eps = 1e-6;
          shape.arch.rope_theta = 500000.0;
        }
        const std::vector<float> params = random_params(shape, 10 + index);
        const std::string original = write_strata_checkpoint(
            dir / (name + "_ckpt"), shape, params, small_tokenizer(shape.vocab_size).serialized());
        const HfExport exported = export_hf(original, dir / (name + "_hf"));
        EXPECT_EQ(exported.family, "Llama");
        EXPECT_EQ(exported.model_class, "LlamaForCausalLM");
        const HfImport imported = import_hf(dir / (name + "_hf"), dir / (name + ".h5"), "");
        EXPECT_EQ(imported.family, "Llama");
        EXPECT_EQ(imported.shape.arch, shape.arch);

        const ParameterLayout layout = ParameterLayout::for_gpt(shape);
        const Checkpoint back = read_checkpoint(dir / (name + ".h5"), layout, true);
        ASSERT_EQ(back.params.size(), params.size());
        EXPECT_EQ(std::memcmp(back.params.data(), params.data(), params.size() * sizeof(float)), 0);
        // The model keys come back as they were: `train --resume` takes the imported checkpoint.
        const Config config = parse_config(back.config_yaml, "imported");
        EXPECT_EQ(gpt_shape_of(config.model).arch, shape.arch);
        EXPECT_EQ(config.model.n_head, 4);
        EXPECT_EQ(config.model.seq_len, 8);  // max_position_embeddings
      }
}

TEST(HfConvert, LlamaExportSplitsTheFusedTensorsAndDropsThePadding) {
  TempDir dir("hf_llama_layout");
  const int C = 16, F = 40, hs = 4;
  // Grouped-query, untied, no biases: Llama's own block.
  const GptShape gqa = llama_shape(2, false, false);
  const std::vector<float> params = random_params(gqa, 20);
  export_hf(write_strata_checkpoint(dir / "ckpt", gqa, params), dir / "hf");
  const SafetensorsFile file = read_safetensors(dir / "hf/model.safetensors");
  EXPECT_EQ(file.tensors.size(), 1u + 2 * 9 + 2);  // embedding, 2 layers of 9, norm, lm_head
  const ParameterLayout layout = ParameterLayout::for_gpt(gqa);
  // Tensor `hf_name` holds `rows` rows of Strata tensor `name` from `row_begin`, as they are.
  auto holds = [&](const std::vector<SafetensorsTensor>& tensors, const std::vector<float>& values,
                   const ParameterLayout& in, const std::string& hf_name, const std::string& name,
                   std::int64_t row_begin, std::int64_t rows) {
    SCOPED_TRACE(hf_name);
    const SafetensorsTensor& t = named(tensors, hf_name);
    const TensorView& v = in.at(name);
    const std::int64_t row = v.shape.size() == 2 ? v.shape[1] : 1;
    std::vector<std::int64_t> shape = v.shape;
    shape[0] = rows;
    EXPECT_EQ(t.shape, shape);
    const float* first = values.data() + v.offset + row_begin * row;
    EXPECT_EQ(t.values, std::vector<float>(first, first + rows * row));
  };
  holds(file.tensors, params, layout, "model.embed_tokens.weight", "wte", 0, 300);
  holds(file.tensors, params, layout, "lm_head.weight", "lm_head.weight", 0, 300);
  holds(file.tensors, params, layout, "model.norm.weight", "lnf.weight", 0, C);
  holds(file.tensors, params, layout, "model.layers.1.input_layernorm.weight", "h.1.ln1.weight", 0,
        C);
  holds(file.tensors, params, layout, "model.layers.1.post_attention_layernorm.weight",
        "h.1.ln2.weight", 0, C);
  holds(file.tensors, params, layout, "model.layers.1.self_attn.q_proj.weight", "h.1.attn.q.weight",
        0, C);
  holds(file.tensors, params, layout, "model.layers.1.self_attn.k_proj.weight", "h.1.attn.k.weight",
        0, 2 * hs);
  holds(file.tensors, params, layout, "model.layers.0.self_attn.v_proj.weight", "h.0.attn.v.weight",
        0, 2 * hs);
  holds(file.tensors, params, layout, "model.layers.0.self_attn.o_proj.weight",
        "h.0.attn.proj.weight", 0, C);
  holds(file.tensors, params, layout, "model.layers.0.mlp.gate_proj.weight", "h.0.mlp.fc.weight", 0,
        F);
  holds(file.tensors, params, layout, "model.layers.0.mlp.up_proj.weight", "h.0.mlp.fc.weight", F,
        F);
  holds(file.tensors, params, layout, "model.layers.0.mlp.down_proj.weight", "h.0.mlp.proj.weight",
        0, C);
  const std::string config = testing::read_file(dir / "hf/config.json");
  for (const char* field :
       {"\"model_type\": \"llama\"", "\"architectures\": [\"LlamaForCausalLM\"]",
        "\"vocab_size\": 300", "\"hidden_size\": 16", "\"intermediate_size\": 40",
        "\"num_hidden_layers\": 2", "\"num_attention_heads\": 4", "\"num_key_value_heads\": 2",
        "\"head_dim\": 4", "\"max_position_embeddings\": 8", "\"rms_norm_eps\": 1e-05",
        "\"rope_theta\": 10000.0", "\"hidden_act\": \"silu\"", "\"tie_word_embeddings\": false",
        "\"attention_bias\": false", "\"mlp_bias\": false"})
    EXPECT_NE(config.find(field), std::string::npos) << field << " in " << config;

  // Multi-head with biases: the fused qkv splits into thirds, its bias too; tied: no lm_head.
  const GptShape mha = llama_shape(0, true, true);
  const std::vector<float> mha_params = random_params(mha, 21);
  const std::vector<SafetensorsTensor> tensors = hf_llama_tensors(mha, mha_params);
  const ParameterLayout mha_layout = ParameterLayout::for_gpt(mha);
  EXPECT_EQ(tensors.size(), 1u + 2 * 16 + 1);  // 9 + the biases of q, k, v, o, gate, up, down
  EXPECT_THROW(named(tensors, "lm_head.weight"), std::runtime_error);
  for (const auto& [part, third] : {std::pair{"q", 0}, {"k", 1}, {"v", 2}}) {
    holds(tensors, mha_params, mha_layout,
          "model.layers.1.self_attn." + std::string(part) + "_proj.weight", "h.1.attn.qkv.weight",
          third * C, C);
    holds(tensors, mha_params, mha_layout,
          "model.layers.1.self_attn." + std::string(part) + "_proj.bias", "h.1.attn.qkv.bias",
          third * C, C);
  }
  holds(tensors, mha_params, mha_layout, "model.layers.1.mlp.up_proj.bias", "h.1.mlp.fc.bias", F,
        F);
  holds(tensors, mha_params, mha_layout, "model.layers.1.mlp.down_proj.bias", "h.1.mlp.proj.bias",
        0, C);
  EXPECT_NE(hf_llama_config_json(mha, 2).find("\"num_key_value_heads\": 4"), std::string::npos);
  EXPECT_NE(hf_llama_config_json(mha, 2).find("\"mlp_bias\": true"), std::string::npos);
  EXPECT_NE(hf_llama_config_json(mha, 2).find("\"bos_token_id\": 2, \"eos_token_id\": 2"),
            std::string::npos);
}

TEST(HfConvert, LlamaImportTakesLlamaModelNamesAndIgnoresBuffersAndATiedHead) {
  TempDir dir("hf_llama_names");
  const GptShape shape = llama_shape(2, false, true);
  const std::vector<float> params = random_params(shape, 22);
  std::vector<SafetensorsTensor> tensors = hf_llama_tensors(shape, params);
  for (SafetensorsTensor& t : tensors) t.name = t.name.substr(std::strlen("model."));
  tensors.push_back(named(tensors, "embed_tokens.weight"));
  tensors.back().name = "lm_head.weight";
  tensors.push_back({"layers.0.self_attn.rotary_emb.inv_freq", {2}, {1.0f, 0.01f}});
  write_hf_folder(dir / "hf", tensors, hf_llama_config_json(shape, -1));
  EXPECT_EQ(import_hf(dir / "hf", dir / "imported.h5", "").family, "Llama");
  EXPECT_EQ(read_checkpoint(dir / "imported.h5", ParameterLayout::for_gpt(shape), false).params,
            params);

  tensors.back() = named(tensors, "lm_head.weight");
  tensors.back().name = "model.lm_head.weight";
  tensors[tensors.size() - 2].values[5] += 1.0f;  // the stored head no longer the embedding
  write_hf_folder(dir / "untied", tensors, hf_llama_config_json(shape, -1));
  EXPECT_EQ(error_of([&] { import_hf(dir / "untied", dir / "untied.h5", ""); }),
            dir /
                "untied/model.safetensors: unknown tensor 'model.lm_head.weight' (not part of a "
                "Llama model with 2 layers)");
  tensors.pop_back();
  write_hf_folder(dir / "untied2", tensors, hf_llama_config_json(shape, -1));
  EXPECT_EQ(error_of([&] { import_hf(dir / "untied2", dir / "untied2.h5", ""); }),
            dir /
                "untied2/model.safetensors: lm_head.weight differs from the token embedding "
                "(but config.json's tie_word_embeddings is true)");
}

// transformers' LlamaConfig as config.json: its fields, as version 5 writes them.
std::string llama_config(const std::string& extra = "") {
  return R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 16,
  "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4,
  "num_key_value_heads": 2, "max_position_embeddings": 8, "vocab_size": 300,
  "rms_norm_eps": 1e-06, "hidden_act": "silu", "pretraining_tp": 1, "use_cache": true,
  "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"})" +
         extra + "}";
}

TEST(HfConvert, LlamaConfigsStrataCannotComputeAreErrorsNamingTheField) {
  const GptShape shape = parse_hf_llama_config(llama_config(), "c.json");
  EXPECT_EQ(shape.arch.rope_theta, 500000.0);
  EXPECT_EQ(shape.arch.norm_eps, 1e-6);
  EXPECT_EQ(shape.arch.kv_heads, 2);
  EXPECT_EQ(shape.ffn_width(), 40);
  EXPECT_FALSE(shape.arch.tie_embeddings);  // LlamaConfig's default
  EXPECT_FALSE(shape.arch.bias);
  // Multi-head is model.kv_heads 0, and Llama's own width rule model.d_ff 0.
  const GptShape mha = parse_hf_llama_config(R"({"model_type": "llama", "hidden_size": 384,
      "intermediate_size": 1024, "num_hidden_layers": 1, "num_attention_heads": 6,
      "num_key_value_heads": 6, "max_position_embeddings": 8, "vocab_size": 300,
      "rope_theta": 10000.0, "rope_scaling": null})",
                                             "c.json");
  EXPECT_EQ(mha.arch.kv_heads, 0);
  EXPECT_EQ(mha.arch.d_ff, 0);
  EXPECT_EQ(mha.ffn_width(), 1024);

  auto error = [](const std::string& extra) {
    return error_of([&] { parse_hf_llama_config(llama_config(extra), "c.json"); });
  };
  auto ends = [](const std::string& text, const std::string& end) {
    return text.starts_with("c.json: line ") && text.ends_with(end);
  };
  EXPECT_TRUE(ends(error(R"(, "hidden_act": "gelu")"),
                   ": \"hidden_act\" is \"gelu\": Strata's SwiGLU gates with \"silu\""))
      << error(R"(, "hidden_act": "gelu")");
  EXPECT_TRUE(ends(error(R"(, "head_dim": 8)"),
                   ": \"head_dim\" is 8, not hidden_size / num_attention_heads = 4 (Strata's "
                   "heads are d_model / n_head wide)"));
  EXPECT_TRUE(ends(error(R"(, "rope_scaling": {"rope_type": "llama3", "factor": 8.0})"),
                   ": \"rope_scaling\" must be null: Strata's RoPE has no scaling"));
  EXPECT_TRUE(ends(error(R"(, "rope_parameters": {"rope_theta": 1e4, "rope_type": "yarn"})"),
                   ": \"rope_parameters.rope_type\" is not Strata's RoPE (rope_type \"default\" "
                   "and rope_theta only)"));
  EXPECT_TRUE(ends(error(R"(, "num_key_value_heads": 3)"),
                   ": \"num_key_value_heads\" (3) must divide num_attention_heads (4)"));
  EXPECT_TRUE(ends(error(R"(, "attention_bias": true)"),
                   ": \"attention_bias\" differs from the other of attention_bias and mlp_bias: "
                   "Strata's model.bias is one switch for every linear layer"));
  EXPECT_TRUE(ends(error(R"(, "partial_rotary_factor": 0.5)"),
                   ": \"partial_rotary_factor\" must be 1: Strata turns every channel"));
  EXPECT_EQ(error_of([] {
              parse_hf_llama_config(R"({"model_type": "llama", "hidden_size": 16})", "c.json");
            }),
            "c.json: no \"num_hidden_layers\" (a Llama config.json has it)");

  // import-hf picks the family by model_type.
  TempDir dir("hf_llama_type");
  std::string mistral = llama_config();
  mistral.replace(mistral.find("\"llama\""), 7, "\"mistral\"");
  write_hf_folder(dir / "hf", {}, mistral);
  EXPECT_EQ(error_of([&] { import_hf(dir / "hf", dir / "m.h5", ""); }),
            dir /
                "hf/config.json: model_type \"mistral\" is not one import-hf reads (\"gpt2\": "
                "GPT2LMHeadModel, \"llama\": LlamaForCausalLM)");
}

TEST(HfConvert, ExportRefusesABlockNoTransformersClassComputes) {
  TempDir dir("hf_mix");
  GptShape rms_gelu{2, 4, 16, 8, 300};
  rms_gelu.arch.norm = Norm::rmsnorm;
  rms_gelu.arch.kv_heads = 2;
  const std::string checkpoint =
      write_strata_checkpoint(dir / "ckpt", rms_gelu, random_params(rms_gelu, 23));
  EXPECT_EQ(error_of([&] { export_hf(checkpoint, dir / "hf"); }),
            "checkpoint '" + checkpoint +
                "' is a model of model.norm rmsnorm, model.kv_heads 2, a mix that no "
                "transformers class computes: export-hf writes GPT2LMHeadModel for GPT-2's block "
                "(the model keys' defaults) and LlamaForCausalLM for model.norm rmsnorm, "
                "model.mlp swiglu and model.position rope");

  // GPT-2's block with another LayerNorm eps and MLP width is still GPT-2 (layer_norm_epsilon,
  // n_inner), and comes back as it was.
  GptShape gpt2{2, 2, 16, 8, 300};
  gpt2.arch.norm_eps = 1e-6;
  gpt2.arch.d_ff = 24;
  const std::vector<float> params = random_params(gpt2, 24);
  const HfExport exported =
      export_hf(write_strata_checkpoint(dir / "gpt2", gpt2, params), dir / "gpt2_hf");
  EXPECT_EQ(exported.model_class, "GPT2LMHeadModel");
  const std::string config = testing::read_file(dir / "gpt2_hf/config.json");
  EXPECT_NE(config.find("\"n_inner\": 24, \"layer_norm_epsilon\": 1e-06"), std::string::npos)
      << config;
  EXPECT_EQ(import_hf(dir / "gpt2_hf", dir / "gpt2.h5", "").shape.arch, gpt2.arch);
  EXPECT_EQ(read_checkpoint(dir / "gpt2.h5", ParameterLayout::for_gpt(gpt2), false).params, params);
}

// The tools end to end: a run trained 30 steps, exported and imported with `ckpt`, is resumed
// by `train --resume` (another run, the same model) from the imported weights, `train --init`
// trains alike, and a run of another model shape is refused.
// A DiLoCo checkpoint's export once wrote worker 0's weights without saying whose they were.
TEST(HfConvert, ADilocoCheckpointsExportSaysWhoseWeightsItWrites) {
  TempDir dir("hf_diloco");
  testing::write_synthetic_dataset(dir / "data", 64, 60000);
  const std::string config = dir / "diloco.yaml";
  std::ofstream(config) << "run: {name: diloco, dir: " << dir.str() << "/runs, seed: 5}\n"
                        << "model: {n_layer: 1, n_head: 2, d_model: 32, seq_len: 16, "
                           "vocab_size: 64}\n"
                        << "data: {train: " << dir.str() << "/data/train}\n"
                        << "train: {steps: 4, global_batch: 4, micro_batch: 2, eval_every: 0, "
                           "log_every: 1}\n"
                        << "checkpoint: {every: 0, keep: 0}\n"
                        << "diloco: {enabled: true, workers: 2, inner_steps: 2}\n"
                        << "device: cpu\n";
  const auto trained = testing::run_command("OMP_NUM_THREADS=1 " + testing::mpirun(2) +
                                            testing::bin("train") + " " + config);
  ASSERT_EQ(trained.status, 0) << trained.output;
  const auto exported =
      testing::run_command(testing::bin("ckpt") + " export-hf " + dir.str() +
                           "/runs/diloco/checkpoints/step_00000004.h5 " + (dir / "hf"));
  EXPECT_EQ(exported.status, 0) << exported.output;
  EXPECT_NE(exported.output.find("note: a DiLoCo checkpoint of 2 workers: the weights written are "
                                 "worker 0's"),
            std::string::npos)
      << exported.output;
}

TEST(HfConvert, TrainResumesFromAnImportedCheckpoint) {
  TempDir dir("hf_resume");
  testing::write_synthetic_dataset(dir / "data", 64, 60000);
  auto config = [&](const std::string& name) {
    const std::string path = dir / (name + ".yaml");
    std::ofstream(path) << "run: {name: " << name << ", dir: " << dir.str() << "/runs, seed: 5}\n"
                        << "model: {n_layer: 2, n_head: 2, d_model: 32, seq_len: 16, "
                           "vocab_size: 64}\n"
                        << "data: {train: " << dir.str() << "/data/train}\n"
                        << "optimizer: {lr: 3.0e-3, min_lr: 3.0e-4, warmup_steps: 4}\n"
                        << "train: {steps: 30, global_batch: 8, micro_batch: 4, eval_every: 0, "
                           "log_every: 1}\n"
                        << "checkpoint: {every: 0, keep: 0}\n"
                        << "device: cpu\n";
    return path;
  };
  const auto trained = testing::run_command(testing::bin("train") + " " + config("base"));
  ASSERT_EQ(trained.status, 0) << trained.output;
  const std::string base = dir / "runs/base/checkpoints/step_00000030.h5";
  const std::string ckpt = testing::bin("ckpt");
  const auto exported = testing::run_command(ckpt + " export-hf " + base + " " + (dir / "hf"));
  ASSERT_EQ(exported.status, 0) << exported.output;
  // A second export into the same folder once replaced its files without a word.
  const std::string weights = testing::read_file(dir / "hf/model.safetensors");
  const auto again = testing::run_command(ckpt + " export-hf " + base + " " + (dir / "hf"));
  EXPECT_EQ(again.status, 1) << again.output;
  EXPECT_NE(again.output.find("error: '" + (dir / "hf") +
                              "' is not empty; choose another folder, "
                              "or pass --force"),
            std::string::npos)
      << again.output;
  EXPECT_EQ(testing::read_file(dir / "hf/model.safetensors"), weights);
  const auto forced =
      testing::run_command(ckpt + " export-hf " + base + " " + (dir / "hf") + " --force");
  EXPECT_EQ(forced.status, 0) << forced.output;
  const std::string imported = dir / "imported.h5";
  const auto import = testing::run_command(ckpt + " import-hf " + (dir / "hf") + " " + imported);
  ASSERT_EQ(import.status, 0) << import.output;
  EXPECT_NE(import.output.find("warning: no tokenizer"), std::string::npos) << import.output;
  const ParameterLayout layout = ParameterLayout::for_gpt(GptShape{2, 2, 32, 16, 64});
  EXPECT_EQ(read_checkpoint(imported, layout, false).params,
            read_checkpoint(base, layout, false).params);

  const auto tuned = testing::run_command(testing::bin("train") + " " + config("tuned") +
                                          " --set train.steps=2 --resume " + imported);
  ASSERT_EQ(tuned.status, 0) << tuned.output;
  EXPECT_NE(tuned.output.find("resumed from " + imported + " at step 0"), std::string::npos);
  EXPECT_TRUE(fs::exists(dir / "runs/tuned/checkpoints/step_00000002.h5"));
  // Its first loss is the trained model's, not a fresh initialisation's (ln 64 ≈ 4.16).
  const std::vector<double> base_loss =
      testing::metric_values(dir / "runs/base/metrics.jsonl", "loss");
  const std::vector<double> tuned_loss =
      testing::metric_values(dir / "runs/tuned/metrics.jsonl", "loss");
  ASSERT_EQ(tuned_loss.size(), 2u);
  EXPECT_LT(tuned_loss[0], base_loss.front() - 0.5);
  EXPECT_NEAR(tuned_loss[0], base_loss.back(), 0.3);
  // An imported checkpoint is a plain one at step 0 with zero moments: --init, which takes its
  // weights alone, trains exactly as that resume does.
  const auto init = testing::run_command(testing::bin("train") + " " + config("init") +
                                         " --set train.steps=2 --init " + imported);
  ASSERT_EQ(init.status, 0) << init.output;
  EXPECT_NE(init.output.find("initialised from " + imported + " (step 0 of its run)"),
            std::string::npos)
      << init.output;
  EXPECT_EQ(testing::metric_values(dir / "runs/init/metrics.jsonl", "loss"), tuned_loss);

  const auto other = testing::run_command(testing::bin("train") + " " + config("other") +
                                          " --set model.d_model=64 --resume " + imported);
  EXPECT_NE(other.status, 0);
  EXPECT_NE(other.output.find("error: --resume: checkpoint '" + imported +
                              "' holds a model of n_layer 2, n_head 2, d_model 32, seq_len 16, "
                              "vocab_size 64 but this run's model is n_layer 2, n_head 2, "
                              "d_model 64, seq_len 16, vocab_size 64"),
            std::string::npos)
      << other.output;
}

}  // namespace
}  // namespace strata
