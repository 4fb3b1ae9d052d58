#include "tools/hf/hf_convert.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/tokenizer.h"
#include "model/core/error.h"
#include "model/parameter_layout.h"
#include "plan/config.h"
#include "tools/hf/hf_config_json.h"
#include "tools/hf/hf_gpt2.h"
#include "tools/hf/hf_llama.h"
#include "tools/hf/safetensors.h"
#include "train/checkpoint/checkpoint.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read '", path, "'");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) fail("cannot write '", path, "'");
}

// A Hugging Face model family: its mapping (tools/hf/hf_gpt2.h, hf_llama.h) and names.
struct HfFamily {
  const char* name;        // "GPT-2"
  const char* model_type;  // config.json's
  const char* model_class;
  std::vector<SafetensorsTensor> (*tensors)(const GptShape&, const std::vector<float>&);
  std::vector<float> (*params)(const GptShape&, const std::vector<SafetensorsTensor>&,
                               const std::string&);
  std::string (*config_json)(const GptShape&, int);
  GptShape (*parse_config)(const std::string&, const std::string&);
};

const HfFamily kGpt2{"GPT-2",
                     "gpt2",
                     "GPT2LMHeadModel",
                     hf_gpt2_tensors,
                     strata_params_from_hf_gpt2,
                     hf_gpt2_config_json,
                     parse_hf_gpt2_config};
const HfFamily kLlama{"Llama",
                      "llama",
                      "LlamaForCausalLM",
                      hf_llama_tensors,
                      strata_params_from_hf_llama,
                      hf_llama_config_json,
                      parse_hf_llama_config};

// The family that computes the model of `checkpoint`; an error naming the model keys of a mix
// that neither does.
const HfFamily& family_of_model(const GptShape& shape, const std::string& checkpoint) {
  if (shape.moe.enabled())
    fail("checkpoint '", checkpoint, "' is a mixture-of-experts model (model.moe.experts ",
         shape.moe.experts,
         "): GPT-2 has no experts and neither has Llama, so it has no Hugging Face form");
  if (hf_gpt2_holds(shape)) return kGpt2;
  if (hf_llama_holds(shape)) return kLlama;
  // The block keys that differ from GPT-2's.
  const GptArchitecture& a = shape.arch;
  const GptArchitecture gpt2;
  std::string keys;
  auto key = [&](bool differs, const std::string& text) {
    if (differs) keys += (keys.empty() ? "" : ", ") + text;
  };
  key(a.norm != gpt2.norm, "model.norm " + std::string(kNormChoices.word(a.norm)));
  key(a.mlp != gpt2.mlp, "model.mlp " + std::string(kMlpChoices.word(a.mlp)));
  key(a.position != gpt2.position,
      "model.position " + std::string(kPositionChoices.word(a.position)));
  key(shape.grouped_query(), "model.kv_heads " + std::to_string(a.kv_heads));
  key(!a.bias, "model.bias false");
  key(!a.tie_embeddings, "model.tie_embeddings false");
  fail("checkpoint '", checkpoint, "' is a model of ", keys,
       ", a mix that no transformers class computes: export-hf writes GPT2LMHeadModel for "
       "GPT-2's block (the model keys' defaults) and LlamaForCausalLM for model.norm rmsnorm, "
       "model.mlp swiglu and model.position rope");
}

// The family config.json's model_type names ("gpt2" when it has none, as before import-hf read
// other families).
const HfFamily& family_of_config(const std::string& json_text, const std::string& origin) {
  const std::string type = hf_model_type(json_text, origin);
  if (type.empty() || type == kGpt2.model_type) return kGpt2;
  if (type == kLlama.model_type) return kLlama;
  fail(origin, ": model_type \"", type,
       "\" is not one import-hf reads (\"gpt2\": GPT2LMHeadModel, \"llama\": LlamaForCausalLM)");
}

}  // namespace

HfExport export_hf(const std::string& checkpoint_path, const std::string& out_dir) {
  const std::string yaml = read_checkpoint_config(checkpoint_path);
  Config config;
  try {
    config = parse_config(yaml, checkpoint_path + " (config attribute)");
  } catch (const Error& e) {
    fail("checkpoint '", checkpoint_path, "' holds an invalid config: ", e.what());
  }
  const GptShape shape = gpt_shape_of(config.model);
  const HfFamily& family = family_of_model(shape, checkpoint_path);
  HfExport result{shape, family.name, family.model_class, false,
                  config.diloco.enabled ? config.diloco.workers : 0};
  const Checkpoint ckpt =
      read_checkpoint(checkpoint_path, ParameterLayout::for_gpt(result.shape), false);
  int eos_id = -1;
  if (!ckpt.tokenizer_model.empty())
    eos_id =
        Tokenizer::from_serialized(ckpt.tokenizer_model, checkpoint_path + " (tokenizer)").eos_id();
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) fail("cannot create '", out_dir, "': ", ec.message());
  write_text(out_dir + "/config.json", family.config_json(result.shape, eos_id));
  write_safetensors(out_dir + "/model.safetensors", family.tensors(result.shape, ckpt.params),
                    {{"format", "pt"}});
  if (!ckpt.tokenizer_model.empty()) {
    write_text(out_dir + "/tokenizer.model", ckpt.tokenizer_model);
    result.tokenizer = true;
  }
  return result;
}

HfImport import_hf(const std::string& dir, const std::string& out_checkpoint,
                   const std::string& tokenizer_path) {
  if (!fs::is_directory(dir)) fail("'", dir, "' is not a directory");
  if (fs::exists(out_checkpoint))
    fail("'", out_checkpoint, "' exists; remove it or choose another name");
  const std::string config_path = dir + "/config.json", weights_path = dir + "/model.safetensors";
  if (!fs::exists(config_path))
    fail("'", dir, "' has no config.json (a Hugging Face model folder has one)");
  if (!fs::exists(weights_path)) {
    if (fs::exists(dir + "/model.safetensors.index.json"))
      fail("'", dir,
           "' holds a sharded checkpoint (model.safetensors.index.json), which "
           "import-hf does not read: save it as one file");
    fail("'", dir,
         "' has no model.safetensors (import-hf reads safetensors only; "
         "save_pretrained writes it by default)");
  }
  const std::string config_json = read_text(config_path);
  const HfFamily& family = family_of_config(config_json, config_path);
  HfImport result;
  result.family = family.name;
  result.shape = family.parse_config(config_json, config_path);

  // The tokenizer first: a mismatch is found before the weights are read.
  std::string tokenizer_bytes;
  const std::string tokenizer_file = !tokenizer_path.empty() ? tokenizer_path
                                     : fs::exists(dir + "/tokenizer.model")
                                         ? dir + "/tokenizer.model"
                                         : "";
  if (!tokenizer_file.empty()) {
    const Tokenizer tokenizer = Tokenizer::load(tokenizer_file);
    if (tokenizer.vocab_size() != result.shape.vocab_size)
      fail("tokenizer '", tokenizer_file, "' has a vocabulary of ", tokenizer.vocab_size(),
           " tokens but ", config_path, " has vocab_size ", result.shape.vocab_size);
    tokenizer_bytes = tokenizer.serialized();
    result.tokenizer_path = tokenizer_file;
  }

  const SafetensorsFile weights = read_safetensors(weights_path);
  for (const SafetensorsTensor& t : weights.tensors)
    if (result.weights_dtype.empty() || result.weights_dtype == t.dtype)
      result.weights_dtype = t.dtype;
    else
      result.weights_dtype = "mixed";

  Config config;
  config.run.name = "hf_import";
  config.model = model_config_of(result.shape);
  // A checkpoint's config names the data it was trained on; an imported model has none here.
  // `train --resume` takes the data from its own config.
  config.data.train = "hf-import:" + fs::absolute(dir).string();
  if (!tokenizer_file.empty()) config.data.tokenizer = fs::absolute(tokenizer_file).string();
  const std::string yaml = config_to_yaml(config);
  try {
    parse_config(yaml, "the imported config");
  } catch (const Error& e) {
    fail(config_path, " describes a model Strata cannot hold: ", e.what());
  }

  const ParameterLayout layout = ParameterLayout::for_gpt(result.shape);
  Checkpoint ckpt;
  ckpt.config_yaml = yaml;
  ckpt.state.seed = config.run.seed;
  ckpt.params = family.params(result.shape, weights.tensors, weights_path);
  ckpt.adam_m.assign(layout.total(), 0.0f);
  ckpt.adam_v.assign(layout.total(), 0.0f);
  ckpt.tokenizer_model = std::move(tokenizer_bytes);

  // write_checkpoint names its file by step in a directory (atomically); a private directory
  // beside the target, then a rename, gives the checkpoint its chosen name just as atomically.
  const fs::path target = fs::absolute(out_checkpoint);
  const fs::path staging =
      target.parent_path() / (".import_hf_" + std::to_string(::getpid()) + ".tmp");
  fs::remove_all(staging);
  try {
    fs::create_directories(target.parent_path());
    const std::string written = write_checkpoint(staging.string(), result.shape, layout, ckpt);
    fs::rename(written, target);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
    throw;
  }
  fs::remove_all(staging);
  return result;
}

}  // namespace strata
