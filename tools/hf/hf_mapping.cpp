#include "tools/hf/hf_mapping.h"

#include <algorithm>
#include <map>

#include "model/core/error.h"

namespace strata {
namespace {

void transpose(const float* in, float* out, std::int64_t rows, std::int64_t cols) {
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
}

// Elements of one row (dimension 0) of `t`: 1 for a vector.
std::int64_t row_size(const TensorView& t) {
  return t.shape.empty() || t.shape[0] == 0 ? 1 : static_cast<std::int64_t>(t.size) / t.shape[0];
}

// The shape of `piece` of `t` in the file.
std::vector<std::int64_t> piece_shape(const TensorView& t, const HfPiece& piece) {
  std::vector<std::int64_t> shape = t.shape;
  shape[0] = piece.rows;
  if (piece.transposed) {
    STRATA_CHECK(shape.size() == 2, "a transposed piece of '", t.name, "' is not 2-D");
    std::swap(shape[0], shape[1]);
  }
  return shape;
}

constexpr const char* kHead = "lm_head.weight";

// The name `name` is mapped by (the pieces' names), "" to ignore it.
std::string canonical(const HfReading& reading, const std::string& name) {
  if (name == kHead) return name;
  const std::string bare =
      name.starts_with(reading.prefix) ? name.substr(reading.prefix.size()) : name;
  return reading.ignored(bare) ? "" : reading.prefix + bare;
}

}  // namespace

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t d = 0; d < shape.size(); ++d)
    s.append(d ? ", " : "").append(std::to_string(shape[d]));
  return s + "]";
}

std::vector<SafetensorsTensor> hf_tensors_of(const ParameterLayout& layout,
                                             const std::vector<float>& params,
                                             const HfPieces& pieces) {
  STRATA_CHECK(params.size() >= layout.total(), "parameters do not fill the layout");
  std::vector<SafetensorsTensor> tensors;
  for (const TensorView& t : layout.tensors())
    for (const HfPiece& piece : pieces(t)) {
      const std::int64_t row = row_size(t);
      const float* values = params.data() + t.offset + piece.row_begin * row;
      SafetensorsTensor out{piece.name, piece_shape(t, piece), {}, "F32"};
      if (piece.transposed) {
        out.values.resize(static_cast<std::size_t>(piece.rows * row));
        transpose(values, out.values.data(), piece.rows, row);
      } else {
        out.values.assign(values, values + piece.rows * row);
      }
      tensors.push_back(std::move(out));
    }
  return tensors;
}

std::vector<float> params_from_hf_tensors(const ParameterLayout& layout,
                                          const std::vector<SafetensorsTensor>& tensors,
                                          const HfPieces& pieces, const HfReading& reading,
                                          const std::string& origin) {
  std::map<std::string, bool> wanted;  // the pieces' names
  for (const TensorView& t : layout.tensors())
    for (const HfPiece& piece : pieces(t))
      STRATA_CHECK(wanted.emplace(piece.name, true).second, "two pieces named ", piece.name);
  std::map<std::string, const SafetensorsTensor*> found;  // by canonical name
  const SafetensorsTensor* tied_head = nullptr;
  for (const SafetensorsTensor& t : tensors) {
    const std::string name = canonical(reading, t.name);
    if (name.empty()) continue;
    if (reading.tied_head && name == kHead && !wanted.count(name)) {
      tied_head = &t;
    } else if (!wanted.count(name)) {
      fail(origin, ": unknown tensor '", t.name, "' (not part of a ", reading.family,
           " model with ", reading.layers, " layers)");
    } else if (const auto [it, added] = found.emplace(name, &t); !added) {
      fail(origin, ": tensor '", name, "' appears twice (as '", it->second->name, "' and '", t.name,
           "')");
    }
  }
  std::vector<float> params(layout.total(), 0.0f);
  for (const TensorView& t : layout.tensors())
    for (const HfPiece& piece : pieces(t)) {
      const auto it = found.find(piece.name);
      if (it == found.end()) fail(origin, ": missing tensor '", piece.name, "'");
      const SafetensorsTensor& in = *it->second;
      const std::vector<std::int64_t> expected = piece_shape(t, piece);
      if (in.shape != expected)
        fail(origin, ": tensor '", in.name, "' has shape ", shape_text(in.shape), ", expected ",
             shape_text(expected));
      const std::int64_t row = row_size(t);
      float* out = params.data() + t.offset + piece.row_begin * row;
      if (piece.transposed)
        transpose(in.values.data(), out, expected[0], expected[1]);
      else
        std::copy(in.values.begin(), in.values.end(), out);
    }
  if (tied_head != nullptr) {
    const SafetensorsTensor& embedding = *found.at(reading.embedding);
    if (tied_head->shape != embedding.shape || tied_head->values != embedding.values)
      fail(origin, ": ", tied_head->name, " differs from the token embedding (",
           reading.untied_error, ")");
  }
  return params;
}

}  // namespace strata
