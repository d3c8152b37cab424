#include "trainyard/tables/delta_schema.h"

#include <boost/json.hpp>

#include "trainyard/common/json.h"
#include "trainyard/common/strings.h"

namespace trainyard::tables {
namespace {

Result<std::shared_ptr<arrow::Field>> FieldFromJson(const json::value& v, const std::string& path);

Result<std::shared_ptr<arrow::DataType>> PrimitiveFromName(std::string_view name,
                                                           const std::string& path) {
  if (name == "string") return arrow::utf8();
  if (name == "long") return arrow::int64();
  if (name == "integer") return arrow::int32();
  if (name == "short") return arrow::int16();
  if (name == "byte") return arrow::int8();
  if (name == "float") return arrow::float32();
  if (name == "double") return arrow::float64();
  if (name == "boolean") return arrow::boolean();
  if (name == "binary") return arrow::binary();
  if (name == "date") return arrow::date32();
  if (name == "timestamp") return arrow::timestamp(arrow::TimeUnit::MICRO, "UTC");
  if (name == "timestamp_ntz") return arrow::timestamp(arrow::TimeUnit::MICRO);
  if (StartsWith(name, "decimal(") && EndsWith(name, ")")) {
    auto parts = SplitString(name.substr(8, name.size() - 9), ',');
    if (parts.size() == 2) {
      auto p = ParseInt64(Trim(parts[0]));
      auto s = ParseInt64(Trim(parts[1]));
      if (p && s && *p >= 1 && *p <= 38 && *s >= 0 && *s <= *p) {
        return arrow::decimal128(static_cast<int32_t>(*p), static_cast<int32_t>(*s));
      }
    }
  }
  return Status::InvalidArgument("schema field " + path + ": unsupported type \"" +
                                 Abbreviate(name) + "\"");
}

Result<std::shared_ptr<arrow::DataType>> TypeFromJson(const json::value& v,
                                                      const std::string& path) {
  if (v.is_string()) return PrimitiveFromName(v.as_string(), path);
  if (!v.is_object()) {
    return Status::InvalidArgument("schema field " + path + ": type must be a string or object");
  }
  const json::object& o = v.as_object();
  TY_ASSIGN_OR_RETURN(std::string type, RequiredString(o, "type"));
  if (type == "struct") {
    TY_ASSIGN_OR_RETURN(const json::array* fields, OptionalArray(o, "fields"));
    if (fields == nullptr) return Status::InvalidArgument("schema field " + path + ": no fields");
    arrow::FieldVector out;
    for (const auto& f : *fields) {
      TY_ASSIGN_OR_RETURN(auto field, FieldFromJson(f, path));
      out.push_back(std::move(field));
    }
    return arrow::struct_(out);
  }
  if (type == "array") {
    auto it = o.find("elementType");
    if (it == o.end()) return Status::InvalidArgument("schema field " + path + ": no elementType");
    TY_ASSIGN_OR_RETURN(auto element, TypeFromJson(it->value(), path + ".element"));
    TY_ASSIGN_OR_RETURN(auto contains_null, OptionalBool(o, "containsNull"));
    return arrow::list(arrow::field("element", element, contains_null.value_or(true)));
  }
  if (type == "map") {
    auto k = o.find("keyType");
    auto val = o.find("valueType");
    if (k == o.end() || val == o.end()) {
      return Status::InvalidArgument("schema field " + path + ": map needs keyType and valueType");
    }
    TY_ASSIGN_OR_RETURN(auto key_type, TypeFromJson(k->value(), path + ".key"));
    TY_ASSIGN_OR_RETURN(auto value_type, TypeFromJson(val->value(), path + ".value"));
    TY_ASSIGN_OR_RETURN(auto contains_null, OptionalBool(o, "valueContainsNull"));
    return std::static_pointer_cast<arrow::DataType>(std::make_shared<arrow::MapType>(
        arrow::field("key", key_type, false),
        arrow::field("value", value_type, contains_null.value_or(true))));
  }
  return PrimitiveFromName(type, path);
}

Result<std::shared_ptr<arrow::Field>> FieldFromJson(const json::value& v,
                                                    const std::string& parent) {
  if (!v.is_object()) return Status::InvalidArgument("schema: a field must be an object");
  const json::object& o = v.as_object();
  TY_ASSIGN_OR_RETURN(std::string name, RequiredString(o, "name"));
  std::string path = parent.empty() ? name : parent + "." + name;
  auto type_it = o.find("type");
  if (type_it == o.end()) return Status::InvalidArgument("schema field " + path + ": no type");
  TY_ASSIGN_OR_RETURN(auto type, TypeFromJson(type_it->value(), path));
  TY_ASSIGN_OR_RETURN(auto nullable, OptionalBool(o, "nullable"));
  std::shared_ptr<arrow::KeyValueMetadata> metadata;
  TY_ASSIGN_OR_RETURN(const json::object* meta, OptionalObject(o, "metadata"));
  if (meta != nullptr && !meta->empty()) {
    metadata = std::make_shared<arrow::KeyValueMetadata>();
    for (const auto& [k, mv] : *meta) metadata->Append(std::string(k), json::serialize(mv));
  }
  return arrow::field(name, type, nullable.value_or(true), metadata);
}

Result<json::value> TypeToJson(const arrow::DataType& type, const std::string& path);

Result<json::object> FieldToJson(const arrow::Field& field, const std::string& parent) {
  std::string path = parent.empty() ? field.name() : parent + "." + field.name();
  if (field.name().empty()) return Status::InvalidArgument("schema: a field has an empty name");
  TY_ASSIGN_OR_RETURN(json::value type, TypeToJson(*field.type(), path));
  json::object metadata;
  if (field.metadata() != nullptr) {
    for (int64_t i = 0; i < field.metadata()->size(); ++i) {
      const std::string& value = field.metadata()->value(i);
      Result<json::value> parsed = ParseJsonExact(value);
      metadata[field.metadata()->key(i)] = parsed.ok() ? *parsed : json::value(value);
    }
  }
  return json::object{{"name", field.name()},
                      {"type", std::move(type)},
                      {"nullable", field.nullable()},
                      {"metadata", std::move(metadata)}};
}

Result<json::value> TypeToJson(const arrow::DataType& type, const std::string& path) {
  switch (type.id()) {
    case arrow::Type::STRUCT: {
      json::array fields;
      for (const auto& f : type.fields()) {
        TY_ASSIGN_OR_RETURN(json::object fj, FieldToJson(*f, path));
        fields.push_back(std::move(fj));
      }
      return json::object{{"type", "struct"}, {"fields", std::move(fields)}};
    }
    case arrow::Type::LIST:
    case arrow::Type::LARGE_LIST: {
      const auto& element = *type.field(0);
      TY_ASSIGN_OR_RETURN(json::value et, TypeToJson(*element.type(), path + ".element"));
      return json::object{
          {"type", "array"}, {"elementType", std::move(et)}, {"containsNull", element.nullable()}};
    }
    case arrow::Type::MAP: {
      const auto& map = static_cast<const arrow::MapType&>(type);
      TY_ASSIGN_OR_RETURN(json::value kt, TypeToJson(*map.key_type(), path + ".key"));
      TY_ASSIGN_OR_RETURN(json::value vt, TypeToJson(*map.item_type(), path + ".value"));
      return json::object{{"type", "map"},
                          {"keyType", std::move(kt)},
                          {"valueType", std::move(vt)},
                          {"valueContainsNull", map.item_field()->nullable()}};
    }
    default: {
      Result<std::string> name = DeltaTypeName(type);
      if (!name.ok()) return name.status().WithContext("schema field " + path);
      return json::value(*name);
    }
  }
}

}  // namespace

Result<std::string> DeltaTypeName(const arrow::DataType& type) {
  switch (type.id()) {
    case arrow::Type::STRING:
    case arrow::Type::LARGE_STRING:
    case arrow::Type::STRING_VIEW:
      return std::string("string");
    case arrow::Type::INT64:
      return std::string("long");
    case arrow::Type::INT32:
      return std::string("integer");
    case arrow::Type::INT16:
      return std::string("short");
    case arrow::Type::INT8:
      return std::string("byte");
    case arrow::Type::FLOAT:
      return std::string("float");
    case arrow::Type::DOUBLE:
      return std::string("double");
    case arrow::Type::BOOL:
      return std::string("boolean");
    case arrow::Type::BINARY:
    case arrow::Type::LARGE_BINARY:
    case arrow::Type::BINARY_VIEW:
      return std::string("binary");
    case arrow::Type::DATE32:
    case arrow::Type::DATE64:
      return std::string("date");
    case arrow::Type::TIMESTAMP: {
      const auto& ts = static_cast<const arrow::TimestampType&>(type);
      return std::string(ts.timezone().empty() ? "timestamp_ntz" : "timestamp");
    }
    case arrow::Type::DECIMAL128: {
      const auto& d = static_cast<const arrow::Decimal128Type&>(type);
      if (d.precision() > 38) break;
      return "decimal(" + std::to_string(d.precision()) + "," + std::to_string(d.scale()) + ")";
    }
    default:
      break;
  }
  return Status::InvalidArgument("type " + type.ToString() + " has no Delta equivalent");
}

bool UsesTimestampNtz(const arrow::DataType& type) {
  if (type.id() == arrow::Type::TIMESTAMP) {
    return static_cast<const arrow::TimestampType&>(type).timezone().empty();
  }
  for (const auto& f : type.fields()) {
    if (UsesTimestampNtz(*f->type())) return true;
  }
  return false;
}

Result<std::shared_ptr<arrow::Schema>> SchemaFromDeltaJson(std::string_view schema_string) {
  Result<json::value> parsed = ParseJsonExact(schema_string);
  if (!parsed.ok()) return Status::InvalidArgument("schemaString is not JSON");
  TY_ASSIGN_OR_RETURN(auto type, TypeFromJson(*parsed, ""));
  if (type->id() != arrow::Type::STRUCT) {
    return Status::InvalidArgument("schemaString must be a struct type");
  }
  return arrow::schema(type->fields());
}

Result<std::string> SchemaToDeltaJson(const arrow::Schema& schema) {
  json::array fields;
  for (const auto& f : schema.fields()) {
    TY_ASSIGN_OR_RETURN(json::object fj, FieldToJson(*f, ""));
    fields.push_back(std::move(fj));
  }
  return json::serialize(json::object{{"type", "struct"}, {"fields", std::move(fields)}});
}

}  // namespace trainyard::tables
