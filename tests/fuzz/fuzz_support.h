// Shared by the fuzz targets (tests/fuzz/*_fuzz.cpp): how an input reaches a reader that takes a
// path, and what counts as a finding.
//
// Every target is a libFuzzer entry point, LLVMFuzzerTestOneInput. Built with clang and
// -fsanitize=fuzzer (STRATA_FUZZ=ON, tests/fuzz/fuzz.sh) it is a fuzzer; built with any compiler
// and replay_main.cpp it is a replayer that runs the saved corpus and past findings as a ctest.
//
// A reader may reject an input only with a strata::Error that says what is wrong with it: that is
// the one-line `error:` a user sees. Anything else is a finding: a crash or sanitizer report, an
// exception of another type (the user would see a library's message, or a std::bad_alloc, instead
// of a reason), or a failed internal check (STRATA_CHECK: the input reached code that assumed it
// had been validated). Findings abort, which libFuzzer reports with the input that caused it.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "model/core/error.h"

namespace strata::fuzz {

// This process's private temporary directory: created on first use, removed at a normal exit
// (a crashing input leaves it, with the files the input made, for a look).
inline const std::filesystem::path& scratch_directory() {
  // Never destroyed, so the exit handler can still read it.
  static const std::filesystem::path* directory = [] {
    auto* path = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                           ("strata-fuzz-" + std::to_string(getpid())));
    std::filesystem::create_directories(*path);
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(scratch_directory(), ignored);
    });
    return path;
  }();
  return *directory;
}

// A file in a private temporary directory holding the input, removed with the object. Readers
// that decide by the file name (".jsonl") get the name they need, after a prefix that makes every
// input's path new: a reader may remember a file it has checked by its path (checkpoint_seal.h).
class InputFile {
 public:
  InputFile(std::string_view bytes, const std::string& file_name) {
    static std::uint64_t inputs = 0;
    path_ = (scratch_directory() / (std::to_string(++inputs) + "-" + file_name)).string();
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::fprintf(stderr, "fuzz: cannot write %s\n", path_.c_str());
      std::abort();
    }
  }
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs `read` on an input: a strata::Error that names a problem is an accepted rejection; a
// failed internal check is a finding. Other exceptions pass through, uncaught, to abort.
template <class Read>
void expect_user_errors_only(Read&& read) {
  try {
    read();
  } catch (const CollectiveError&) {
    throw;  // only collective runs raise it: a reader never should
  } catch (const Error& e) {
    if (std::string_view(e.what()).starts_with("internal check failed")) {
      std::fprintf(stderr, "fuzz finding: %s\n", e.what());
      std::abort();
    }
  }
}

// Reads the input as a sequence of fields: integers and strings taken from its front, zero or
// empty once it runs out, so every input is a valid sequence of choices.
class FieldReader {
 public:
  FieldReader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint64_t u64(int bytes = 8) {
    std::uint64_t value = 0;
    for (int i = 0; i < bytes; ++i) value = value << 8 | byte();
    return value;
  }
  std::uint8_t byte() { return position_ < size_ ? data_[position_++] : 0; }
  bool flag() { return byte() & 1; }
  // A choice in [0, count).
  std::uint64_t pick(std::uint64_t count) { return count == 0 ? 0 : u64(2) % count; }
  // A string of at most `max_length` bytes, length first.
  std::string text(std::size_t max_length) {
    const std::size_t length = std::min<std::size_t>(byte(), max_length);
    std::string out;
    while (out.size() < length && position_ < size_) out.push_back(static_cast<char>(byte()));
    return out;
  }
  bool empty() const { return position_ >= size_; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t position_ = 0;
};

}  // namespace strata::fuzz
