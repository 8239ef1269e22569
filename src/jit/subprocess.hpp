// What the JIT needs to run the toolkit's programs (nvcc, cuobjdump, nvdisasm): the directories of
// PATH, the toolkit's bin directories, and a program run with its output into a file.
#pragma once

#include <string>
#include <vector>

namespace switchyard::jit {

// The non-empty entries of PATH, in order.
std::vector<std::string> path_dirs();

// The bin directories a CUDA toolkit may be in, in order: the toolkit the library was built
// against, CUDA_HOME, CUDA_PATH, /usr/local/cuda.
std::vector<std::string> toolkit_bin_dirs();

// The first of `dirs` that holds an executable `name`, as dir + "/" + name; empty when none does.
std::string find_program(const std::string& name, const std::vector<std::string>& dirs);

// Runs `args` (args[0] a path) with its stdout (and, with `with_stderr`, its stderr) into the file
// `output`; returns its exit status, or -1 when it did not run or did not exit.
int run_to_file(const std::vector<std::string>& args, const std::string& output, bool with_stderr);

}  // namespace switchyard::jit
