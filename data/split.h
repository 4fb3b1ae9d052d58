// The train/validation split of a corpus: which whole documents go to validation.
//
// Deterministic and independent of document contents and thread count: document i goes to
// validation iff a hash of i, as a uniform number in (0, 1), is below `val_fraction`. So about
// val_fraction of the documents (not tokens) are held out, and adding documents at the end of
// a corpus does not move earlier ones. Guarantees, applied in this order:
//   - if val_fraction > 0, there are >= 2 documents and none was chosen, the last one is;
//   - training is never empty: if every document was chosen, document 0 goes back to training.
#pragma once

#include <cstddef>
#include <vector>

namespace strata {

// is_validation[i] for each of `documents` documents. strata::Error unless 0 <= val_fraction < 1.
std::vector<bool> choose_validation_documents(std::size_t documents, double val_fraction);

}  // namespace strata
