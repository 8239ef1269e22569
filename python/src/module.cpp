// The extension module switchyard._switchyard: a thin binding of the C++ API. The Python package
// (python/switchyard/) adds argument conveniences, the torch bootstrap, autograd functions and the
// DeepEP-compatible facade on top of it.
#include <nanobind/nanobind.h>

#include "bind.hpp"
#include "switchyard/version.hpp"

NB_MODULE(_switchyard, m) {
    using namespace switchyard::python;
    m.doc() = "Switchyard: expert-parallel MoE dispatch/combine (native binding of the C++ API)";
    // Buffers and communicators may still be referenced from module globals or tracebacks when the
    // interpreter tears the module down; that is not a leak worth a warning at every exit.
    nanobind::set_leak_warnings(false);
    m.attr("__version__") = switchyard::kVersionString;
    m.attr("version_info") = nanobind::make_tuple(switchyard::kVersionMajor, switchyard::kVersionMinor,
                                                  switchyard::kVersionPatch);
    bind_errors(m);
    bind_config(m);
    bind_sizing(m);
    bind_sm_model(m);
    bind_communicator(m);
    bind_bridge(m);
    bind_buffer(m);
    bind_reference(m);
}
