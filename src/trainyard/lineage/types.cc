#include "trainyard/lineage/types.h"

#include <array>
#include <charconv>
#include <set>
#include <utility>

#include "trainyard/common/json.h"
#include "trainyard/common/strings.h"

namespace trainyard::lineage {
namespace {

constexpr std::array<std::pair<NodeType, std::string_view>, 6> kNodeTypes = {{
    {NodeType::kTable, "table"},
    {NodeType::kJob, "job"},
    {NodeType::kRun, "run"},
    {NodeType::kCheckpoint, "checkpoint"},
    {NodeType::kModelVersion, "model_version"},
    {NodeType::kEndpoint, "endpoint"},
}};

constexpr std::array<std::pair<EdgeKind, std::string_view>, 7> kEdgeKinds = {{
    {EdgeKind::kRead, "read"},
    {EdgeKind::kWrote, "wrote"},
    {EdgeKind::kProduced, "produced"},
    {EdgeKind::kLoggedTo, "logged_to"},
    {EdgeKind::kCheckpointed, "checkpointed"},
    {EdgeKind::kServes, "serves"},
    {EdgeKind::kDerivedFrom, "derived_from"},
}};

// The node types an edge of each kind may join, from → to.
struct EdgeShape {
  EdgeKind kind;
  NodeType from;
  NodeType to;
};
constexpr std::array<EdgeShape, 14> kEdgeShapes = {{
    {EdgeKind::kRead, NodeType::kTable, NodeType::kJob},
    {EdgeKind::kRead, NodeType::kTable, NodeType::kRun},
    {EdgeKind::kRead, NodeType::kCheckpoint, NodeType::kJob},
    {EdgeKind::kWrote, NodeType::kJob, NodeType::kTable},
    {EdgeKind::kWrote, NodeType::kRun, NodeType::kTable},
    {EdgeKind::kWrote, NodeType::kEndpoint, NodeType::kTable},
    {EdgeKind::kProduced, NodeType::kRun, NodeType::kModelVersion},
    {EdgeKind::kProduced, NodeType::kJob, NodeType::kModelVersion},
    {EdgeKind::kLoggedTo, NodeType::kJob, NodeType::kRun},
    {EdgeKind::kCheckpointed, NodeType::kJob, NodeType::kCheckpoint},
    {EdgeKind::kServes, NodeType::kModelVersion, NodeType::kEndpoint},
    {EdgeKind::kDerivedFrom, NodeType::kTable, NodeType::kTable},
    {EdgeKind::kDerivedFrom, NodeType::kCheckpoint, NodeType::kModelVersion},
    {EdgeKind::kDerivedFrom, NodeType::kModelVersion, NodeType::kModelVersion},
}};

Status Invalid(std::string_view field, const std::string& what) {
  return Status::InvalidArgument(std::string(field) + " " + what);
}

bool HasControlCharacter(std::string_view s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return true;
  }
  return false;
}

// One part of a table's three-level name: letters, digits, '_' and '-' (Unity Catalog's
// names, lower- or upper-case).
bool IsNamePart(std::string_view part) {
  if (part.empty() || part.size() > 255) return false;
  for (char c : part) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

bool IsTableName(std::string_view name) {
  std::vector<std::string> parts = SplitString(name, '.');
  if (parts.size() != 3) return false;
  for (const auto& p : parts) {
    if (!IsNamePart(p)) return false;
  }
  return true;
}

std::optional<int64_t> ParseVersion(std::string_view text) {
  if (text.empty() || text.size() > 18) return std::nullopt;
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0) return std::nullopt;
  return v;
}

Result<std::vector<std::string>> SourceColumns(const json::value& v, const std::string& what) {
  std::vector<std::string> out;
  if (v.is_string()) {
    out.emplace_back(v.as_string());
    return out;
  }
  if (!v.is_array()) {
    return Status::InvalidArgument(what + " must be a column name or a list of them (got " +
                                   DescribeJson(v) + ")");
  }
  for (const auto& e : v.as_array()) {
    TY_ASSIGN_OR_RETURN(std::string name, AsString(e, what + "[]"));
    out.push_back(std::move(name));
  }
  return out;
}

}  // namespace

std::string_view NodeTypeName(NodeType t) {
  for (const auto& [type, name] : kNodeTypes) {
    if (type == t) return name;
  }
  return "unknown";
}

std::string_view EdgeKindName(EdgeKind k) {
  for (const auto& [kind, name] : kEdgeKinds) {
    if (kind == k) return name;
  }
  return "unknown";
}

std::string_view DirectionName(Direction d) {
  switch (d) {
    case Direction::kUpstream:
      return "upstream";
    case Direction::kDownstream:
      return "downstream";
    case Direction::kBoth:
      return "both";
  }
  return "unknown";
}

Result<NodeType> ParseNodeType(std::string_view name, std::string_view field) {
  for (const auto& [type, n] : kNodeTypes) {
    if (n == name) return type;
  }
  return Invalid(field, "has an unknown object type '" + Abbreviate(name) +
                            "' (use table, job, run, checkpoint, model_version or endpoint)");
}

Result<EdgeKind> ParseEdgeKind(std::string_view name, std::string_view field) {
  for (const auto& [kind, n] : kEdgeKinds) {
    if (n == name) return kind;
  }
  return Invalid(field, "has an unknown edge kind '" + Abbreviate(name) +
                            "' (use read, wrote, produced, logged_to, checkpointed, serves or "
                            "derived_from)");
}

Result<Direction> ParseDirection(std::string_view name, std::string_view field) {
  for (Direction d : {Direction::kUpstream, Direction::kDownstream, Direction::kBoth}) {
    if (DirectionName(d) == name) return d;
  }
  return Invalid(field, "must be upstream, downstream or both (got '" + Abbreviate(name) + "')");
}

bool IsVersioned(NodeType t) {
  return t == NodeType::kTable || t == NodeType::kModelVersion || t == NodeType::kCheckpoint;
}

Status ValidateNodeRef(const NodeRef& ref, std::string_view field) {
  std::string type(NodeTypeName(ref.type));
  if (ref.key.empty()) return Invalid(field, "needs a key after '" + type + ":'");
  if (ref.key.size() > kMaxNodeKeyLength) {
    return Invalid(field, "key is longer than " + std::to_string(kMaxNodeKeyLength) + " bytes");
  }
  if (HasControlCharacter(ref.key)) return Invalid(field, "key contains a control character");
  if (ref.type == NodeType::kTable && !IsTableName(ref.key)) {
    return Invalid(field,
                   "must name a table as catalog.schema.table (got '" + Abbreviate(ref.key) + "')");
  }
  if (IsVersioned(ref.type) && !ref.version) {
    return Invalid(field, "needs a version: " + type + ":" + Abbreviate(ref.key) + "@VERSION");
  }
  if (!IsVersioned(ref.type) && ref.version) {
    return Invalid(field, "has a version, but a " + type + " is not versioned");
  }
  if (ref.version &&
      (*ref.version < 0 || (ref.type == NodeType::kModelVersion && *ref.version < 1))) {
    return Invalid(field, "has version " + std::to_string(*ref.version) +
                              " (model versions start at 1, table versions and steps at 0)");
  }
  return Status::Ok();
}

Result<NodeRef> ParseNodeRef(std::string_view text, std::string_view field) {
  size_t colon = text.find(':');
  if (colon == std::string_view::npos) {
    return Invalid(field, "must be TYPE:KEY[@VERSION], e.g. table:main.support.train@7 (got '" +
                              Abbreviate(text) + "')");
  }
  NodeRef ref;
  TY_ASSIGN_OR_RETURN(ref.type, ParseNodeType(text.substr(0, colon), field));
  std::string_view rest = text.substr(colon + 1);
  size_t at = rest.rfind('@');
  if (IsVersioned(ref.type) && at != std::string_view::npos) {
    std::string_view version_text = rest.substr(at + 1);
    ref.version = ParseVersion(version_text);
    if (!ref.version) {
      return Invalid(field, "has a version that is not a non-negative integer ('" +
                                Abbreviate(version_text) + "')");
    }
    rest = rest.substr(0, at);
  }
  ref.key = std::string(rest);
  TY_RETURN_IF_ERROR(ValidateNodeRef(ref, field));
  return ref;
}

std::string FormatNodeRef(const NodeRef& ref) {
  std::string out = std::string(NodeTypeName(ref.type)) + ":" + ref.key;
  if (ref.version) out += "@" + std::to_string(*ref.version);
  return out;
}

Result<ColumnMapping> ParseColumnMapping(std::string_view json_text, std::string_view field) {
  ColumnMapping out;
  if (json_text.empty()) return out;
  auto parsed = ParseJsonExact(json_text);
  if (!parsed.ok() || !parsed->is_object()) {
    return Invalid(field, "must be a JSON object of target column to source columns");
  }
  for (const auto& [target, sources] : parsed->as_object()) {
    std::string what = std::string(field) + "." + std::string(target);
    TY_ASSIGN_OR_RETURN(out[std::string(target)], SourceColumns(sources, what));
  }
  TY_RETURN_IF_ERROR(ValidateColumnMapping(out, field));
  return out;
}

std::string FormatColumnMapping(const ColumnMapping& mapping) {
  if (mapping.empty()) return "";
  json::object o;
  for (const auto& [target, sources] : mapping) {
    json::array a;
    for (const auto& s : sources) a.emplace_back(s);
    o[target] = std::move(a);
  }
  return json::serialize(o);
}

Status ValidateColumnMapping(const ColumnMapping& mapping, std::string_view field) {
  constexpr size_t kMaxColumns = 10'000;
  constexpr size_t kMaxColumnName = 255;
  if (mapping.size() > kMaxColumns) {
    return Invalid(field, "has more than " + std::to_string(kMaxColumns) + " target columns");
  }
  for (const auto& [target, sources] : mapping) {
    for (const std::string* name : {&target}) {
      if (name->empty() || name->size() > kMaxColumnName || HasControlCharacter(*name)) {
        return Invalid(field, "has a bad target column name '" + Abbreviate(*name) + "'");
      }
    }
    if (sources.size() > kMaxColumns) return Invalid(field, "lists too many source columns");
    for (const auto& s : sources) {
      if (s.empty() || s.size() > kMaxColumnName || HasControlCharacter(s)) {
        return Invalid(field,
                       "." + target + " has a bad source column name '" + Abbreviate(s) + "'");
      }
    }
  }
  return Status::Ok();
}

Status ValidateColumnLineage(const NodeRef& table, const std::vector<ColumnLineage>& lineage,
                             std::string_view field) {
  constexpr size_t kMaxColumnName = 255;
  if (lineage.size() > kMaxLineageColumns) {
    return Invalid(field, "has more than " + std::to_string(kMaxLineageColumns) + " columns");
  }
  auto bad_name = [](const std::string& name) {
    return name.empty() || name.size() > kMaxColumnName || HasControlCharacter(name);
  };
  std::set<std::pair<std::string, std::string>> seen;
  for (size_t i = 0; i < lineage.size(); ++i) {
    const ColumnLineage& c = lineage[i];
    std::string at = std::string(field) + "[" + std::to_string(i) + "]";
    if (bad_name(c.column)) {
      return Invalid(at + ".column", "is not a column name ('" + Abbreviate(c.column) + "')");
    }
    TY_RETURN_IF_ERROR(ValidateNodeRef(c.source, at + ".source"));
    if (c.source.type != NodeType::kTable) {
      return Invalid(at + ".source", "must be a table version");
    }
    if (c.source == table) return Invalid(at + ".source", "is the table written itself");
    if (!seen.insert({c.column, FormatNodeRef(c.source)}).second) {
      return Invalid(at + ".column", "'" + c.column + "' is listed twice for one source");
    }
    if (c.source_columns.size() > kMaxLineageColumns) {
      return Invalid(at + ".from", "lists too many columns");
    }
    for (const auto& s : c.source_columns) {
      if (bad_name(s))
        return Invalid(at + ".from", "has a bad column name '" + Abbreviate(s) + "'");
    }
    bool transform_ok = !c.transform.empty() && c.transform.size() <= kMaxTransformLength;
    for (char ch : c.transform) {
      transform_ok = transform_ok && ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
                                      ch == '_' || ch == '+');
    }
    if (!transform_ok) {
      return Invalid(at + ".transform",
                     "must be a lower-case name such as copy, template, tokenize, redact or "
                     "doc_id, or several joined by '+' (got '" +
                         Abbreviate(c.transform) + "')");
    }
  }
  return Status::Ok();
}

Result<std::vector<ColumnLineage>> ParseColumnLineage(std::string_view json_text,
                                                      std::string_view field) {
  std::vector<ColumnLineage> out;
  if (json_text.empty()) return out;
  auto parsed = ParseJsonExact(json_text);
  if (!parsed.ok() || !parsed->is_object()) {
    return Invalid(field,
                   "must be a JSON object {\"source\": \"catalog.schema.table@VERSION\", "
                   "\"columns\": [{\"column\", \"from\", \"transform\"}, ...]}");
  }
  const json::object& o = parsed->as_object();
  for (const auto& kv : o) {
    if (kv.key() != "source" && kv.key() != "columns") {
      return Invalid(field, "has an unknown field '" + Abbreviate(kv.key()) +
                                "' (it takes source and columns)");
    }
  }
  std::string source_field = std::string(field) + ".source";
  auto source_text = OptionalString(o, "source");
  if (!source_text.ok() || !*source_text) {
    return Invalid(source_field,
                   "is required: the table version read, catalog.schema.table@VERSION");
  }
  TY_ASSIGN_OR_RETURN(NodeRef source, ParseNodeRef("table:" + **source_text, source_field));
  if (!source.version)
    return Invalid(source_field, "needs a version: catalog.schema.table@VERSION");
  const json::value* columns = o.if_contains("columns");
  if (columns == nullptr || !columns->is_array()) {
    return Invalid(std::string(field) + ".columns", "must be a list of {column, from, transform}");
  }
  if (columns->as_array().size() > kMaxLineageColumns) {
    return Invalid(std::string(field) + ".columns",
                   "has more than " + std::to_string(kMaxLineageColumns) + " entries");
  }
  for (size_t i = 0; i < columns->as_array().size(); ++i) {
    const json::value& e = columns->as_array()[i];
    std::string at = std::string(field) + ".columns[" + std::to_string(i) + "]";
    if (!e.is_object()) return Invalid(at, "must be an object {column, from, transform}");
    const json::object& c = e.as_object();
    for (const auto& kv : c) {
      if (kv.key() != "column" && kv.key() != "from" && kv.key() != "transform") {
        return Invalid(at, "has an unknown field '" + Abbreviate(kv.key()) + "'");
      }
    }
    ColumnLineage row;
    row.source = source;
    auto column = OptionalString(c, "column");
    if (!column.ok() || !*column) return Invalid(at + ".column", "is required (a column name)");
    row.column = std::move(**column);
    auto transform = OptionalString(c, "transform");
    if (!transform.ok() || !*transform) {
      return Invalid(at + ".transform", "is required (copy, template, tokenize, redact, ...)");
    }
    row.transform = std::move(**transform);
    if (const json::value* from = c.if_contains("from")) {
      TY_ASSIGN_OR_RETURN(row.source_columns, SourceColumns(*from, at + ".from"));
    }
    out.push_back(std::move(row));
  }
  return out;
}

Status ValidateEdge(const Edge& edge) {
  TY_RETURN_IF_ERROR(ValidateNodeRef(edge.from, "from"));
  TY_RETURN_IF_ERROR(ValidateNodeRef(edge.to, "to"));
  if (!edge.columns.empty() && edge.kind != EdgeKind::kDerivedFrom) {
    return Invalid("column_mapping", "is only allowed on derived_from edges");
  }
  TY_RETURN_IF_ERROR(ValidateColumnMapping(edge.columns));
  if (edge.from == edge.to) return Invalid("to", "is the same object as from");
  std::string allowed;
  for (const auto& shape : kEdgeShapes) {
    if (shape.kind != edge.kind) continue;
    if (shape.from == edge.from.type && shape.to == edge.to.type) return Status::Ok();
    allowed += (allowed.empty() ? "" : ", ") + std::string(NodeTypeName(shape.from)) + " -> " +
               std::string(NodeTypeName(shape.to));
  }
  return Invalid("kind", "'" + std::string(EdgeKindName(edge.kind)) + "' cannot join a " +
                             std::string(NodeTypeName(edge.from.type)) + " to a " +
                             std::string(NodeTypeName(edge.to.type)) + " (allowed: " + allowed +
                             ")");
}

std::optional<NodeRef> TableVersionOfDataset(std::string_view source_type, std::string_view source,
                                             std::string_view digest) {
  std::string name;
  std::optional<int64_t> version;
  auto parsed = ParseJsonExact(source);
  const json::object* o = parsed.ok() && parsed->is_object() ? &parsed->as_object() : nullptr;
  if (source_type == "delta_table") {
    if (o == nullptr) return std::nullopt;
    auto table = OptionalString(*o, "delta_table_name");
    if (!table.ok() || !*table) return std::nullopt;
    name = **table;
    auto v = OptionalInt64(*o, "delta_table_version");
    if (v.ok() && *v) version = **v;
  } else if (source_type == "trainyard_table") {
    if (o != nullptr) {
      auto table = OptionalString(*o, "table");
      if (!table.ok() || !*table) return std::nullopt;
      name = **table;
      auto v = OptionalInt64(*o, "version");
      if (v.ok() && *v) version = **v;
    } else {
      name = std::string(source);
      if (StartsWith(name, "table:")) name = name.substr(6);
    }
  } else {
    return std::nullopt;
  }
  if (!version) version = ParseVersion(digest);
  NodeRef ref{NodeType::kTable, std::move(name), version};
  if (!ValidateNodeRef(ref).ok()) return std::nullopt;
  return ref;
}

}  // namespace trainyard::lineage
