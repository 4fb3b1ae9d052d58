#include "parallel/elastic/signed_store.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace strata {

SignedStore::SignedStore(std::unique_ptr<RendezvousStore> inner,
                         std::shared_ptr<const SharedSecret> secret)
    : inner_(std::move(inner)), secret_(std::move(secret)) {}

void SignedStore::report(const std::string& key) {
  ++forged_;
  {
    const std::lock_guard lock(mutex_);
    if (!reported_.insert(key).second) return;
  }
  std::fprintf(stderr,
               "warning: store record '%s' ignored: it is not signed with this group's secret "
               "(forged, or written by a worker with another secret or none)\n",
               key.c_str());
}

namespace {

// The i-th name of `key`: the key itself, then "<key>@<i>".
std::string alternate(const std::string& key, int i) {
  return i == 0 ? key : key + "@" + std::to_string(i);
}

// The key an alternate name stands for ("g/members/5@2" → "g/members/5").
std::string base_of(const std::string& name) {
  const std::size_t at = name.rfind('@');
  if (at == std::string::npos || at + 1 == name.size()) return name;
  for (std::size_t i = at + 1; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return name;
  return name.substr(0, at);
}

}  // namespace

void SignedStore::set(const std::string& key, const std::vector<char>& value) {
  inner_->set(key, sign_record(*secret_, key, value));
}

std::optional<std::vector<char>> SignedStore::get(const std::string& key) {
  for (int i = 0; i < kAlternates; ++i) {
    const std::string name = alternate(key, i);
    const std::optional<std::vector<char>> record = inner_->get(name);
    if (!record) return std::nullopt;
    if (std::optional<std::vector<char>> value = open_signed_record(*secret_, name, *record))
      return value;
    report(name);
  }
  return std::nullopt;
}

bool SignedStore::create(const std::string& key, const std::vector<char>& value) {
  for (int i = 0; i < kAlternates;) {
    const std::string name = alternate(key, i);
    if (inner_->create(name, sign_record(*secret_, name, value))) return true;
    const std::optional<std::vector<char>> record = inner_->get(name);
    if (!record) continue;  // removed meanwhile: try the name again
    if (open_signed_record(*secret_, name, *record)) return false;  // a member created it
    if (looks_signed(*record))  // not forged by hand: a worker with another secret wrote it
      throw std::runtime_error(
          "store key '" + name +
          "' holds a record signed with another secret: this member's secret (its secret_file) "
          "is not the group's");
    report(name);
    ++i;
  }
  throw StoreUnavailable("rendezvous store " + url() + ": key '" + key + "' and its " +
                         std::to_string(kAlternates - 1) +
                         " alternates hold forged records: someone who can write to the store "
                         "is denying it");
}

bool SignedStore::create_here(const std::string& key, const std::vector<char>& value) {
  return inner_->create(key, sign_record(*secret_, key, value));
}

void SignedStore::remove(const std::string& key) {
  inner_->remove(key);
  for (int i = 1; i < kAlternates && inner_->get(alternate(key, i)); ++i)
    inner_->remove(alternate(key, i));
}

std::vector<std::string> SignedStore::keys(const std::string& prefix) {
  std::vector<std::string> valid;
  for (const std::string& name : inner_->keys(prefix)) {
    const std::string key = base_of(name);
    if ((valid.empty() || valid.back() != key) && key.starts_with(prefix) && get(key))
      valid.push_back(key);
  }
  std::sort(valid.begin(), valid.end());
  valid.erase(std::unique(valid.begin(), valid.end()), valid.end());
  return valid;
}

std::string SignedStore::version_key(const std::string& key, std::int64_t index) const {
  return key + ".v" + std::to_string(index);
}

SignedStore::Version SignedStore::newest_version(const std::string& key, std::int64_t from) {
  const auto exists = [&](std::int64_t index) {
    return index == 0 || inner_->get(version_key(key, index)).has_value();
  };
  // Gallop from `from` (which exists) to an index that does not, then bisect between them.
  std::int64_t present = from, step = 1;
  while (exists(present + step)) {
    present += step;
    step *= 2;
  }
  std::int64_t absent = present + step;
  while (absent - present > 1) {
    const std::int64_t middle = present + (absent - present) / 2;
    (exists(middle) ? present : absent) = middle;
  }
  // The newest valid version at or below it (forged ones skipped).
  for (std::int64_t index = present; index > 0; --index) {
    const std::optional<std::vector<char>> total = get(version_key(key, index));
    if (total) return {present, std::stoll(store_text(*total))};
  }
  return {present, 0};
}

std::int64_t SignedStore::add(const std::string& key, std::int64_t delta) {
  std::int64_t from = 0;
  {
    const std::lock_guard lock(mutex_);
    if (const auto seen = versions_.find(key); seen != versions_.end()) from = seen->second;
  }
  Version newest = newest_version(key, from);
  if (delta != 0)
    while (true) {
      const std::int64_t next = newest.index + 1;
      const std::int64_t total = newest.total + delta;
      if (create(version_key(key, next), store_bytes(std::to_string(total)))) {
        newest = {next, total};
        break;
      }
      newest = newest_version(key, next);  // another writer took `next`
    }
  const std::lock_guard lock(mutex_);
  std::int64_t& seen = versions_[key];
  seen = std::max(seen, newest.index);
  return newest.total;
}

std::unique_ptr<RendezvousStore> open_group_store(const std::string& url,
                                                  std::shared_ptr<const SharedSecret> secret,
                                                  double connect_timeout_s) {
  std::unique_ptr<RendezvousStore> store = open_rendezvous_store(url, connect_timeout_s);
  if (!secret) return store;
  return std::make_unique<SignedStore>(std::move(store), std::move(secret));
}

}  // namespace strata
