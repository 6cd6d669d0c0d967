// XLA FFI handler of the library's runtime input checks under jax.jit
// (keras_trees/validation/tensors.py). The checked conditions are reduced to
// booleans inside the compiled function; this handler receives them and fails
// the call with the message of the first false one (INVALID_ARGUMENT, which
// JAX raises as JaxRuntimeError carrying the message). A Python host callback
// would cost a host round trip per call; this costs a custom call.
#include <string>
#include <string_view>

#include "ffi_utils.h"

KT_EXPORT_FFI_HANDLER(KerasTreesCheck);

namespace keras_trees {
namespace {

// `messages` holds one message per condition, each ended by '\n'.
ffi::Error Check(ffi::AnyBuffer oks, ffi::Result<ffi::AnyBuffer> token, std::string_view messages) {
  if (oks.element_type() != ffi::DataType::PRED) {
    return InvalidArgument("keras-trees check: the conditions must be booleans");
  }
  const bool* ok = static_cast<const bool*>(oks.untyped_data());
  const int64_t n = static_cast<int64_t>(oks.element_count());
  size_t start = 0;
  for (int64_t i = 0; i < n; ++i) {
    const size_t end = messages.find('\n', start);
    if (!ok[i]) {
      return InvalidArgument(std::string(messages.substr(start, end == std::string_view::npos
                                                                    ? std::string_view::npos
                                                                    : end - start)));
    }
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  *static_cast<bool*>(token->untyped_data()) = true;
  return ffi::Error::Success();
}

}  // namespace
}  // namespace keras_trees

namespace ffi = ::xla::ffi;

XLA_FFI_DEFINE_HANDLER_SYMBOL(KerasTreesCheck, keras_trees::Guard<keras_trees::Check>::Call,
                              keras_trees::CheckSignature(ffi::Ffi::Bind()));
