// nvcc in a subprocess, for kernels against the NCCL device headers (see nvcc_program.hpp).
#include "jit/nvcc_program.hpp"

#include <cxxabi.h>
#include <elf.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <regex>
#include <sstream>

#include "jit/disk_cache.hpp"
#include "jit/embedded_headers.hpp"
#include "jit/hash.hpp"
#include "jit/subprocess.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::jit {
namespace {

std::string temp_path(const std::string& stem) {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir && *dir ? dir : "/tmp") + "/switchyard-" + stem + unique_temp_suffix();
}

int version_code_of(const std::string& nccl_h) {
    std::ifstream in(nccl_h);
    std::string line;
    const std::regex define("^#define NCCL_VERSION_CODE ([0-9]+)");
    std::smatch match;
    while (std::getline(in, line))
        if (std::regex_search(line, match, define)) return std::stoi(match[1]);
    return 0;
}

NvccToolchain find_toolchain() {
    NvccToolchain toolchain;
#if defined(SY_BUILD_NCCL_INCLUDE_DIR) && defined(SY_BUILD_NCCL_VERSION_CODE)
    toolchain.nccl_include = SY_BUILD_NCCL_INCLUDE_DIR;
    toolchain.nccl_version_code = SY_BUILD_NCCL_VERSION_CODE;
#else
    throw UnsupportedError(
        "switchyard jit: this library was built without the NCCL device headers (nccl.h, nccl_device.h), so it "
        "cannot compile GIN kernels; reconfigure with SWITCHYARD_NCCL_INCLUDE_DIR pointing at them");
#endif
    const std::string nccl_h = toolchain.nccl_include + "/nccl.h";
    const int found = version_code_of(nccl_h);
    if (found != toolchain.nccl_version_code)
        throw UnsupportedError("switchyard jit: the NCCL headers the library was built with (" + nccl_h + ", version code " +
                               std::to_string(toolchain.nccl_version_code) + ") " +
                               (found ? "now say version code " + std::to_string(found) : std::string("are gone")) +
                               "; GIN kernels must be compiled against the headers the library was built with: "
                               "rebuild the library");
    toolchain.nvcc = find_nvcc();
    if (toolchain.nvcc.empty())
        throw UnsupportedError(
            "switchyard jit: GIN kernels are compiled with nvcc, which was found neither next to the CUDA toolkit "
            "the library was built with nor in $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin or PATH");
    const std::string log = temp_path("nvcc-version");
    const int status = run_to_file({toolchain.nvcc, "--version"}, log, true);
    const auto text = read_file(log);
    ::unlink(log.c_str());
    if (status != 0 || !text)
        throw UnsupportedError("switchyard jit: " + toolchain.nvcc + " --version failed (exit status " +
                               std::to_string(status) + ")");
    std::istringstream lines(*text);
    for (std::string line; std::getline(lines, line);)
        if (line.find("release") != std::string::npos) toolchain.version = line;
    if (toolchain.version.empty()) toolchain.version = *text;
    return toolchain;
}

// The embedded headers as files for nvcc, once per header digest: written under a temporary name,
// then renamed into place (a concurrent writer's complete copy is as good as ours).
std::string header_dir(const std::string& cache_dir) {
    const std::string dir = cache_dir + "/nvcc-include-" + hash128_hex(headers_digest());
    if (std::filesystem::exists(dir + "/.complete")) return dir;
    const std::string temp = dir + unique_temp_suffix();
    for (const EmbeddedFile& file : all_headers()) {
        const std::filesystem::path path = std::filesystem::path(temp) / file.path;
        std::filesystem::create_directories(path.parent_path());
        write_file_atomic(path.string(), std::string(file.contents, file.size));
    }
    write_file_atomic(temp + "/.complete", "");
    std::error_code error;
    std::filesystem::rename(temp, dir, error);
    if (error) std::filesystem::remove_all(temp, error);  // another process won; its copy is complete
    if (!std::filesystem::exists(dir + "/.complete"))
        throw Error("jit cache: cannot write the device headers for nvcc under " + dir +
                    "; set SWITCHYARD_CACHE_DIR to a writable directory");
    return dir;
}

std::string without_spaces(std::string text) {
    text.erase(std::remove(text.begin(), text.end(), ' '), text.end());
    return text;
}

}  // namespace

std::string find_nvcc() {
    std::vector<std::string> dirs = toolkit_bin_dirs();
    for (std::string& dir : path_dirs()) dirs.push_back(std::move(dir));
    const std::string found = find_program("nvcc", dirs);
    if (found.empty()) return found;
    std::error_code error;
    const auto canonical = std::filesystem::weakly_canonical(found, error);
    return error ? found : canonical.string();
}

const NvccToolchain& nvcc_toolchain() {
    // Not a function-local static initialised by a throwing call: a failure is retried.
    static std::mutex mutex;
    static std::optional<NvccToolchain> found;
    std::lock_guard<std::mutex> lock(mutex);
    if (!found) found = find_toolchain();
    return *found;
}

std::vector<std::string> nvcc_flags(const CompileOptions& options, const NvccToolchain& toolchain) {
    std::vector<std::string> flags = {
        "-cubin",
        "-arch=" + options.arch,
        "-std=c++20",
        "-O3",
        "--ptxas-options=-v",  // registers and spills in the log, as with NVRTC
        "-DSY_JIT_BUILD=1",
        "-DSY_NET_WITH_NCCL=1",  // transport/net.cuh pulls in the GIN backend
        "-I" + toolchain.nccl_include,
    };
    // No fast math, as with NVRTC.
    if (options.line_info) flags.push_back("-lineinfo");
    for (const auto& define : options.defines) flags.push_back("-D" + define);
    return flags;
}

NvrtcResult run_nvcc(const KernelSource& source, const std::string& generated, const std::vector<std::string>& flags,
                     const std::string& cache_dir) {
    const NvccToolchain& toolchain = nvcc_toolchain();
    const std::string headers = header_dir(cache_dir);
    const std::string stem = temp_path(source.family);
    const std::string input = stem + ".cu", output = stem + ".cubin", log_path = stem + ".log";
    write_file_atomic(input, generated);
    std::vector<std::string> args = {toolchain.nvcc};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"-I" + headers, "-o", output, input});
    const int status = run_to_file(args, log_path, true);
    NvrtcResult result;
    result.log = read_file(log_path).value_or("");
    const auto cubin = read_file(output);
    ::unlink(input.c_str());
    ::unlink(output.c_str());
    ::unlink(log_path.c_str());
    if (status != 0 || !cubin) {
        std::string command;
        for (const auto& arg : args) command += " " + arg;
        throw CompileError("jit: nvcc could not compile kernel " + source.kernel + " (family " + source.family +
                           ", header " + source.header + "; exit status " + std::to_string(status) +
                           ")\n--- nvcc output ---\n" + result.log + "--- generated source ---\n" + generated +
                           "--- command ---\n" + command + "\n");
    }
    result.cubin = *cubin;
    result.lowered_name = find_entry_symbol(result.cubin, source.kernel);
    if (result.lowered_name.empty())
        throw CompileError("jit: the cubin nvcc made for " + source.kernel + " (family " + source.family +
                           ") has no entry function of that name");
    return result;
}

std::string find_entry_symbol(const std::string& cubin, const std::string& kernel) {
    // ELF64: the symbol table names the entry functions (STT_FUNC with the CUDA entry flag in
    // st_other, 0x10).
    auto in_bounds = [&](uint64_t offset, uint64_t bytes) { return offset <= cubin.size() && bytes <= cubin.size() - offset; };
    if (!in_bounds(0, sizeof(Elf64_Ehdr)) || cubin.compare(0, 4, "\x7f" "ELF") != 0) return {};
    Elf64_Ehdr header;
    std::memcpy(&header, cubin.data(), sizeof(header));
    if (header.e_ident[EI_CLASS] != ELFCLASS64 || header.e_shentsize != sizeof(Elf64_Shdr) ||
        !in_bounds(header.e_shoff, uint64_t(header.e_shnum) * sizeof(Elf64_Shdr)))
        return {};
    std::vector<Elf64_Shdr> sections(header.e_shnum);
    std::memcpy(sections.data(), cubin.data() + header.e_shoff, sections.size() * sizeof(Elf64_Shdr));
    std::vector<std::string> entries;
    for (const Elf64_Shdr& section : sections) {
        if (section.sh_type != SHT_SYMTAB || section.sh_link >= sections.size()) continue;
        const Elf64_Shdr& strings = sections[section.sh_link];
        if (!in_bounds(section.sh_offset, section.sh_size) || !in_bounds(strings.sh_offset, strings.sh_size)) continue;
        for (uint64_t at = 0; at + sizeof(Elf64_Sym) <= section.sh_size; at += sizeof(Elf64_Sym)) {
            Elf64_Sym symbol;
            std::memcpy(&symbol, cubin.data() + section.sh_offset + at, sizeof(symbol));
            if (ELF64_ST_TYPE(symbol.st_info) != STT_FUNC || (symbol.st_other & 0x10) == 0) continue;
            if (symbol.st_name >= strings.sh_size) continue;
            const char* name = cubin.data() + strings.sh_offset + symbol.st_name;
            entries.emplace_back(name, strnlen(name, strings.sh_size - symbol.st_name));
        }
    }
    const std::string wanted = without_spaces(kernel) + "(";
    for (const std::string& entry : entries) {
        int status = 0;
        char* demangled = abi::__cxa_demangle(entry.c_str(), nullptr, nullptr, &status);
        if (!demangled) continue;
        const std::string text = without_spaces(demangled);
        std::free(demangled);
        if (text.find(wanted) != std::string::npos) return entry;
    }
    return entries.size() == 1 ? entries.front() : std::string();
}

}  // namespace switchyard::jit
