// The key rules both rendezvous stores enforce (rendezvous_store.h), so that a key valid on one is
// valid on the other: printable ASCII without spaces, '/'-separated non-empty components, none
// starting with '.'. The last rule keeps ".." out of a file store's paths and reserves hidden names
// for its temporary and lock files (file_store.h), which keys() can then skip without ambiguity.
#pragma once

#include <string>

namespace strata {

// Throws std::invalid_argument naming the key and the rule it breaks.
void check_store_key(const std::string& key);

// A keys() prefix: printable ASCII without spaces, possibly empty or ending in '/'.
void check_store_key_prefix(const std::string& prefix);

}  // namespace strata
