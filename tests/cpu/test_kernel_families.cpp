// The kernel catalog (launch/kernel_catalog.hpp): every instantiation a launcher can produce. On the
// CPU the catalog is checked to be well formed and one instantiation per family compiles through
// the JIT for sm_90a with no register spills (two CI cores: seconds, not minutes). The whole
// catalog compiles only with SWITCHYARD_TEST_FULL_CATALOG=1 (a test tool variable; the GPU suite,
// scripts/gpu_suite.sh, sets it); without it that case skips and says so.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/testing.hpp"
#include "jit/embedded_headers.hpp"
#include "jit/jit.hpp"
#include "jit/nvrtc_program.hpp"
#include "launch/kernel_catalog.hpp"

using namespace switchyard;

namespace {

// The first instantiation of each family in the launchers' catalog, and the tests' own kernels.
std::vector<jit::KernelSource> one_per_family() {
    std::vector<jit::KernelSource> sources;
    for (const jit::KernelSource& source : launch::kernel_catalog()) {
        bool seen = false;
        for (const auto& known : sources) seen = seen || known.family == source.family;
        if (!seen) sources.push_back(source);
    }
    sources.push_back(
        {"peer_store", "switchyard/testing/peer_store.cuh", "switchyard::device::peer_store_kernel"});
    sources.push_back({"coresidency_probe", "switchyard/testing/coresidency_probe.cuh",
                       "switchyard::device::coresidency_probe_kernel"});
    return sources;
}

// Compiles for sm_90a and checks the cubin and the spill count; returns the one-line summary.
std::string compile_checked(const jit::KernelSource& source) {
    jit::CompileOptions options;
    options.arch = "sm_90a";
    const jit::CompiledKernel compiled = jit::compile(source, options);
    SY_CHECK(compiled.cubin.size() > 4 && compiled.cubin.compare(0, 4,
                                                                 "\x7f"
                                                                 "ELF") == 0);
    SY_CHECK_MSG(compiled.spill_bytes == 0, source.kernel << " spills " << compiled.spill_bytes << " bytes");
    char line[512];
    std::snprintf(line, sizeof(line), "  %-16s %s: %d registers, %d spill bytes, %d stack bytes%s",
                  source.family.c_str(), source.kernel.c_str(), compiled.num_registers, compiled.spill_bytes,
                  compiled.stack_bytes, compiled.cache_hit ? " (cache hit)" : "");
    return line;
}

size_t count_families(const std::vector<jit::KernelSource>& sources) {
    std::set<std::string> families;
    for (const auto& source : sources) families.insert(source.family);
    return families.size();
}

}  // namespace

// A warp collective (shuffle, vote, match, and the helpers built on them) names every lane of the
// warp, so every lane must execute it. One written as the right operand of `&&`, `||` or `?:` runs
// only in the lanes where the left side lets it: undefined behaviour, which on the GPU faulted
// (illegal instruction, garbage shuffled addresses) in the LL combine across nodes. A condition
// that is a compile-time constant (kName) is uniform and allowed.
SY_TEST(KernelSources, WarpCollectivesAreNeverShortCircuited) {
    const std::regex comment(R"(//[^\n]*)");
    const std::regex guarded(
        R"(([A-Za-z_][A-Za-z0-9_]*)?\s*(&&|\|\||\?)\s*(first_lane_with|position_among_selected|__shfl\w*_sync|__ballot_sync|__match_any_sync|__match_all_sync|__any_sync|__all_sync|__reduce_\w+_sync|warp_inclusive_sum|warp_exclusive_scan)\s*\()");
    int scanned = 0;
    for (const jit::EmbeddedFile& file : jit::all_headers()) {
        const std::string code = std::regex_replace(std::string(file.contents, file.size), comment, "");
        ++scanned;
        for (auto it = std::sregex_iterator(code.begin(), code.end(), guarded); it != std::sregex_iterator();
             ++it) {
            const std::string condition = (*it)[1].str();
            const bool constant = (*it)[2].str() == "?" && condition.size() > 1 && condition[0] == 'k' &&
                                  condition[1] >= 'A' && condition[1] <= 'Z';
            SY_CHECK_MSG(constant, file.path << ": warp collective behind a condition: " << it->str());
        }
    }
    SY_CHECK(scanned > 20);
}

SY_TEST(KernelCatalog, WellFormed) {
    const std::vector<std::pair<const char*, std::vector<jit::KernelSource>>> launchers = {
        {"barrier", launch::barrier_catalog()}, {"routing", launch::routing_catalog()},
        {"ht", launch::ht_catalog({})},         {"ll", launch::ll_catalog({})},
        {"hier", launch::hier_catalog({})},
    };
    // Every launcher lists its family (or families), and no family belongs to two launchers.
    std::map<std::string, std::string> owner;  // family -> launcher
    std::vector<jit::KernelSource> concatenated;
    for (const auto& [launcher, sources] : launchers) {
        SY_CHECK_MSG(!sources.empty(), "the " << launcher << " launcher lists no kernel");
        for (const auto& source : sources) {
            const auto [it, inserted] = owner.emplace(source.family, launcher);
            SY_CHECK_MSG(inserted || it->second == launcher,
                         "family " << source.family << " is listed by " << it->second << " and " << launcher);
            concatenated.push_back(source);
        }
    }
    // The catalog is every launcher's list: every family is present.
    const std::vector<jit::KernelSource> catalog = launch::kernel_catalog();
    SY_CHECK_EQ(catalog.size(), concatenated.size());
    for (size_t i = 0; i < std::min(catalog.size(), concatenated.size()); ++i)
        SY_CHECK_MSG(catalog[i].kernel == concatenated[i].kernel, "entry " << i << ": " << catalog[i].kernel);
    // Unique instantiations, each one the JIT accepts (family, header among the embedded ones, name).
    std::set<std::string> kernels;
    for (const auto& source : catalog) {
        SY_CHECK_MSG(kernels.insert(source.kernel).second, "listed twice: " << source.kernel);
        jit::validate_source(source);
    }
    std::printf("  %zu instantiations in %zu families\n", catalog.size(), count_families(catalog));
}

SY_TEST(KernelFamilies, CompileForSm90aWithoutSpills) {
    for (const auto& source : one_per_family()) std::printf("%s\n", compile_checked(source).c_str());
}

// Every routing instantiation (eight, about a second each): its look back keeps as many 64-bit
// words in flight as the 64-register cap allows, and the instantiation the case above compiles is
// the last to spill when that count grows (twelve spilled in the other seven only).
SY_TEST(KernelFamilies, EveryRoutingInstantiationCompilesWithoutSpills) {
    for (const auto& source : launch::routing_catalog()) std::printf("%s\n", compile_checked(source).c_str());
}

SY_TEST(KernelFamilies, CompileForSm100a) {
    // One family is enough to show the headers are not Hopper-only.
    jit::CompileOptions options;
    options.arch = "sm_100a";
    const jit::CompiledKernel compiled = jit::compile(launch::routing_catalog()[0], options);
    SY_CHECK(compiled.cubin.size() > 4);
}

// The catalogs SWITCHYARD_TEST_FULL_CATALOG asks for: "1" = every family at the catalog shape; else
// a comma-separated list of [ht:|ll:]HIDDENxTOPK (HT-side families, LL families, or all), e.g.
// "all:7168x8,ht:256x4,ll:2560x9", with which the GPU suite warms the JIT cache for its test shapes
// on every core before the GPU cases run.
std::vector<jit::KernelSource> requested_catalog(const std::string& spec) {
    if (spec == "1") return launch::kernel_catalog();
    std::vector<jit::KernelSource> sources;
    std::set<std::string> seen;
    size_t at = 0;
    while (at <= spec.size()) {
        const size_t comma = std::min(spec.find(',', at), spec.size());
        std::string item = spec.substr(at, comma - at), families = "all";
        at = comma + 1;
        if (const size_t colon = item.find(':'); colon != std::string::npos) {
            families = item.substr(0, colon);
            item = item.substr(colon + 1);
        }
        launch::CatalogShape shape;
        char x = 0;
        if (std::sscanf(item.c_str(), "%d%c%d", &shape.hidden, &x, &shape.topk) != 3 || x != 'x' ||
            (families != "all" && families != "ht" && families != "ll"))
            SY_CHECK_MSG(false, "SWITCHYARD_TEST_FULL_CATALOG item '" << item << "' is not [ht:|ll:]HxK");
        std::vector<jit::KernelSource> part;
        if (families != "ll")
            for (auto family : {launch::barrier_catalog(), launch::routing_catalog(),
                                launch::ht_catalog(shape), launch::hier_catalog(shape)})
                part.insert(part.end(), family.begin(), family.end());
        if (families != "ht") {
            const auto ll = launch::ll_catalog(shape);
            part.insert(part.end(), ll.begin(), ll.end());
        }
        for (const auto& source : part)
            if (seen.insert(source.kernel).second) sources.push_back(source);
    }
    return sources;
}

SY_TEST(KernelCatalog, CompileEveryInstantiation) {
    const char* full = std::getenv("SWITCHYARD_TEST_FULL_CATALOG");
    if (!full || !*full) {
        const std::vector<jit::KernelSource> catalog = launch::kernel_catalog();
        SY_SKIP("compiled one instantiation per family (" + std::to_string(count_families(catalog)) +
                " families, KernelFamilies.CompileForSm90aWithoutSpills); all " +
                std::to_string(catalog.size()) +
                " compile with SWITCHYARD_TEST_FULL_CATALOG=1, as scripts/gpu_suite.sh runs it");
    }
    const std::vector<jit::KernelSource> catalog = requested_catalog(full);
    // NVRTC compiles in parallel (jit::compile is thread-safe); a failure names its instantiation.
    const unsigned workers = std::clamp(std::thread::hardware_concurrency(), 1u, 32u);
    std::atomic<size_t> next{0};
    std::mutex mutex;
    std::vector<std::string> lines(catalog.size()), failures;
    std::vector<std::thread> threads;
    for (unsigned w = 0; w < workers; ++w)
        threads.emplace_back([&] {
            for (size_t i = next++; i < catalog.size(); i = next++) {
                try {
                    lines[i] = compile_checked(catalog[i]);
                } catch (const std::exception& error) {
                    std::lock_guard<std::mutex> lock(mutex);
                    failures.push_back(catalog[i].kernel + ": " + error.what());
                }
            }
        });
    for (auto& thread : threads) thread.join();
    for (const std::string& line : lines)
        if (!line.empty()) std::printf("%s\n", line.c_str());
    for (const std::string& failure : failures) std::printf("  FAILED %s\n", failure.c_str());
    SY_CHECK_MSG(failures.empty(), failures.size() << " of " << catalog.size() << " instantiations failed");
    std::printf("  compiled all %zu instantiations of %zu families\n", catalog.size(),
                count_families(catalog));
}

SY_TEST_MAIN()
