// ckpt: a checkpoint's contents, its integrity, the difference of two, and the Hugging Face
// formats (GPT-2, Llama) both ways, and a swarm's stage checkpoints assembled into one. Each
// subcommand's arguments and help are its CommandSpec below.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "model/core/command_line.h"
#include "model/core/error.h"
#include "tools/hf/hf_convert.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_verify.h"
#include "train/checkpoint/saved_model.h"
#include "train/swarm/stage_checkpoints.h"

namespace {

using strata::CommandSpec;

const CommandSpec kInspect{
    "usage: ckpt inspect CKPT",
    "Prints a checkpoint's step, data position, seed, loss scale, optimizer steps and tokenizer, "
    "every tensor with its shape and L2 norm, and the run's config.",
    {},
    "",
    1,
    1};
const CommandSpec kVerify{
    "usage: ckpt verify CKPT...",
    "Checks each file whole (its seal and every checksum; no model is built): one line a file, "
    "`ok ...` with its step, tensors and format, or `error: ...` naming what is damaged (for a "
    "file that fails its seal, the damaged tensor where one is). Exit status 1 when any file is "
    "damaged.",
    {},
    "",
    1,
    -1};
const CommandSpec kDiff{
    "usage: ckpt diff A B",
    "Compares every tensor of two checkpoints bitwise: one line a differing tensor (how many "
    "values differ and the largest difference). Exit status 0 when identical, 1 when they "
    "differ, 2 on an error.",
    {},
    "",
    2,
    2};
const CommandSpec kExportHf{
    "usage: ckpt export-hf CKPT OUT_DIR [--force]",
    "Writes a Hugging Face folder: config.json, model.safetensors and the SentencePiece "
    "tokenizer.model (docs/ARCHITECTURE.md §5), loadable with transformers' "
    "GPT2LMHeadModel.from_pretrained(OUT_DIR) for GPT-2's block, "
    "LlamaForCausalLM.from_pretrained(OUT_DIR) for a Llama-style one (model.norm rmsnorm, "
    "mlp swiglu, position rope).",
    {{"--force", "", "", "write into an OUT_DIR that is not empty (its files are replaced)"}},
    "",
    2,
    2};
const CommandSpec kImportHf{
    "usage: ckpt import-hf DIR OUT_CKPT [--tokenizer MODEL]",
    "Writes a Strata checkpoint (step 0) from a GPT-2 or Llama folder's config.json and "
    "model.safetensors (the family is config.json's model_type), to evaluate, sample, or start a "
    "run from with train --init.",
    {{"--tokenizer", "MODEL", "", "the SentencePiece model stored with it", "DIR/tokenizer.model"}},
    "",
    2,
    2};

const CommandSpec kSwarmAssemble{
    "usage: ckpt swarm-assemble OUT_DIR INPUT...",
    "Writes one whole checkpoint into OUT_DIR from a swarm's stage checkpoints: the newest of "
    "each stage among the INPUTs (stage checkpoints, or peers' run or checkpoint directories), "
    "naming each stage's step; its step is the least of them. eval, generate, export-hf and "
    "train read it.",
    {},
    "",
    2,
    -1};

struct Subcommand {
  const char* name;
  const CommandSpec* spec;
};
const Subcommand kSubcommands[] = {{"inspect", &kInspect},    {"verify", &kVerify},
                                   {"diff", &kDiff},          {"export-hf", &kExportHf},
                                   {"import-hf", &kImportHf}, {"swarm-assemble", &kSwarmAssemble}};

// `ckpt --help`: every subcommand's usage and first sentence.
CommandSpec tool_command() {
  CommandSpec tool{"usage: ckpt inspect|verify|diff|export-hf|import-hf|swarm-assemble ...",
                   "Reads, checks, compares and converts checkpoints. `ckpt COMMAND --help` "
                   "prints a command's own help.",
                   {},
                   ""};
  for (const Subcommand& command : kSubcommands)
    tool.notes += "  " + command.spec->usage.substr(std::string("usage: ").size()) + "\n";
  tool.notes.pop_back();
  return tool;
}

// The model keys of `s` (those of its block that differ from GPT-2's defaults too): what a
// config's model: sets to fine-tune it.
std::string shape_line(const strata::GptShape& s) {
  std::string line = "n_layer " + std::to_string(s.n_layer) + ", n_head " +
                     std::to_string(s.n_head) + ", d_model " + std::to_string(s.d_model) +
                     ", seq_len " + std::to_string(s.seq_len) + ", vocab_size " +
                     std::to_string(s.vocab_size);
  const strata::GptArchitecture& a = s.arch;
  const strata::GptArchitecture defaults;
  auto key = [&](bool differs, const std::string& name, const auto& value) {
    if (!differs) return;
    std::ostringstream text;
    text << ", " << name << " " << value;
    line += text.str();
  };
  key(a.norm != defaults.norm, "norm", strata::kNormChoices.word(a.norm));
  key(a.norm_eps != defaults.norm_eps, "norm_eps", a.norm_eps);
  key(a.mlp != defaults.mlp, "mlp", strata::kMlpChoices.word(a.mlp));
  key(a.d_ff != defaults.d_ff, "d_ff", a.d_ff);
  key(a.position != defaults.position, "position", strata::kPositionChoices.word(a.position));
  key(a.position == strata::Position::rope && a.rope_theta != defaults.rope_theta, "rope_theta",
      a.rope_theta);
  key(a.kv_heads != defaults.kv_heads, "kv_heads", a.kv_heads);
  key(a.bias != defaults.bias, "bias", "false");
  key(a.tie_embeddings != defaults.tie_embeddings, "tie_embeddings", "false");
  return line;
}

int export_hf(const std::string& checkpoint, const std::string& out_dir, bool force) {
  std::error_code ec;
  if (!force && std::filesystem::exists(out_dir, ec) && !std::filesystem::is_empty(out_dir, ec))
    strata::fail("'", out_dir, "' is not empty; choose another folder, or pass --force to write ",
                 "config.json, model.safetensors and tokenizer.model over what it holds");
  const strata::HfExport done = strata::export_hf(checkpoint, out_dir);
  std::printf("exported %s to %s (%s, transformers' %s; model %s)\n", checkpoint.c_str(),
              out_dir.c_str(), done.family.c_str(), done.model_class.c_str(),
              shape_line(done.shape).c_str());
  std::printf("wrote %s/config.json, %s/model.safetensors%s\n", out_dir.c_str(), out_dir.c_str(),
              done.tokenizer ? (", " + out_dir + "/tokenizer.model").c_str() : "");
  if (!done.tokenizer)
    std::fprintf(stderr, "note: the checkpoint holds no tokenizer; no tokenizer.model written\n");
  if (done.diloco_workers > 0)
    std::fprintf(stderr,
                 "note: a DiLoCo checkpoint of %d workers: the weights written are worker 0's "
                 "(the workers' differ between outer syncs)\n",
                 done.diloco_workers);
  return 0;
}

int import_hf(const std::string& dir, const std::string& out, const std::string& tokenizer) {
  const strata::HfImport done = strata::import_hf(dir, out, tokenizer);
  std::printf("imported %s (%s, %s weights; model %s) to %s\n", dir.c_str(), done.family.c_str(),
              done.weights_dtype.c_str(), shape_line(done.shape).c_str(), out.c_str());
  if (done.tokenizer_path.empty())
    std::fprintf(stderr,
                 "warning: no tokenizer (no --tokenizer and no %s/tokenizer.model): eval reads "
                 "token shards without one, generate needs one\n",
                 dir.c_str());
  else
    std::printf("tokenizer %s\n", done.tokenizer_path.c_str());
  return 0;
}

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

int verify(const std::vector<std::string>& paths) {
  int damaged = 0;
  for (const std::string& path : paths) {
    try {
      const strata::CheckpointSummary summary = strata::verify_checkpoint(path);
      std::printf("ok %s: step %lld, %d tensors (%lld values), %d worker(s), %s\n", path.c_str(),
                  static_cast<long long>(summary.step), summary.tensors,
                  static_cast<long long>(summary.values), summary.workers,
                  strata::checkpoint_format_name(summary.format));
    } catch (const std::exception& e) {
      std::fflush(stdout);
      std::string reason = e.what();
      if (reason.find("do not match its seal") != std::string::npos) {
        const std::string where = strata::locate_checkpoint_damage(path);
        if (!where.empty()) reason += "; " + where;
      }
      std::cerr << "error: " << reason << std::endl;
      ++damaged;
    }
  }
  return damaged == 0 ? 0 : 1;
}

// How one tensor of `a` differs from the same tensor of `b` ("" when bitwise equal).
std::string tensor_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size())
    return std::to_string(a.size()) + " values against " + std::to_string(b.size());
  std::size_t count = 0;
  double largest = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) == 0) continue;
    ++count;
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (d > largest || std::isnan(d)) largest = d;
  }
  if (count == 0) return "";
  char text[160];
  std::snprintf(text, sizeof(text), "%zu of %zu values differ, largest difference %.9g", count,
                a.size(), largest);
  return text;
}

// Every fp32 tensor of `a` against the same name in `b`, after both pass their checksums.
int diff(const std::string& a, const std::string& b) {
  std::map<std::string, std::vector<float>> theirs;
  strata::for_each_checkpoint_tensor(
      b, [&](const std::string& name, const std::vector<float>& values) { theirs[name] = values; });
  int tensors = 0, differing = 0;
  const auto report = [&](const std::string& name, const std::string& how) {
    std::printf("%s: %s\n", name.c_str(), how.c_str());
    ++differing;
  };
  strata::for_each_checkpoint_tensor(
      a, [&](const std::string& name, const std::vector<float>& values) {
        ++tensors;
        const auto other = theirs.find(name);
        if (other == theirs.end()) return report(name, "only in " + a);
        const std::string how = tensor_difference(values, other->second);
        theirs.erase(other);
        if (!how.empty()) report(name, how);
      });
  for (const auto& entry : theirs) report(entry.first, "only in " + b);
  if (differing == 0) {
    std::printf("identical: %d tensors bitwise equal\n", tensors);
    return 0;
  }
  std::printf("differ: %d tensor(s)\n", differing);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const CommandSpec tool = tool_command();
    if (argc < 2 || std::string(argv[1]).starts_with("-")) {
      strata::exit_with_help(argc, argv, tool);
      strata::fail("missing command (", tool.usage, ")");
    }
    const std::string command = argv[1];
    const auto known = std::ranges::find(kSubcommands, command, &Subcommand::name);
    if (command == "convert") strata::fail("'ckpt ", command, "' is not implemented yet");
    if (known == std::end(kSubcommands))
      strata::fail("unknown command '", command, "' (", tool.usage, ")");
    const strata::ToolArgs args(argc, argv, 2, *known->spec);
    const std::vector<std::string>& paths = args.positionals();
    if (command == "inspect") return inspect(paths[0]);
    if (command == "verify") return verify(paths);
    if (command == "export-hf") return export_hf(paths[0], paths[1], args.has("--force"));
    if (command == "import-hf") return import_hf(paths[0], paths[1], args.get("--tokenizer"));
    if (command == "swarm-assemble") {
      strata::assemble_swarm_checkpoint({paths.begin() + 1, paths.end()}, paths[0], std::cout);
      return 0;
    }
    try {
      return diff(paths[0], paths[1]);
    } catch (const std::exception& e) {
      std::cerr << "error: " << e.what() << std::endl;
      return 2;
    }
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
}
