// The parts of the extension module, each binding one header of include/switchyard/.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>  // in every file: nb::cast<std::string> must be the same everywhere

namespace switchyard::python {

namespace nb = nanobind;

void bind_errors(nb::module_& m);        // errors.hpp -> Python exceptions
void bind_config(nb::module_& m);        // config.hpp, ops.hpp enums, topology.hpp, sizing
void bind_communicator(nb::module_& m);  // communicator.hpp, and one that calls into Python
void bind_bridge(nb::module_& m);        // DLPackTensor, Event (bridge.hpp)
void bind_buffer(nb::module_& m);        // buffer.hpp
void bind_reference(nb::module_& m);     // reference.hpp (submodule "reference")
void bind_sm_model(nb::module_& m);      // sm_model.hpp
void bind_sizing(nb::module_& m);        // planning.hpp: sizes, output shapes, kernel loading (sizing.cpp)

// Set at interpreter exit: Python callbacks are no longer made (a Buffer destroyed then skips
// its barrier through a Python communicator).
bool python_is_exiting();

}  // namespace switchyard::python
