// The tests' own device kernels (tests/kernels/) are not part of the library: they are embedded into
// the test support library and made visible to the JIT before any test runs.
#include "common/testing.hpp"
#include "jit/embedded_headers.hpp"

namespace switchyard::testing {

extern const jit::EmbeddedHeaderSet kTestKernelHeaders;

void register_test_kernels() {
    jit::add_header_set(kTestKernelHeaders);
}

}  // namespace switchyard::testing
