// A minimal JSON value and serializer for benchmark results (no external dependency).
//
// Objects keep their keys in insertion order so result files diff cleanly between runs.
// Non-finite doubles are written as null (JSON has no NaN/inf).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace switchyard::bench {

class JsonValue;
using JsonArray = std::vector<JsonValue>;
using JsonObject = std::vector<std::pair<std::string, JsonValue>>;

class JsonValue {
  public:
    JsonValue() = default;  // null
    JsonValue(std::nullptr_t) {}
    JsonValue(bool value) : value_(value) {}
    JsonValue(int value) : value_(static_cast<int64_t>(value)) {}
    JsonValue(int64_t value) : value_(value) {}
    JsonValue(uint64_t value) : value_(static_cast<int64_t>(value)) {}
    JsonValue(double value) : value_(value) {}
    JsonValue(const char* value) : value_(std::string(value)) {}
    JsonValue(std::string value) : value_(std::move(value)) {}
    JsonValue(JsonArray value) : value_(std::make_shared<JsonArray>(std::move(value))) {}
    JsonValue(JsonObject value) : value_(std::make_shared<JsonObject>(std::move(value))) {}

    // Copies are deep, so editing a copy never changes the original.
    JsonValue(const JsonValue& other);
    JsonValue& operator=(const JsonValue& other);
    JsonValue(JsonValue&&) noexcept = default;
    JsonValue& operator=(JsonValue&&) noexcept = default;

    // Appends (or replaces) `key` of an object value; throws if this is not an object.
    JsonValue& set(const std::string& key, JsonValue value);
    // Appends to an array value; throws if this is not an array.
    void push_back(JsonValue value);

    // Pretty-printed with `indent` spaces per level (0 = one line).
    std::string dump(int indent = 2) const;

  private:
    void write(std::string& out, int indent, int depth) const;

    // Containers are held by pointer because the variant cannot hold an incomplete type by value.
    std::variant<std::monostate, bool, int64_t, double, std::string, std::shared_ptr<JsonArray>,
                 std::shared_ptr<JsonObject>>
        value_;
};

// `text` with JSON string escaping, including the quotes.
std::string json_quote(const std::string& text);

}  // namespace switchyard::bench
