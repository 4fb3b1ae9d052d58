#include "train/checkpoint/saved_model.h"

#include "model/core/error.h"

namespace strata {

SavedModel load_saved_model(const std::string& checkpoint_path, int max_batch) {
  SavedModel saved;
  const std::string yaml = read_checkpoint_config(checkpoint_path);
  try {
    saved.config = parse_config(yaml, checkpoint_path + " (config attribute)");
  } catch (const Error& e) {
    fail("checkpoint '", checkpoint_path, "' holds an invalid config: ", e.what());
  }
  const ModelConfig& m = saved.config.model;
  // Every layer has tensors of its own, so a config claiming more layers than the file has
  // tensors is refused before its layout (a vector per tensor) is built.
  const std::int64_t tensors = read_checkpoint_model_tensors(checkpoint_path);
  if (m.n_layer > tensors)
    fail("checkpoint '", checkpoint_path, "' holds a config of ", m.n_layer, " layers but only ",
         tensors, " model tensors");
  const GptShape shape = gpt_shape_of(m);
  // The tensors first: their shapes are checked against the config before the model that the
  // config describes (however large it claims to be) is built.
  Checkpoint ckpt = read_checkpoint(checkpoint_path, ParameterLayout::for_gpt(shape), false);
  saved.model = std::make_unique<Gpt<float>>(
      shape, max_batch > 0 ? max_batch : saved.config.train.micro_batch);
  STRATA_CHECK(saved.model->layout().total() == ckpt.params.size());
  saved.state = ckpt.state;
  saved.params = std::move(ckpt.params);
  saved.tokenizer_model = std::move(ckpt.tokenizer_model);
  saved.without_tokenizer = ckpt.without_tokenizer;
  return saved;
}

}  // namespace strata
