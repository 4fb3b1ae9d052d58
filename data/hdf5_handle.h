// RAII ownership of HDF5 handles and typed helpers for datasets and attributes, shared by the
// token shards (data/) and the checkpoints (train/).
//
// Every hid_t lives in an H5Id that closes it with the matching H5?close; H5File also remembers
// its path. Failures never print HDF5's error stack: they become strata::Error naming the file and
// the object ("cannot read dataset '/model/wte' of 'ckpt.h5': ..."). HDF5 keeps its error-printing
// switch per thread, so every entry point here silences it for the calling thread first.
//
// Conventions: dims and offsets are in elements, outermost dimension first (C order). Datasets are
// written little-endian with the element type of T (float → IEEE f32, std::int64_t → i64 ...);
// reads convert whatever integer/float type is stored into T (HDF5's own conversion). Object names
// may be paths ("/model/h.0.ln1.weight"); missing intermediate groups are created on write. Files
// are created with the HDF5 1.8+ object format, so attributes larger than 64 KiB are allowed.
// The Debian HDF5 build is thread-safe (one library-wide lock), so handles may be used from any
// thread, one call at a time per handle.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace strata {

// Turns off HDF5's automatic error printing for the calling thread (idempotent, cheap).
void quiet_hdf5_errors();

// Owns one HDF5 identifier; closes it with `close` when destroyed. Move-only.
class H5Id {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Id() = default;
  H5Id(hid_t id, Closer close) : id_(id), close_(close) {}
  H5Id(H5Id&& other) noexcept : id_(other.id_), close_(other.close_) { other.id_ = -1; }
  H5Id& operator=(H5Id&& other) noexcept;
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  ~H5Id() { reset(); }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset();
  // Gives up ownership without closing.
  hid_t release() {
    const hid_t id = id_;
    id_ = -1;
    return id;
  }

 private:
  hid_t id_ = -1;
  Closer close_ = nullptr;
};

class H5File {
 public:
  // Truncates an existing file. `user_block_bytes` (0, or a power of two >= 512) reserves that
  // many bytes at the start of the file for the application: HDF5 neither reads nor writes them.
  static H5File create(const std::string& path, std::uint64_t user_block_bytes = 0);
  static H5File open_read(const std::string& path);   // read-only
  static H5File open_write(const std::string& path);  // read-write, must exist

  hid_t id() const { return id_.get(); }
  const std::string& path() const { return path_; }
  // Flushes and closes now (errors surface here rather than being lost in a destructor).
  void close();

 private:
  H5File(H5Id id, std::string path) : id_(std::move(id)), path_(std::move(path)) {}
  static H5File open(const std::string& path, unsigned flags);
  H5Id id_;
  std::string path_;
};

// "'<object>' of '<file>'", for error messages about an object under `loc` / an open object.
std::string describe_object(hid_t loc, const std::string& name);
std::string describe_id(hid_t object);
// HDF5's innermost (most specific) error description on this thread's stack; clears the stack.
std::string hdf5_error_reason();

bool has_object(hid_t loc, const std::string& name);
H5Id open_group(hid_t loc, const std::string& name);
H5Id create_group(hid_t loc, const std::string& name);  // with missing parents
H5Id open_dataset(hid_t loc, const std::string& name);
H5Id open_object(hid_t loc, const std::string& name);  // group or dataset, e.g. for attributes

// Dataset creation and partial I/O. `chunk` empty = contiguous layout. An `extendible` dataset
// (chunk required) may grow in every dimension with set_dataset_extent, e.g. to append.
H5Id create_dataset(hid_t loc, const std::string& name, hid_t file_type,
                    std::span<const std::uint64_t> dims, std::span<const std::uint64_t> chunk = {},
                    bool extendible = false);
void set_dataset_extent(hid_t dataset, std::span<const std::uint64_t> dims);
std::vector<std::uint64_t> dataset_dims(hid_t dataset);
std::vector<std::uint64_t> dataset_dims(hid_t loc, const std::string& name);
// HDF5's type class of the stored elements (H5T_INTEGER, H5T_FLOAT, ...).
H5T_class_t dataset_type_class(hid_t dataset);
// The size in bytes of one stored element.
std::size_t dataset_element_bytes(hid_t dataset);
// An Error unless the file stores every element of the dataset's extent: a chunked dataset can
// claim any extent and read the chunks it never wrote as zeros, so a damaged or hostile file could
// otherwise make a reader allocate, or silently read, what it never held; nor may it claim to
// store more than the whole file (a damaged chunk index, whose sizes HDF5 would allocate). (Strata
// writes no compressed datasets, whose storage would be smaller.)
void check_dataset_stored(hid_t dataset);
// An Error when the dataset is chunked in chunks of more than `limit` bytes: HDF5 allocates a
// whole chunk to read any element of it, whatever size a damaged file claims.
void check_chunk_bytes(hid_t dataset, std::uint64_t limit);

template <class T>
void write_dataset_slab(hid_t dataset, std::span<const std::uint64_t> offset,
                        std::span<const std::uint64_t> count, const T* data);
template <class T>
void read_dataset_slab(hid_t dataset, std::span<const std::uint64_t> offset,
                       std::span<const std::uint64_t> count, T* out);

// Runs of consecutive elements in the dataset's row-major order, (first flat index, count) each,
// sorted and disjoint: one write of `data` (the runs' elements back to back) into a union of
// hyperslabs. Datasets of rank 1 or 2.
void write_dataset_runs_f32(hid_t dataset,
                            std::span<const std::pair<std::uint64_t, std::uint64_t>> runs,
                            const float* data);

// Whole datasets. `data.size()` must equal the product of `dims`.
template <class T>
void write_dataset(hid_t loc, const std::string& name, std::span<const T> data,
                   std::span<const std::uint64_t> dims);
template <class T>
std::vector<T> read_dataset(hid_t loc, const std::string& name);
// Reads into `out`, whose size must equal the dataset's element count.
template <class T>
void read_dataset_into(hid_t loc, const std::string& name, std::span<T> out);

inline void write_dataset_f32(hid_t loc, const std::string& name, std::span<const float> data,
                              std::span<const std::uint64_t> dims) {
  write_dataset<float>(loc, name, data, dims);
}
inline std::vector<float> read_dataset_f32(hid_t loc, const std::string& name) {
  return read_dataset<float>(loc, name);
}
inline void read_dataset_f32(hid_t loc, const std::string& name, std::span<float> out) {
  read_dataset_into<float>(loc, name, out);
}

// Scalar attributes (hdf5_attributes.cpp) of a group, dataset or file (use the file id for the root
// group).
bool has_attribute(hid_t object, const std::string& name);
void write_attribute_string(hid_t object, const std::string& name, const std::string& value);
void write_attribute_i64(hid_t object, const std::string& name, std::int64_t value);
void write_attribute_f64(hid_t object, const std::string& name, double value);
// Reads fixed- or variable-length strings (h5py writes the latter).
std::string read_attribute_string(hid_t object, const std::string& name);
std::int64_t read_attribute_i64(hid_t object, const std::string& name);
double read_attribute_f64(hid_t object, const std::string& name);

}  // namespace strata
