#include "parallel/elastic/file_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <mutex>

#include "parallel/elastic/store_key.h"

namespace strata {

namespace fs = std::filesystem;

namespace {

// Closes the descriptor it owns.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Closes now and returns close()'s errno (0 on success): NFS reports write errors there.
  int close() {
    const int result = ::close(fd_);
    fd_ = -1;
    return result == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

const std::string& host_name() {
  static const std::string name = [] {
    char buffer[256] = {};
    if (::gethostname(buffer, sizeof buffer - 1) != 0) return std::string("unknown-host");
    return std::string(buffer);
  }();
  return name;
}

// The calls of this process that made a temporary file; with the host and the pid, a name no
// other writer of the directory uses.
std::atomic<std::uint64_t> temporary_files_made{0};

bool hidden(const fs::path& name) { return name.filename().native().starts_with('.'); }

}  // namespace

FileStore::FileStore(const fs::path& directory) : root_(directory) {
  std::error_code error;
  fs::create_directories(root_, error);
  if (error || !fs::is_directory(root_, error))
    throw StoreUnavailable("rendezvous store " + url() + ": cannot create the directory (" +
                           (error ? error.message() : "not a directory") + ")");
}

std::string FileStore::url() const { return "file://" + root_.string(); }

void FileStore::fail_on(const std::string& what, const fs::path& path, int error_number) const {
  throw StoreUnavailable("rendezvous store " + url() + ": " + what + " " + path.string() + ": " +
                         std::strerror(error_number));
}

fs::path FileStore::path_of(const std::string& key, bool make_directory) const {
  check_store_key(key);
  fs::path path = root_ / key;
  if (make_directory) {
    std::error_code error;
    fs::create_directories(path.parent_path(), error);
    if (error) fail_on("cannot create the directory", path.parent_path(), error.value());
  }
  return path;
}

fs::path FileStore::write_temporary(const fs::path& path, const std::vector<char>& value) const {
  const fs::path temporary = path.parent_path() / ("." + path.filename().string() + ".tmp." +
                                                   host_name() + "." + std::to_string(::getpid()) +
                                                   "." + std::to_string(++temporary_files_made));
  FileDescriptor file(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (file.get() < 0) fail_on("cannot create", temporary, errno);
  std::size_t written = 0;
  while (written < value.size()) {
    const ssize_t n = ::write(file.get(), value.data() + written, value.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      ::unlink(temporary.c_str());
      fail_on("cannot write", temporary, error);
    }
    written += static_cast<std::size_t>(n);
  }
  if (const int error = file.close()) {
    ::unlink(temporary.c_str());
    fail_on("cannot write", temporary, error);
  }
  return temporary;
}

namespace {

// The file's bytes, or nullopt when it does not exist (or is a directory of other keys).
std::optional<std::vector<char>> read_file(const fs::path& path, int& error_number) {
  error_number = 0;
  FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.get() < 0) {
    if (errno != ENOENT && errno != ENOTDIR) error_number = errno;
    return std::nullopt;
  }
  struct stat status {};
  if (::fstat(file.get(), &status) != 0) {
    error_number = errno;
    return std::nullopt;
  }
  if (S_ISDIR(status.st_mode)) return std::nullopt;
  std::vector<char> bytes;
  char buffer[65536];
  while (true) {
    const ssize_t n = ::read(file.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error_number = errno;
      return std::nullopt;
    }
    if (n == 0) return bytes;
    bytes.insert(bytes.end(), buffer, buffer + n);
  }
}

}  // namespace

void FileStore::set(const std::string& key, const std::vector<char>& value) {
  const fs::path path = path_of(key, true);
  const fs::path temporary = write_temporary(path, value);
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    fail_on("cannot rename a temporary file to", path, error);
  }
}

std::optional<std::vector<char>> FileStore::get(const std::string& key) {
  const fs::path path = path_of(key, false);
  int error = 0;
  auto value = read_file(path, error);
  if (error) fail_on("cannot read", path, error);
  return value;
}

bool FileStore::create(const std::string& key, const std::vector<char>& value) {
  const fs::path path = path_of(key, true);
  const fs::path temporary = write_temporary(path, value);
  const bool linked = ::link(temporary.c_str(), path.c_str()) == 0;
  const int error = linked ? 0 : errno;
  // Our temporary file has two names only if our link made the key (see the header: NFS).
  struct stat status {};
  const bool created = linked || (::stat(temporary.c_str(), &status) == 0 && status.st_nlink == 2);
  ::unlink(temporary.c_str());
  if (created) return true;
  if (error == EEXIST) return false;
  fail_on("cannot link a temporary file to", path, error);
}

std::int64_t FileStore::add(const std::string& key, std::int64_t delta) {
  const fs::path path = path_of(key, true);
  const fs::path lock_path = path.parent_path() / ("." + path.filename().string() + ".lock");
  static std::mutex process_lock;
  const std::lock_guard<std::mutex> in_process(process_lock);
  FileDescriptor lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (lock.get() < 0) fail_on("cannot open the lock file", lock_path, errno);
  while (::flock(lock.get(), LOCK_EX) != 0)
    if (errno != EINTR) fail_on("cannot lock", lock_path, errno);

  int error = 0;
  const auto current = read_file(path, error);
  if (error) fail_on("cannot read", path, error);
  std::int64_t value = 0;
  if (current) {
    const char* begin = current->data();
    const char* end = begin + current->size();
    const auto [parsed_end, parse_error] = std::from_chars(begin, end, value);
    if (current->empty() || parse_error != std::errc() || parsed_end != end)
      throw StoreUnavailable("rendezvous store " + url() + ": the value of '" + key +
                             "' is not a decimal integer, so add() cannot count on it");
  }
  if (__builtin_add_overflow(value, delta, &value))
    throw StoreUnavailable("rendezvous store " + url() + ": add(" + std::to_string(delta) +
                           ") to '" + key + "' overflows a 64-bit integer");
  const std::string text = std::to_string(value);
  const fs::path temporary = write_temporary(path, {text.begin(), text.end()});
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int rename_error = errno;
    ::unlink(temporary.c_str());
    fail_on("cannot rename a temporary file to", path, rename_error);
  }
  return value;
}

void FileStore::remove(const std::string& key) {
  const fs::path path = path_of(key, false);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT && errno != ENOTDIR && errno != EISDIR)
    fail_on("cannot remove", path, errno);
}

std::vector<std::string> FileStore::keys(const std::string& prefix) {
  check_store_key_prefix(prefix);
  // Walk only the deepest directory the prefix names in full, when it is a key-shaped path.
  fs::path start = root_;
  if (const auto slash = prefix.rfind('/'); slash != std::string::npos) {
    const std::string directory = prefix.substr(0, slash);
    try {
      check_store_key(directory);
      start = root_ / directory;
    } catch (const std::invalid_argument&) {
      return {};  // no key starts with an invalid path
    }
  }
  std::vector<std::string> found;
  std::error_code error;
  if (!fs::is_directory(start, error)) return found;
  fs::recursive_directory_iterator walk(start, error), end;
  if (error) fail_on("cannot list", start, error.value());
  for (; walk != end; walk.increment(error)) {
    if (error) fail_on("cannot list", start, error.value());
    const fs::directory_entry& entry = *walk;
    if (hidden(entry.path())) {  // temporary and lock files
      walk.disable_recursion_pending();
      continue;
    }
    std::error_code status_error;
    if (!entry.is_regular_file(status_error)) continue;
    std::string key = entry.path().lexically_relative(root_).generic_string();
    if (key.starts_with(prefix)) found.push_back(std::move(key));
  }
  if (error) fail_on("cannot list", start, error.value());
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace strata
