// ckpt inspect CKPT        step, data position, loss scale, the run's config, every tensor with
//                          shape and norm
// ckpt verify CKPT...      checks each file whole (its seal, every checksum, no model built): a
//                          line per file, `ok ...` ending with its format or `error: ...` (for a
//                          file that fails its seal, also the damaged tensor where one is); exit 1
//                          when any is damaged
// ckpt diff A B            compares every tensor bitwise: a line per differing tensor; exit 0
//                          when identical, 1 when they differ, 2 on an error
// ckpt export-hf CKPT OUT_DIR [--force]
//                          a Hugging Face GPT-2 folder: config.json, model.safetensors and the
//                          SentencePiece tokenizer.model (tools/hf/hf_convert.h); a non-empty
//                          OUT_DIR is refused unless --force
// ckpt import-hf DIR OUT_CKPT [--tokenizer MODEL]
//                          a Strata checkpoint (step 0) from a GPT-2 folder's config.json and
//                          model.safetensors; the tokenizer is MODEL, else DIR/tokenizer.model
// ckpt convert             (not implemented yet: reported as an error)
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "model/core/error.h"
#include "tools/hf/hf_convert.h"
#include "tools/tool_args.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_verify.h"
#include "train/checkpoint/saved_model.h"

namespace {

constexpr const char* kUsage =
    "usage: ckpt inspect CKPT | ckpt verify CKPT... | ckpt diff A B | "
    "ckpt export-hf CKPT OUT_DIR [--force] | ckpt import-hf DIR OUT_CKPT [--tokenizer MODEL]";

std::string shape_line(const strata::GptShape& s) {
  return "n_layer " + std::to_string(s.n_layer) + ", n_head " + std::to_string(s.n_head) +
         ", n_embd " + std::to_string(s.d_model) + ", n_positions " + std::to_string(s.seq_len) +
         ", vocab_size " + std::to_string(s.vocab_size);
}

int export_hf(const std::string& checkpoint, const std::string& out_dir, bool force) {
  std::error_code ec;
  if (!force && std::filesystem::exists(out_dir, ec) && !std::filesystem::is_empty(out_dir, ec))
    strata::fail("'", out_dir, "' is not empty; choose another folder, or pass --force to write ",
                 "config.json, model.safetensors and tokenizer.model over what it holds");
  const strata::HfExport done = strata::export_hf_gpt2(checkpoint, out_dir);
  std::printf("exported %s to %s (GPT-2: %s)\n", checkpoint.c_str(), out_dir.c_str(),
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

int import_hf(int argc, char** argv) {
  if (argc < 4) strata::fail("import-hf takes DIR and OUT_CKPT (", kUsage, ")");
  const strata::ToolArgs args(argc, argv, 4, {"--tokenizer"}, kUsage);
  const strata::HfImport done = strata::import_hf_gpt2(argv[2], argv[3], args.get("--tokenizer"));
  std::printf("imported %s (%s weights; %s) to %s\n", argv[2], done.weights_dtype.c_str(),
              shape_line(done.shape).c_str(), argv[3]);
  if (done.tokenizer_path.empty())
    std::fprintf(stderr,
                 "warning: no tokenizer (no --tokenizer and no %s/tokenizer.model): eval reads "
                 "token shards without one, generate needs one\n",
                 argv[2]);
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
  strata::exit_with_usage_on_help(argc, argv, kUsage);
  try {
    if (argc < 2) strata::fail("missing command (", kUsage, ")");
    const std::string command = argv[1];
    if (command == "inspect") {
      if (argc != 3) strata::fail("inspect takes one checkpoint path (", kUsage, ")");
      return inspect(argv[2]);
    }
    if (command == "verify") {
      if (argc < 3) strata::fail("verify takes one or more checkpoint paths (", kUsage, ")");
      return verify(std::vector<std::string>(argv + 2, argv + argc));
    }
    if (command == "diff") {
      if (argc != 4) strata::fail("diff takes two checkpoint paths (", kUsage, ")");
      try {
        return diff(argv[2], argv[3]);
      } catch (const std::exception& e) {
        std::cerr << "error: " << e.what() << std::endl;
        return 2;
      }
    }
    if (command == "export-hf") {
      const bool force = argc == 5 && std::strcmp(argv[4], "--force") == 0;
      if (argc != 4 && !force)
        strata::fail("export-hf takes CKPT, OUT_DIR and perhaps --force (", kUsage, ")");
      return export_hf(argv[2], argv[3], force);
    }
    if (command == "import-hf") return import_hf(argc, argv);
    if (command == "convert") strata::fail("'ckpt ", command, "' is not implemented yet");
    strata::fail("unknown command '", command, "' (", kUsage, ")");
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
}
