// Helpers the prep operators share, and test hooks (not part of the component's API).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace trainyard::prep::internal {

// Decodes the code point at s[i] (i < s.size()) into *cp and returns its length in bytes. A byte
// that does not start a well-formed sequence (overlong forms, surrogates and values past
// U+10FFFF are ill-formed) gives *cp = -1 and length 1.
size_t DecodeUtf8(std::string_view s, size_t i, int32_t* cp);

// Appends the UTF-8 encoding of the scalar value c.
void AppendUtf8(int32_t c, std::string* out);

bool IsValidUtf8(std::string_view s);

// Whether MinHasher may use its AVX2 kernel (when the CPU has it); returns the previous setting.
// Tests turn it off to check the scalar path against the same reference.
bool SetMinHashAvx2ForTest(bool allowed);

}  // namespace trainyard::prep::internal
