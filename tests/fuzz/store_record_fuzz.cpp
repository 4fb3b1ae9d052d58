// Fuzz target: what a worker reads from the rendezvous store (parallel/elastic/record_signing.h,
// elastic_group.h): a signed record, and a sync's membership text.
//
// Input: the bytes of a record at the key "g/members/5". It opens under the fuzz secret only if it
// is exactly the record sign_record makes of the value it yields (anything else is a forgery that
// passed); as a membership text it parses or is a strata::Error, and a parsed one survives the
// round trip through text().
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "parallel/elastic/elastic_group.h"
#include "parallel/elastic/record_signing.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const strata::SharedSecret secret =
      strata::SharedSecret::from_bytes("the fuzz targets' secret, 32 bytes");
  const std::vector<char> record(data, data + size);
  if (const auto value = strata::open_signed_record(secret, "g/members/5", record)) {
    if (strata::sign_record(secret, "g/members/5", *value) != record) {
      std::fprintf(stderr, "fuzz finding: a record opened that is not the value's signed record\n");
      std::abort();
    }
    if (strata::open_signed_record(secret, "g/members/6", record)) {
      std::fprintf(stderr, "fuzz finding: a record opened under another key\n");
      std::abort();
    }
  }
  strata::fuzz::expect_user_errors_only([&] {
    const strata::SyncMembers m =
        strata::SyncMembers::parse(std::string(record.begin(), record.end()));
    if (!(strata::SyncMembers::parse(m.text()) == m)) {
      std::fprintf(stderr, "fuzz finding: a sync membership does not round-trip\n");
      std::abort();
    }
  });
  return 0;
}
