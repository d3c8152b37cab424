#include "trainyard/api/uc_json.h"

#include <gtest/gtest.h>

#include "trainyard/api/api.h"
#include "trainyard/testing/status_matchers.h"

namespace trainyard::api {
namespace {

TEST(UcJsonTest, ErrorTableIsUnityCatalogs) {
  EXPECT_EQ(UcErrorCode(StatusCode::kNotFound), "NOT_FOUND");
  EXPECT_EQ(UcHttpStatus(StatusCode::kNotFound), 404);
  EXPECT_EQ(UcErrorCode(StatusCode::kAlreadyExists), "ALREADY_EXISTS");
  EXPECT_EQ(UcHttpStatus(StatusCode::kAlreadyExists), 409);
  EXPECT_EQ(UcErrorCode(StatusCode::kPermissionDenied), "PERMISSION_DENIED");
  EXPECT_EQ(UcHttpStatus(StatusCode::kPermissionDenied), 403);
  EXPECT_EQ(UcErrorCode(StatusCode::kUnauthenticated), "UNAUTHENTICATED");
  EXPECT_EQ(UcHttpStatus(StatusCode::kUnauthenticated), 401);
  EXPECT_EQ(UcErrorCode(StatusCode::kInvalidArgument), "INVALID_ARGUMENT");
  EXPECT_EQ(UcHttpStatus(StatusCode::kInvalidArgument), 400);
  // The MLflow table is unchanged.
  EXPECT_EQ(HttpStatusFor(StatusCode::kAlreadyExists), 400);
}

TEST(UcJsonTest, ErrorBodyHasCodeAndMessage) {
  http::Response r = UcErrorResponse(Status::AlreadyExists("catalog 'main' already exists"));
  EXPECT_EQ(r.status, 409);
  TY_ASSERT_OK_AND_ASSIGN(json::object body, ParseJsonObject(r.body));
  EXPECT_EQ(body.at("error_code").as_string(), "ALREADY_EXISTS");
  EXPECT_EQ(body.at("message").as_string(), "catalog 'main' already exists");
}

TEST(UcJsonTest, PagingDefaultsClampsAndRefusesNegatives) {
  TY_ASSERT_OK_AND_ASSIGN(UcPage none, ReadUcPage(json::object{}));
  EXPECT_EQ(none.max_results, kUcMaxResults);
  EXPECT_EQ(none.page_token, "");
  TY_ASSERT_OK_AND_ASSIGN(UcPage small,
                          ReadUcPage(json::object{{"max_results", "7"}, {"page_token", "abc"}}));
  EXPECT_EQ(small.max_results, 7);
  EXPECT_EQ(small.page_token, "abc");
  TY_ASSERT_OK_AND_ASSIGN(UcPage big, ReadUcPage(json::object{{"max_results", 5000}}));
  EXPECT_EQ(big.max_results, kUcMaxResults);
  EXPECT_THAT(ReadUcPage(json::object{{"max_results", -1}}),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(ReadUcPage(json::object{{"max_results", "ten"}}),
              StatusIs(StatusCode::kInvalidArgument));
}

TEST(UcJsonTest, StringMapsNameTheBadField) {
  TY_ASSERT_OK_AND_ASSIGN(
      auto map,
      ReadStringMap(json::object{{"properties", json::object{{"a", "1"}}}}, "properties"));
  ASSERT_EQ(map.size(), 1u);
  EXPECT_EQ(map[0].second, "1");
  auto bad = ReadStringMap(json::object{{"properties", json::object{{"a", 1}}}}, "properties");
  EXPECT_THAT(bad, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_NE(bad.status().message().find("properties.a"), std::string::npos);
}

TEST(UcJsonTest, DecodesCreateTableWithColumns) {
  TY_ASSERT_OK_AND_ASSIGN(auto body, ParseJsonObject(R"({
      "name": "t", "catalog_name": "main", "schema_name": "s", "table_type": "external",
      "data_source_format": "delta", "storage_location": "/data/t",
      "properties": {"k": "v"},
      "columns": [{"name": "id", "type_name": "LONG", "type_text": "bigint",
                   "type_json": "{}", "position": 0, "nullable": false},
                  {"name": "p", "type_name": "STRING", "partition_index": 0}]})"));
  TY_ASSERT_OK_AND_ASSIGN(auto r, DecodeCreateTable(body));
  EXPECT_EQ(r.table_type, catalog::TableType::kExternal);
  EXPECT_EQ(r.data_source_format, "DELTA");
  ASSERT_EQ(r.columns.size(), 2u);
  EXPECT_FALSE(r.columns[0].nullable);
  EXPECT_EQ(r.columns[1].position, 1);
  EXPECT_EQ(r.columns[1].partition_index, 0);
  EXPECT_EQ(r.properties.at("k"), "v");
  catalog::TableInfo info;
  info.name = "t";
  info.columns = r.columns;
  info.table_type = r.table_type;
  json::object out = TableToJson(info);
  EXPECT_EQ(out.at("table_type").as_string(), "EXTERNAL");
  EXPECT_EQ(out.at("columns").as_array()[1].as_object().at("partition_index").as_int64(), 0);
  EXPECT_FALSE(out.contains("comment"));
}

TEST(UcJsonTest, DecoderErrorsNameTheField) {
  auto message = [](std::string_view text) {
    auto body = ParseJsonObject(text);
    if (!body.ok()) return body.status().message();
    return DecodeCreateTable(*body).status().message();
  };
  EXPECT_NE(message(R"({"catalog_name": "c", "schema_name": "s"})").find("'name'"),
            std::string::npos);
  EXPECT_NE(message(R"({"name": "t", "catalog_name": "c", "schema_name": "s",
                        "table_type": "VIEWISH"})")
                .find("table_type must be one of MANAGED, EXTERNAL"),
            std::string::npos);
  EXPECT_NE(message(R"({"name": "t", "catalog_name": "c", "schema_name": "s",
                        "columns": [{"name": "a"}, {"type_name": "INT"}]})")
                .find("columns[1]"),
            std::string::npos);
  EXPECT_NE(message(R"({"name": "t", "catalog_name": "c", "schema_name": "s",
                        "columns": [{"name": "a", "position": -1}]})")
                .find("columns[0].position"),
            std::string::npos);
  TY_ASSERT_OK_AND_ASSIGN(auto fn, ParseJsonObject(R"({"function_info": {"name": "f",
      "catalog_name": "c", "schema_name": "s", "properties": "not json"}})"));
  auto decoded = DecodeCreateFunction(fn);
  EXPECT_THAT(decoded, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_NE(decoded.status().message().find("function_info.properties"), std::string::npos);
}

}  // namespace
}  // namespace trainyard::api
