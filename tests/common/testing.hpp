// A small test framework: no external dependency, so the same tests build on the CPU CI machine and
// on the GPU machine (which has no GoogleTest).
//
//   SY_TEST(suite_name, case_name) { SY_CHECK(a == b); SY_CHECK_EQ(a, b); SY_CHECK_THROWS(expr, Type); }
//   SY_TEST_MAIN()   // or: int main(int argc, char** argv) { return switchyard::testing::run_all(argc,
//   argv); }
//
// Every test binary takes (run_all):
//   --list            print the case names ("suite.case"), one per line, and exit 0
//   --case NAME       run exactly the case NAME (CTest runs each case as its own entry this way)
//   --skip-file PATH  when a case skips, append "NAME: reason" to PATH (read back by CTest's post-test
//                     step, which prints why each case skipped: cmake/print_skip_reasons.cmake)
//   FILTER            run the cases whose name contains FILTER; no argument runs every case
//
// A case that cannot run (no GPU) calls SY_SKIP("reason"): the reason is printed and, if no case
// passed and at least one skipped, the binary exits with kSkipExitCode (77), which CTest reports as
// "skipped". A failed case makes the exit code 1; a bad command line, or a filter or case name that
// selects nothing, exits 2.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace switchyard::testing {

constexpr int kSkipExitCode = 77;

// Thrown by the SY_CHECK macros. Both derive from std::exception so code that knows nothing of the
// framework (the rank runner in harness/) reports them with their message.
struct TestFailure : std::exception {
    explicit TestFailure(std::string text) : message(std::move(text)) {}
    const char* what() const noexcept override { return message.c_str(); }
    std::string message;
};
struct TestSkipped : std::exception {
    explicit TestSkipped(std::string text) : reason(std::move(text)), what_("skipped: " + reason) {}
    const char* what() const noexcept override { return what_.c_str(); }
    std::string reason;

  private:
    std::string what_;
};

struct TestCase {
    std::string name;
    std::function<void()> body;
};

inline std::vector<TestCase>& registry() {
    static std::vector<TestCase> tests;
    return tests;
}

struct Registrar {
    Registrar(const char* name, std::function<void()> body) { registry().push_back({name, std::move(body)}); }
};

template <typename T>
std::string to_text(const T& value) {
    std::ostringstream out;
    if constexpr (std::is_same_v<T, unsigned char> || std::is_same_v<T, signed char> ||
                  std::is_same_v<T, char>)
        out << static_cast<int>(value);
    else
        out << value;
    return out.str();
}

[[noreturn]] inline void fail(const char* file, int line, const std::string& what) {
    std::ostringstream out;
    out << file << ":" << line << ": " << what;
    throw TestFailure{out.str()};
}

// Makes the tests' own device kernels (tests/kernels/) visible to the JIT (test_kernels.cpp).
void register_test_kernels();

namespace detail {

struct RunOptions {
    bool list = false;
    std::string exact_case;  // --case
    std::string filter;      // positional substring
    std::string skip_file;   // --skip-file
};

// Returns false (after printing why) for a command line it does not understand.
inline bool parse_run_options(int argc, char** argv, RunOptions& options) {
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        auto value = [&](std::string& into) {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "%s: %s needs a value\n", argv[0], arg.c_str());
                return false;
            }
            into = argv[++i];
            return true;
        };
        if (arg == "--list") {
            options.list = true;
        } else if (arg == "--case") {
            if (!value(options.exact_case)) return false;
        } else if (arg == "--skip-file") {
            if (!value(options.skip_file)) return false;
        } else if (arg == "-h" || arg == "--help") {
            std::printf("usage: %s [--list] [--case NAME] [--skip-file PATH] [FILTER]\n", argv[0]);
            std::exit(0);
        } else if (arg.rfind("--", 0) == 0 || !options.filter.empty()) {
            std::fprintf(stderr, "%s: unexpected argument '%s' (see --help)\n", argv[0], arg.c_str());
            return false;
        } else {
            options.filter = arg;
        }
    }
    return true;
}

inline void record_skip(const std::string& skip_file, const std::string& name, const std::string& reason) {
    if (skip_file.empty()) return;
    const std::filesystem::path path(skip_file);
    std::error_code ignored;
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ignored);
    std::ofstream(path, std::ios::app) << name << ": " << reason << "\n";
}

}  // namespace detail

// Runs the cases the command line selects (see the top of this file). Returns 0, 1 (a failure),
// 2 (bad command line, nothing selected) or kSkipExitCode.
inline int run_all(int argc, char** argv) {
    detail::RunOptions options;
    if (!detail::parse_run_options(argc, argv, options)) return 2;
    if (options.list) {
        for (const auto& test : registry()) std::printf("%s\n", test.name.c_str());
        return 0;
    }
    register_test_kernels();
    int passed = 0, failed = 0, skipped = 0;
    for (auto& test : registry()) {
        if (!options.exact_case.empty() && test.name != options.exact_case) continue;
        if (test.name.find(options.filter) == std::string::npos) continue;
        std::printf("[ RUN  ] %s\n", test.name.c_str());
        std::fflush(stdout);
        try {
            test.body();
            std::printf("[  OK  ] %s\n", test.name.c_str());
            ++passed;
        } catch (const TestSkipped& skip) {
            std::printf("[ SKIP ] %s: %s\n", test.name.c_str(), skip.reason.c_str());
            detail::record_skip(options.skip_file, test.name, skip.reason);
            ++skipped;
        } catch (const TestFailure& failure) {
            std::printf("[ FAIL ] %s\n  %s\n", test.name.c_str(), failure.message.c_str());
            ++failed;
        } catch (const std::exception& error) {
            std::printf("[ FAIL ] %s\n  unexpected exception: %s\n", test.name.c_str(), error.what());
            ++failed;
        }
        std::fflush(stdout);
    }
    if (passed + failed + skipped == 0) {
        std::fprintf(stderr, "%s: no case %s '%s' (--list shows them)\n", argv[0],
                     options.exact_case.empty() ? "matches" : "is named",
                     options.exact_case.empty() ? options.filter.c_str() : options.exact_case.c_str());
        return 2;
    }
    std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    if (failed > 0) return 1;
    if (passed == 0 && skipped > 0) return kSkipExitCode;
    return 0;
}

}  // namespace switchyard::testing

#define SY_TEST_CONCAT_(a, b) a##b
#define SY_TEST_CONCAT(a, b) SY_TEST_CONCAT_(a, b)
#define SY_TEST(suite, name)                                                                                \
    static void SY_TEST_CONCAT(sy_test_, SY_TEST_CONCAT(suite, SY_TEST_CONCAT(_, name)))();                 \
    static ::switchyard::testing::Registrar SY_TEST_CONCAT(sy_registrar_,                                   \
                                                           SY_TEST_CONCAT(suite, SY_TEST_CONCAT(_, name)))( \
        #suite "." #name, &SY_TEST_CONCAT(sy_test_, SY_TEST_CONCAT(suite, SY_TEST_CONCAT(_, name))));       \
    static void SY_TEST_CONCAT(sy_test_, SY_TEST_CONCAT(suite, SY_TEST_CONCAT(_, name)))()

#define SY_CHECK(cond)                                                                        \
    do {                                                                                      \
        if (!(cond)) ::switchyard::testing::fail(__FILE__, __LINE__, "check failed: " #cond); \
    } while (0)

#define SY_CHECK_MSG(cond, msg)                                             \
    do {                                                                    \
        if (!(cond)) {                                                      \
            std::ostringstream sy_msg_;                                     \
            sy_msg_ << "check failed: " #cond " -- " << msg;                \
            ::switchyard::testing::fail(__FILE__, __LINE__, sy_msg_.str()); \
        }                                                                   \
    } while (0)

#define SY_CHECK_EQ(a, b)                                                                    \
    do {                                                                                     \
        const auto& sy_a_ = (a);                                                             \
        const auto& sy_b_ = (b);                                                             \
        if (!(sy_a_ == sy_b_))                                                               \
            ::switchyard::testing::fail(__FILE__, __LINE__,                                  \
                                        "expected " #a " == " #b ", got " +                  \
                                            ::switchyard::testing::to_text(sy_a_) + " vs " + \
                                            ::switchyard::testing::to_text(sy_b_));          \
    } while (0)

// Checks that `expr` throws `type` and, if `needle` is non-empty, that what() contains it.
#define SY_CHECK_THROWS_WITH(expr, type, needle)                                                         \
    do {                                                                                                 \
        bool sy_thrown_ = false;                                                                         \
        try {                                                                                            \
            (void)(expr);                                                                                \
        } catch (const type& sy_e_) {                                                                    \
            sy_thrown_ = true;                                                                           \
            const std::string sy_what_ = sy_e_.what();                                                   \
            if (std::string(needle).size() && sy_what_.find(needle) == std::string::npos)                \
                ::switchyard::testing::fail(                                                             \
                    __FILE__, __LINE__,                                                                  \
                    "message of " #expr " lacks '" + std::string(needle) + "': " + sy_what_);            \
        }                                                                                                \
        if (!sy_thrown_) ::switchyard::testing::fail(__FILE__, __LINE__, #expr " did not throw " #type); \
    } while (0)
#define SY_CHECK_THROWS(expr, type) SY_CHECK_THROWS_WITH(expr, type, "")

#define SY_SKIP(reason) throw ::switchyard::testing::TestSkipped(reason)

#define SY_TEST_MAIN()                                     \
    int main(int argc, char** argv) {                      \
        return ::switchyard::testing::run_all(argc, argv); \
    }
