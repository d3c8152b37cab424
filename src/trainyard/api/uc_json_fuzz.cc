// libFuzzer target for the Unity Catalog API's request decoders (uc_json.h, uc_model_json.h):
// any body must be decoded or refused with InvalidArgument, never crash; a version number
// is positive; a decoded table's columns keep
// the order and count of the body's array, and paging never exceeds UC's maximum.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "trainyard/api/uc_json.h"
#include "trainyard/api/uc_model_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainyard;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto body = ParseJsonObject(text);
  if (!body.ok()) return 0;
  auto refused_well = [](const Status& s) {
    if (!s.ok() && s.code() != StatusCode::kInvalidArgument) std::abort();
  };
  refused_well(api::DecodeCreateCatalog(*body).status());
  refused_well(api::DecodeCreateSchema(*body).status());
  refused_well(api::DecodeCreateVolume(*body).status());
  refused_well(api::DecodeCreateFunction(*body).status());
  refused_well(api::DecodeUpdate(*body).status());
  refused_well(api::DecodeCreateRegisteredModel(*body).status());
  refused_well(api::DecodeCreateModelVersion(*body).status());
  refused_well(api::DecodeUpdateModelVersion(*body).status());
  refused_well(api::DecodeVolumeCredentialRequest(*body).status());
  refused_well(api::DecodePathCredentialRequest(*body).status());
  auto credential = api::DecodeModelVersionCredentialRequest(*body);
  refused_well(credential.status());
  if (credential.ok() && credential->version < 1) std::abort();
  auto version = api::ParseModelVersionNumber("version", text);
  refused_well(version.status());
  if (version.ok() && *version < 1) std::abort();
  auto table = api::DecodeCreateTable(*body);
  refused_well(table.status());
  if (table.ok()) {
    const auto* columns = body->if_contains("columns");
    size_t want = columns != nullptr && columns->is_array() ? columns->as_array().size() : 0;
    if (table->columns.size() != want) std::abort();
  }
  auto page = api::ReadUcPage(*body);
  refused_well(page.status());
  if (page.ok() && (page->max_results < 1 || page->max_results > api::kUcMaxResults)) {
    std::abort();
  }
  return 0;
}
