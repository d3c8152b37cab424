// MaskKind: the kinds of column mask (column_mask.h says what each does), as a light header
// the catalog's value types include.
#pragma once

#include <string_view>

#include "trainyard/common/status.h"

namespace trainyard::tables {

enum class MaskKind { kRedact, kHash, kNull, kLast4 };

// "redact", "hash", "null", "last4".
std::string_view MaskKindName(MaskKind kind);
// The kind named `text` (case-insensitive); InvalidArgument naming `field` and the kinds.
Result<MaskKind> ParseMaskKind(std::string_view text, std::string_view field = "kind");

}  // namespace trainyard::tables
