// PyTorch op (torch binding) of the library's runtime input checks inside
// torch.compile'd code (keras_trees/validation/tensors.py): the checked
// conditions, reduced to booleans in the compiled graph, come in as one tensor;
// the op fails the call with the message of the first false one (ValueError)
// and otherwise returns a true scalar that the checked output is made to depend
// on. No graph break, and no host synchronization in the traced Python.
#include <string>

#include "torch_utils.h"

namespace keras_trees {
namespace {

// `messages` holds one message per condition, each ended by '\n'.
Tensor RuntimeCheck(Tensor oks, std::string messages) {
  if (oks.scalar_type() != ScalarType::Bool) Fail("keras-trees check: the conditions must be booleans");
  oks = Dense(oks);
  const bool* ok = Data<bool>(oks);
  const int64_t n = oks.numel();
  size_t start = 0;
  for (int64_t i = 0; i < n; ++i) {
    const size_t end = messages.find('\n', start);
    if (!ok[i]) Fail(messages.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  Tensor token = Empty<bool>({});
  *Data<bool>(token) = true;
  return token;
}

}  // namespace
}  // namespace keras_trees

STABLE_TORCH_LIBRARY_FRAGMENT(keras_trees, m) { m.def("check(Tensor oks, str messages) -> Tensor"); }

STABLE_TORCH_LIBRARY_IMPL(keras_trees, CPU, m) { KT_TORCH_IMPL(m, "check", keras_trees::RuntimeCheck); }
