// The rendezvous store over a directory (rendezvous_store.h, "file:///path"): for one machine, or
// many that share the directory over NFS. Key "group/slot/3" is the file <root>/group/slot/3, whose
// bytes are the value; '/' in a key makes subdirectories, so a key cannot also be the directory of
// another ("a" and "a/b" cannot both exist).
//
// Atomicity, from the file system rather than from locks held by readers:
//   set     writes a temporary file in the key's directory and rename()s it over the key, so a
//           reader sees the old value or the new one, never a partial one.
//   create  writes a temporary file and link()s it to the key's name: link fails with EEXIST when
//           the name exists, so one creator wins. Over NFS a retransmitted LINK whose first try
//           succeeded can also report EEXIST; the temporary file's link count (2 when our link
//           made the key) settles it, the way NFS-safe lock files do.
//   add     takes an exclusive flock() on the key's lock file, reads the decimal counter (absent:
//           0), and writes the new value as set does. Over NFS, Linux turns flock() into a POSIX
//           lock (held by the process, not the open file), so add() also takes a process-wide
//           mutex: threads of one process exclude each other there too.
// Hidden names are the store's own: temporary files ".<name>.tmp.<host>.<pid>.<n>" (unique across
// hosts, processes and calls) and lock files ".<name>.lock". Key components never start with '.'
// (store_key.h), so keys() skips them by name. Lock files stay after remove(): unlinking a lock
// that another process is waiting on would let a third take a different file's lock.
#pragma once

#include <filesystem>
#include <string>

#include "parallel/elastic/rendezvous_store.h"

namespace strata {

class FileStore final : public RendezvousStore {
 public:
  // Creates the directory (and its parents) if needed; throws StoreUnavailable if it cannot.
  explicit FileStore(const std::filesystem::path& directory);

  std::string url() const override;
  void set(const std::string& key, const std::vector<char>& value) override;
  std::optional<std::vector<char>> get(const std::string& key) override;
  bool create(const std::string& key, const std::vector<char>& value) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  void remove(const std::string& key) override;
  std::vector<std::string> keys(const std::string& prefix) override;

 private:
  // The key's file, its directory created when `make_directory`.
  std::filesystem::path path_of(const std::string& key, bool make_directory) const;
  // A new temporary file beside `path` holding `value`.
  std::filesystem::path write_temporary(const std::filesystem::path& path,
                                        const std::vector<char>& value) const;
  [[noreturn]] void fail_on(const std::string& what, const std::filesystem::path& path,
                            int error_number) const;

  std::filesystem::path root_;
};

}  // namespace strata
