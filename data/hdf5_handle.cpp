// Each helper checks every HDF5 return code and turns a failure into strata::Error with the file,
// the object and HDF5's innermost error description (the most specific reason on its stack).
#include "data/hdf5_handle.h"

#include <algorithm>
#include <filesystem>
#include <functional>

#include "model/core/error.h"

namespace strata {

std::string hdf5_error_reason() {
  std::string reason;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned, const H5E_error2_t* error, void* data) -> herr_t {
        if (error->desc != nullptr && error->desc[0] != '\0') {
          *static_cast<std::string*>(data) = error->desc;
        }
        return 0;
      },
      &reason);
  H5Eclear2(H5E_DEFAULT);
  return reason.empty() ? "HDF5 error" : reason;
}

namespace {

std::string file_name_of(hid_t object) {
  const ssize_t size = H5Fget_name(object, nullptr, 0);
  if (size <= 0) return "?";
  std::string name(static_cast<std::size_t>(size) + 1, '\0');
  H5Fget_name(object, name.data(), name.size());
  name.resize(static_cast<std::size_t>(size));
  return name;
}

std::string object_name_of(hid_t object) {
  const ssize_t size = H5Iget_name(object, nullptr, 0);
  if (size <= 0) return "?";
  std::string name(static_cast<std::size_t>(size) + 1, '\0');
  H5Iget_name(object, name.data(), name.size());
  name.resize(static_cast<std::size_t>(size));
  return name;
}

template <class T>
hid_t memory_type_of();
template <>
hid_t memory_type_of<float>() {
  return H5T_NATIVE_FLOAT;
}
template <>
hid_t memory_type_of<double>() {
  return H5T_NATIVE_DOUBLE;
}
template <>
hid_t memory_type_of<std::int32_t>() {
  return H5T_NATIVE_INT32;
}
template <>
hid_t memory_type_of<std::int64_t>() {
  return H5T_NATIVE_INT64;
}
template <>
hid_t memory_type_of<std::uint8_t>() {
  return H5T_NATIVE_UINT8;
}
template <>
hid_t memory_type_of<std::uint16_t>() {
  return H5T_NATIVE_UINT16;
}
template <>
hid_t memory_type_of<std::uint32_t>() {
  return H5T_NATIVE_UINT32;
}
template <>
hid_t memory_type_of<std::uint64_t>() {
  return H5T_NATIVE_UINT64;
}

template <class T>
hid_t file_type_of();
template <>
hid_t file_type_of<float>() {
  return H5T_IEEE_F32LE;
}
template <>
hid_t file_type_of<double>() {
  return H5T_IEEE_F64LE;
}
template <>
hid_t file_type_of<std::int32_t>() {
  return H5T_STD_I32LE;
}
template <>
hid_t file_type_of<std::int64_t>() {
  return H5T_STD_I64LE;
}
template <>
hid_t file_type_of<std::uint8_t>() {
  return H5T_STD_U8LE;
}
template <>
hid_t file_type_of<std::uint16_t>() {
  return H5T_STD_U16LE;
}
template <>
hid_t file_type_of<std::uint32_t>() {
  return H5T_STD_U32LE;
}
template <>
hid_t file_type_of<std::uint64_t>() {
  return H5T_STD_U64LE;
}

// hsize_t is unsigned long long while std::uint64_t is unsigned long: same width, distinct types.
std::vector<hsize_t> to_hsize(std::span<const std::uint64_t> values) {
  return {values.begin(), values.end()};
}

// The product of `dims`; an Error when it does not fit in 64 bits (only a damaged or hostile file
// claims such an extent).
std::uint64_t element_count(std::span<const std::uint64_t> dims) {
  std::uint64_t count = 1;
  for (const std::uint64_t dim : dims)
    if (__builtin_mul_overflow(count, dim, &count))
      fail("a dataset extent of more than 2^64 elements");
  return count;
}

H5Id link_creation_properties() {
  H5Id properties(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(properties.get(), 1);
  return properties;
}

// A file-space selection of [offset, offset + count) in `dataset`, checked against its extent.
H5Id select_slab(hid_t dataset, std::span<const std::uint64_t> offset,
                 std::span<const std::uint64_t> count) {
  const std::vector<std::uint64_t> dims = dataset_dims(dataset);
  if (offset.size() != dims.size() || count.size() != dims.size()) {
    fail("slab of rank ", offset.size(), " does not match dataset ", describe_id(dataset),
         " of rank ", dims.size());
  }
  for (std::size_t d = 0; d < dims.size(); ++d) {
    if (offset[d] > dims[d] || count[d] > dims[d] - offset[d]) {
      fail("slab [", offset[d], ", ", offset[d] + count[d], ") in dimension ", d,
           " is outside dataset ", describe_id(dataset), " of extent ", dims[d]);
    }
  }
  H5Id space(H5Dget_space(dataset), H5Sclose);
  if (H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, to_hsize(offset).data(), nullptr,
                          to_hsize(count).data(), nullptr) < 0) {
    fail("cannot select a slab of ", describe_id(dataset), ": ", hdf5_error_reason());
  }
  return space;
}

}  // namespace

std::string describe_id(hid_t object) {
  // Built with append: GCC 12 reports a false -Wrestrict on chained operator+ here.
  std::string description = "'";
  description.append(object_name_of(object)).append("' of '").append(file_name_of(object));
  return description.append("'");
}

namespace {
// HDF5 closes every file still open when the process exits (H5_term_library, an atexit hook).
// A file whose write failed (a full disk) cannot be flushed, stays open inside HDF5, and that
// exit-time close then crashes in HDF5 1.10; every file of ours is closed by its owner, so the
// hook is turned off. It must be, before the library's first call: this runs at static
// initialisation of every program that links the HDF5 helpers.
const bool hdf5_exit_hook_disabled = H5dont_atexit() >= 0;
}  // namespace

void quiet_hdf5_errors() {
  thread_local bool quiet = false;
  if (quiet) return;
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  quiet = true;
}

H5Id& H5Id::operator=(H5Id&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = other.id_;
    close_ = other.close_;
    other.id_ = -1;
  }
  return *this;
}

void H5Id::reset() {
  if (id_ >= 0 && close_ != nullptr) close_(id_);
  id_ = -1;
}

H5File H5File::create(const std::string& path, std::uint64_t user_block_bytes) {
  quiet_hdf5_errors();
  H5Id access(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_libver_bounds(access.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST);
  H5Id creation(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
  if (user_block_bytes > 0 && H5Pset_userblock(creation.get(), user_block_bytes) < 0)
    fail("cannot create HDF5 file '", path, "': ", hdf5_error_reason());
  const hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, creation.get(), access.get());
  if (id < 0) fail("cannot create HDF5 file '", path, "': ", hdf5_error_reason());
  return H5File(H5Id(id, H5Fclose), path);
}

H5File H5File::open(const std::string& path, unsigned flags) {
  quiet_hdf5_errors();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail("cannot open '", path, "': no such file");
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    fail("'", path, "' is not an HDF5 file");
  }
  const hid_t id = H5Fopen(path.c_str(), flags, H5P_DEFAULT);
  if (id < 0) fail("cannot open HDF5 file '", path, "': ", hdf5_error_reason());
  return H5File(H5Id(id, H5Fclose), path);
}

H5File H5File::open_read(const std::string& path) { return open(path, H5F_ACC_RDONLY); }
H5File H5File::open_write(const std::string& path) { return open(path, H5F_ACC_RDWR); }

void H5File::close() {
  if (!id_.valid()) return;
  quiet_hdf5_errors();
  if (H5Fflush(id_.get(), H5F_SCOPE_LOCAL) < 0) {
    fail("cannot write HDF5 file '", path_, "': ", hdf5_error_reason());
  }
  const hid_t id = id_.release();  // nothing left to close twice, whatever H5Fclose returns
  if (H5Fclose(id) < 0) fail("cannot close HDF5 file '", path_, "': ", hdf5_error_reason());
}

std::string describe_object(hid_t loc, const std::string& name) {
  std::string path = name;
  if (!name.starts_with('/')) {
    const std::string parent = object_name_of(loc);
    path = (parent == "/" || parent == "?") ? "/" + name : parent + "/" + name;
  }
  std::string description = "'";
  description.append(path).append("' of '").append(file_name_of(loc));
  return description.append("'");
}

bool has_object(hid_t loc, const std::string& name) {
  quiet_hdf5_errors();
  // H5Lexists fails (rather than returning false) when an intermediate group is missing, so walk
  // the path one component at a time.
  std::size_t end = 0;
  while (end != std::string::npos) {
    end = name.find('/', end + 1);
    const std::string prefix = name.substr(0, end);
    if (prefix.empty() || prefix == "/") continue;
    if (H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
  }
  return true;
}

H5Id open_group(hid_t loc, const std::string& name) {
  quiet_hdf5_errors();
  const hid_t id = H5Gopen2(loc, name.c_str(), H5P_DEFAULT);
  if (id < 0) fail("cannot open group ", describe_object(loc, name), ": ", hdf5_error_reason());
  return H5Id(id, H5Gclose);
}

H5Id create_group(hid_t loc, const std::string& name) {
  quiet_hdf5_errors();
  const H5Id links = link_creation_properties();
  const hid_t id = H5Gcreate2(loc, name.c_str(), links.get(), H5P_DEFAULT, H5P_DEFAULT);
  if (id < 0) fail("cannot create group ", describe_object(loc, name), ": ", hdf5_error_reason());
  return H5Id(id, H5Gclose);
}

H5Id open_dataset(hid_t loc, const std::string& name) {
  quiet_hdf5_errors();
  if (!has_object(loc, name)) fail("missing dataset ", describe_object(loc, name));
  const hid_t id = H5Dopen2(loc, name.c_str(), H5P_DEFAULT);
  if (id < 0) fail("cannot open dataset ", describe_object(loc, name), ": ", hdf5_error_reason());
  return H5Id(id, H5Dclose);
}

H5Id open_object(hid_t loc, const std::string& name) {
  quiet_hdf5_errors();
  if (!has_object(loc, name)) fail("missing object ", describe_object(loc, name));
  const hid_t id = H5Oopen(loc, name.c_str(), H5P_DEFAULT);
  if (id < 0) fail("cannot open ", describe_object(loc, name), ": ", hdf5_error_reason());
  return H5Id(id, H5Oclose);
}

H5Id create_dataset(hid_t loc, const std::string& name, hid_t file_type,
                    std::span<const std::uint64_t> dims, std::span<const std::uint64_t> chunk,
                    bool extendible) {
  quiet_hdf5_errors();
  if (has_object(loc, name)) fail("cannot create dataset ", describe_object(loc, name), ": exists");
  if (chunk.size() != (chunk.empty() ? 0 : dims.size()) || (extendible && chunk.empty())) {
    fail("cannot create dataset ", describe_object(loc, name), ": bad chunk shape");
  }
  const std::vector<hsize_t> max_dims(dims.size(), H5S_UNLIMITED);
  const H5Id space(H5Screate_simple(static_cast<int>(dims.size()), to_hsize(dims).data(),
                                    extendible ? max_dims.data() : nullptr),
                   H5Sclose);
  H5Id creation(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  // HDF5 rejects chunks larger than a fixed extent and chunked datasets of fixed size 0, so those
  // are clipped or left contiguous; extendible datasets keep the requested chunk.
  if (!chunk.empty() && (extendible || element_count(dims) > 0)) {
    std::vector<hsize_t> clipped = to_hsize(chunk);
    for (std::size_t d = 0; d < dims.size() && !extendible; ++d) {
      clipped[d] = std::min<hsize_t>(clipped[d], dims[d]);
    }
    H5Pset_chunk(creation.get(), static_cast<int>(clipped.size()), clipped.data());
  }
  const H5Id links = link_creation_properties();
  const hid_t id = H5Dcreate2(loc, name.c_str(), file_type, space.get(), links.get(),
                              creation.get(), H5P_DEFAULT);
  if (id < 0) fail("cannot create dataset ", describe_object(loc, name), ": ", hdf5_error_reason());
  return H5Id(id, H5Dclose);
}

void set_dataset_extent(hid_t dataset, std::span<const std::uint64_t> dims) {
  quiet_hdf5_errors();
  if (H5Dset_extent(dataset, to_hsize(dims).data()) < 0) {
    fail("cannot resize dataset ", describe_id(dataset), ": ", hdf5_error_reason());
  }
}

std::vector<std::uint64_t> dataset_dims(hid_t dataset) {
  quiet_hdf5_errors();
  const H5Id space(H5Dget_space(dataset), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) fail("cannot read the shape of ", describe_id(dataset), ": ", hdf5_error_reason());
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return {dims.begin(), dims.end()};
}

std::vector<std::uint64_t> dataset_dims(hid_t loc, const std::string& name) {
  return dataset_dims(open_dataset(loc, name).get());
}

H5T_class_t dataset_type_class(hid_t dataset) {
  quiet_hdf5_errors();
  const H5Id type(H5Dget_type(dataset), H5Tclose);
  return H5Tget_class(type.get());
}

std::size_t dataset_element_bytes(hid_t dataset) {
  const H5Id type(H5Dget_type(dataset), H5Tclose);
  if (!type.valid()) fail("cannot read the element type of ", describe_id(dataset));
  return H5Tget_size(type.get());
}

template <class T>
void write_dataset_slab(hid_t dataset, std::span<const std::uint64_t> offset,
                        std::span<const std::uint64_t> count, const T* data) {
  quiet_hdf5_errors();
  if (element_count(count) == 0) return;
  const H5Id file_space = select_slab(dataset, offset, count);
  const H5Id memory_space(
      H5Screate_simple(static_cast<int>(count.size()), to_hsize(count).data(), nullptr), H5Sclose);
  if (H5Dwrite(dataset, memory_type_of<T>(), memory_space.get(), file_space.get(), H5P_DEFAULT,
               data) < 0) {
    fail("cannot write dataset ", describe_id(dataset), ": ", hdf5_error_reason());
  }
}

void write_dataset_runs_f32(hid_t dataset,
                            std::span<const std::pair<std::uint64_t, std::uint64_t>> runs,
                            const float* data) {
  quiet_hdf5_errors();
  const std::vector<std::uint64_t> dims = dataset_dims(dataset);
  if (dims.size() != 1 && dims.size() != 2)
    fail("element runs need a dataset of rank 1 or 2, ", describe_id(dataset), " has ",
         dims.size());
  const std::uint64_t row = dims.size() == 2 ? dims[1] : element_count(dims);
  const std::uint64_t total = element_count(dims);
  H5Id space(H5Dget_space(dataset), H5Sclose);
  H5Sselect_none(space.get());
  std::uint64_t selected = 0;
  // A run is at most three rectangles: the rest of its first row, whole rows, its last row's start.
  auto select = [&](std::uint64_t first_row, std::uint64_t first_column, std::uint64_t rows,
                    std::uint64_t columns) {
    if (rows == 0 || columns == 0) return;
    const hsize_t offset[2] = {first_row, first_column}, count[2] = {rows, columns};
    const hsize_t flat_offset[1] = {first_row * row + first_column}, flat_count[1] = {columns};
    const bool flat = dims.size() == 1;
    if (H5Sselect_hyperslab(space.get(), H5S_SELECT_OR, flat ? flat_offset : offset, nullptr,
                            flat ? flat_count : count, nullptr) < 0)
      fail("cannot select elements of ", describe_id(dataset), ": ", hdf5_error_reason());
    selected += rows * columns;
  };
  for (const auto& [first, count] : runs) {
    if (count == 0) continue;
    if (first > total || count > total - first)
      fail("elements [", first, ", ", first + count, ") are outside dataset ", describe_id(dataset),
           " of ", total, " elements");
    std::uint64_t at = first, left = count;
    if (at % row != 0) {  // the rest of the first row
      const std::uint64_t n = std::min(left, row - at % row);
      select(at / row, at % row, 1, n);
      at += n;
      left -= n;
    }
    select(at / row, 0, left / row, row);  // whole rows
    at += left / row * row;
    select(at / row, 0, 1, left % row);  // the start of the last row
  }
  if (selected == 0) return;
  const hsize_t memory_count[1] = {selected};
  const H5Id memory_space(H5Screate_simple(1, memory_count, nullptr), H5Sclose);
  if (H5Dwrite(dataset, H5T_NATIVE_FLOAT, memory_space.get(), space.get(), H5P_DEFAULT, data) < 0)
    fail("cannot write dataset ", describe_id(dataset), ": ", hdf5_error_reason());
}

template <class T>
void read_dataset_slab(hid_t dataset, std::span<const std::uint64_t> offset,
                       std::span<const std::uint64_t> count, T* out) {
  quiet_hdf5_errors();
  if (element_count(count) == 0) return;
  const H5Id file_space = select_slab(dataset, offset, count);
  const H5Id memory_space(
      H5Screate_simple(static_cast<int>(count.size()), to_hsize(count).data(), nullptr), H5Sclose);
  if (H5Dread(dataset, memory_type_of<T>(), memory_space.get(), file_space.get(), H5P_DEFAULT,
              out) < 0) {
    fail("cannot read dataset ", describe_id(dataset), ": ", hdf5_error_reason());
  }
}

template <class T>
void write_dataset(hid_t loc, const std::string& name, std::span<const T> data,
                   std::span<const std::uint64_t> dims) {
  if (element_count(dims) != data.size()) {
    fail("cannot write dataset ", describe_object(loc, name), ": ", data.size(),
         " elements for a shape of ", element_count(dims));
  }
  const H5Id dataset = create_dataset(loc, name, file_type_of<T>(), dims);
  const std::vector<std::uint64_t> origin(dims.size(), 0);
  write_dataset_slab<T>(dataset.get(), origin, dims, data.data());
}

template <class T>
void read_dataset_into(hid_t loc, const std::string& name, std::span<T> out) {
  const H5Id dataset = open_dataset(loc, name);
  const std::vector<std::uint64_t> dims = dataset_dims(dataset.get());
  if (element_count(dims) != out.size()) {
    fail("dataset ", describe_object(loc, name), " holds ", element_count(dims),
         " elements, expected ", out.size());
  }
  const std::vector<std::uint64_t> origin(dims.size(), 0);
  read_dataset_slab<T>(dataset.get(), origin, dims, out.data());
}

namespace {

// A chunked dataset's chunk index agrees with itself: the chunks found at their coordinates are
// as many as the index counts, and each allocated chunk of an unfiltered dataset stores exactly a
// chunk's bytes. HDF5 trusts its index when it reads: a shard whose B-tree node claimed 33
// entries for its one chunk made H5Dread copy past a buffer (found by tests/fuzz/shard_fuzz.cpp).
// One index lookup per chunk (token shards: one per 65536 ids), so check_dataset_stored runs it
// last, once the elements are known to fit the file.
void check_chunk_index(hid_t dataset, hid_t creation, const std::vector<std::uint64_t>& dims,
                       std::uint64_t element_bytes) {
  if (H5Pget_layout(creation) != H5D_CHUNKED) return;
  const bool unfiltered = H5Pget_nfilters(creation) == 0;
  const int rank = static_cast<int>(dims.size());
  std::vector<hsize_t> chunk(dims.size());
  if (rank == 0 || H5Pget_chunk(creation, rank, chunk.data()) != rank)
    fail("dataset ", describe_id(dataset), " has an unreadable chunk layout");
  std::uint64_t chunk_bytes = element_bytes, chunks = 1;
  std::vector<std::uint64_t> per_dim(dims.size());
  for (std::size_t d = 0; d < dims.size(); ++d) {
    if (chunk[d] == 0) fail("dataset ", describe_id(dataset), " has chunks of size 0");
    per_dim[d] = (dims[d] + chunk[d] - 1) / chunk[d];
    if (__builtin_mul_overflow(chunk_bytes, chunk[d], &chunk_bytes) ||
        __builtin_mul_overflow(chunks, per_dim[d], &chunks))
      fail("dataset ", describe_id(dataset), " has a chunk layout past 64 bits");
  }
  std::vector<hsize_t> coord(dims.size());
  std::uint64_t allocated = 0;
  for (std::uint64_t i = 0; i < chunks; ++i) {
    for (std::size_t d = dims.size(), rest = i; d-- > 0; rest /= per_dim[d])
      coord[d] = rest % per_dim[d] * chunk[d];
    unsigned filter_mask = 0;
    haddr_t address = HADDR_UNDEF;
    hsize_t size = 0;
    if (H5Dget_chunk_info_by_coord(dataset, coord.data(), &filter_mask, &address, &size) < 0)
      fail("dataset ", describe_id(dataset),
           " has an unreadable chunk index: ", hdf5_error_reason());
    if (address == HADDR_UNDEF) continue;
    ++allocated;
    if (unfiltered && size != chunk_bytes)
      fail("dataset ", describe_id(dataset), " has a chunk of ", size,
           " bytes where its chunks hold ", chunk_bytes, " (the file is damaged)");
  }
  // The dataset's own dataspace: with H5S_ALL, HDF5 1.10 counts no chunks at all.
  hsize_t counted = 0;
  const H5Id space(H5Dget_space(dataset), H5Sclose);
  if (!space.valid() || H5Dget_num_chunks(dataset, space.get(), &counted) < 0 ||
      counted != allocated)
    fail("dataset ", describe_id(dataset), " has a chunk index counting ", counted,
         " chunks where ", allocated, " are found (the file is damaged)");
}

}  // namespace

void check_dataset_stored(hid_t dataset) {
  // Strata writes contiguous and chunked datasets only. A compact one keeps its data in the object
  // header, where HDF5 trusts the header's sizes as it trusts a chunk index's (below), so it is
  // refused before any read.
  const H5Id creation(H5Dget_create_plist(dataset), H5Pclose);
  const H5D_layout_t layout = creation.valid() ? H5Pget_layout(creation.get()) : H5D_LAYOUT_ERROR;
  if (layout != H5D_CONTIGUOUS && layout != H5D_CHUNKED)
    fail("dataset ", describe_id(dataset),
         " is not stored contiguous or in chunks, as Strata writes it (the file is damaged)");
  const std::vector<std::uint64_t> dims = dataset_dims(dataset);
  const std::uint64_t elements = element_count(dims);
  const std::uint64_t element_bytes = std::max<std::size_t>(dataset_element_bytes(dataset), 1);
  const std::uint64_t stored = H5Dget_storage_size(dataset);
  // HDF5 allocates what a chunk's index entry says the chunk takes: never more than the file.
  hsize_t file_bytes = 0;
  const H5Id file(H5Iget_file_id(dataset), H5Fclose);
  if (!file.valid() || H5Fget_filesize(file.get(), &file_bytes) < 0 || stored > file_bytes)
    fail("dataset ", describe_id(dataset), " claims to store ", stored, " bytes in a file of ",
         file_bytes, " (the file is damaged)");
  if (elements > stored / element_bytes)
    fail("dataset ", describe_id(dataset), " claims ", elements, " elements of ", element_bytes,
         " bytes but the file stores ", stored, " bytes of it (the file is damaged)");
  // Last: its elements are now bounded by the file, and so its chunks (one lookup each).
  check_chunk_index(dataset, creation.get(), dims, element_bytes);
}

void check_chunk_bytes(hid_t dataset, std::uint64_t limit) {
  const H5Id creation(H5Dget_create_plist(dataset), H5Pclose);
  if (H5Pget_layout(creation.get()) != H5D_CHUNKED) return;
  const int rank = H5Pget_chunk(creation.get(), 0, nullptr);
  std::vector<hsize_t> chunk(static_cast<std::size_t>(std::max(rank, 0)));
  if (rank < 0 || H5Pget_chunk(creation.get(), rank, chunk.data()) != rank)
    fail("dataset ", describe_id(dataset),
         " has an unreadable chunk layout: ", hdf5_error_reason());
  std::uint64_t bytes = dataset_element_bytes(dataset);
  for (const hsize_t dim : chunk)
    if (__builtin_mul_overflow(bytes, dim, &bytes)) bytes = ~std::uint64_t{0};
  if (bytes > limit)
    fail("dataset ", describe_id(dataset), " is stored in chunks of ", bytes,
         " bytes, more than the ", limit, " a reader accepts (the file is damaged)");
}

template <class T>
std::vector<T> read_dataset(hid_t loc, const std::string& name) {
  check_dataset_stored(open_dataset(loc, name).get());
  std::vector<T> out(element_count(dataset_dims(loc, name)));
  read_dataset_into<T>(loc, name, std::span<T>(out));
  return out;
}

#define STRATA_HDF5_INSTANTIATE(T)                                               \
  template void write_dataset_slab<T>(hid_t, std::span<const std::uint64_t>,     \
                                      std::span<const std::uint64_t>, const T*); \
  template void read_dataset_slab<T>(hid_t, std::span<const std::uint64_t>,      \
                                     std::span<const std::uint64_t>, T*);        \
  template void write_dataset<T>(hid_t, const std::string&, std::span<const T>,  \
                                 std::span<const std::uint64_t>);                \
  template void read_dataset_into<T>(hid_t, const std::string&, std::span<T>);   \
  template std::vector<T> read_dataset<T>(hid_t, const std::string&);
STRATA_HDF5_INSTANTIATE(float)
STRATA_HDF5_INSTANTIATE(double)
STRATA_HDF5_INSTANTIATE(std::int32_t)
STRATA_HDF5_INSTANTIATE(std::int64_t)
STRATA_HDF5_INSTANTIATE(std::uint8_t)
STRATA_HDF5_INSTANTIATE(std::uint16_t)
STRATA_HDF5_INSTANTIATE(std::uint32_t)
STRATA_HDF5_INSTANTIATE(std::uint64_t)
#undef STRATA_HDF5_INSTANTIATE

}  // namespace strata
