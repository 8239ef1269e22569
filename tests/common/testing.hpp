// A small test harness: no external dependency, so the same tests build on the CPU CI machine and
// on the GPU machine (which has no GoogleTest).
//
//   SY_TEST(suite_name, case_name) { SY_CHECK(a == b); SY_CHECK_EQ(a, b); SY_CHECK_THROWS(expr, Type); }
//   int main(int argc, char** argv) { return switchyard::testing::run_all(argc, argv); }
//
// A test that cannot run (no GPU) calls SY_SKIP("reason"): the reason is printed and, if every
// test skipped, the binary exits with kSkipExitCode (77), which CTest reports as "skipped".
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace switchyard::testing {

constexpr int kSkipExitCode = 77;

struct TestFailure {
    std::string message;
};
struct TestSkipped {
    std::string reason;
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

// Runs tests whose name contains argv[1] (if given). Returns 0, 1 (failure) or kSkipExitCode.
inline int run_all(int argc, char** argv) {
    register_test_kernels();
    const char* filter = argc > 1 ? argv[1] : nullptr;
    int passed = 0, failed = 0, skipped = 0;
    for (auto& test : registry()) {
        if (filter && test.name.find(filter) == std::string::npos) continue;
        std::printf("[ RUN  ] %s\n", test.name.c_str());
        std::fflush(stdout);
        try {
            test.body();
            std::printf("[  OK  ] %s\n", test.name.c_str());
            ++passed;
        } catch (const TestSkipped& skip) {
            std::printf("[ SKIP ] %s: %s\n", test.name.c_str(), skip.reason.c_str());
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

#define SY_SKIP(reason)                        \
    throw ::switchyard::testing::TestSkipped { \
        reason                                 \
    }

#define SY_TEST_MAIN()                                     \
    int main(int argc, char** argv) {                      \
        return ::switchyard::testing::run_all(argc, argv); \
    }
