// `ckpt export-hf` and `ckpt import-hf`: a Strata checkpoint as a Hugging Face folder and back, in
// the family that computes its model: GPT-2 (GPT2LMHeadModel, tools/hf/hf_gpt2.h) for GPT-2's
// block, the model keys' defaults; Llama (LlamaForCausalLM, tools/hf/hf_llama.h) for a Llama-style
// block (model.norm rmsnorm, mlp swiglu, position rope, with any kv_heads, bias and
// tie_embeddings). The file format is tools/hf/safetensors.h.
//
// A folder holds config.json, model.safetensors (F32 on export; F32, F16 or BF16 on import) and,
// when the model has one, the SentencePiece tokenizer.model. Export then import gives back the
// checkpoint's parameters bitwise. An imported checkpoint is a complete Strata checkpoint at step
// 0 (zero AdamW moments, no data consumed), so `eval` and `generate` read it and
// `train CONFIG --resume IMPORTED.h5` fine-tunes from it when CONFIG's model matches.
#pragma once

#include <string>

#include "model/gpt_shape.h"

namespace strata {

struct HfExport {
  GptShape shape;
  std::string family;       // "GPT-2" or "Llama"
  std::string model_class;  // transformers' class that loads the folder ("GPT2LMHeadModel", ...)
  bool tokenizer = false;   // tokenizer.model written (the checkpoint held one)
  // DiLoCo workers of the run (0 without DiLoCo): the weights written are worker 0's, which the
  // others' differ from between outer syncs.
  int diloco_workers = 0;
};

// Writes OUT_DIR/config.json, OUT_DIR/model.safetensors and OUT_DIR/tokenizer.model (created if
// missing; existing files of those names are replaced). Error for a model no transformers class
// computes (experts; a block that mixes GPT-2's and Llama's pieces), naming its keys.
HfExport export_hf(const std::string& checkpoint_path, const std::string& out_dir);

struct HfImport {
  GptShape shape;
  std::string family;          // config.json's model_type read as "GPT-2" or "Llama"
  std::string weights_dtype;   // of model.safetensors' tensors ("F32", "BF16", ... or "mixed")
  std::string tokenizer_path;  // the tokenizer stored in the checkpoint; empty if none
};

// Reads DIR/config.json and DIR/model.safetensors and writes the checkpoint `out_checkpoint`
// (atomically; an existing file is an error). The family is config.json's model_type: "gpt2"
// (also when absent) or "llama". The tokenizer is `tokenizer_path`, else DIR/tokenizer.model when
// present, else none; one whose vocabulary is not config.json's vocab_size is an error naming both
// sizes.
HfImport import_hf(const std::string& dir, const std::string& out_checkpoint,
                   const std::string& tokenizer_path);

}  // namespace strata
