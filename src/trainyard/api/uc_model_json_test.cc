#include "trainyard/api/uc_model_json.h"

#include <gtest/gtest.h>

#include "trainyard/testing/status_matchers.h"

namespace trainyard::api {
namespace {

using ::testing::HasSubstr;

TEST(UcModelJsonTest, CreateBodiesNameTheMissingField) {
  TY_ASSERT_OK_AND_ASSIGN(
      auto model, DecodeCreateRegisteredModel(
                      json::object{{"name", "m"}, {"catalog_name", "main"}, {"schema_name", "s"}}));
  EXPECT_EQ(model.name, "m");
  EXPECT_EQ(model.comment, "");
  EXPECT_THAT(DecodeCreateRegisteredModel(json::object{{"name", "m"}, {"catalog_name", "main"}}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("schema_name")));
  EXPECT_THAT(DecodeCreateModelVersion(json::object{
                  {"model_name", "m"}, {"catalog_name", "main"}, {"schema_name", "s"}}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("source")));
  EXPECT_THAT(
      DecodeCreateModelVersion(json::object{
          {"model_name", "m"}, {"catalog_name", "main"}, {"schema_name", "s"}, {"source", 7}}),
      StatusIs(StatusCode::kInvalidArgument, HasSubstr("source")));
}

TEST(UcModelJsonTest, VersionNumbersArePositiveIntegersAsNumbersOrStrings) {
  EXPECT_EQ(*ParseModelVersionNumber("version", "12"), 12);
  for (const char* bad : {"0", "-1", "x", "", "1.5"}) {
    EXPECT_THAT(ParseModelVersionNumber("version", bad),
                StatusIs(StatusCode::kInvalidArgument, HasSubstr("version")))
        << bad;
  }
  EXPECT_EQ(*ReadModelVersionNumber(json::object{{"version", 3}}, "version"), 3);
  EXPECT_EQ(*ReadModelVersionNumber(json::object{{"version", "4"}}, "version"), 4);
  EXPECT_THAT(ReadModelVersionNumber(json::object{{"version", true}}, "version"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("version")));
  EXPECT_THAT(ReadModelVersionNumber(json::object{}, "version"),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("missing required field")));
}

TEST(UcModelJsonTest, CredentialRequestsTakeUcsOperationNames) {
  TY_ASSERT_OK_AND_ASSIGN(auto mv, DecodeModelVersionCredentialRequest(
                                       json::object{{"catalog_name", "main"},
                                                    {"schema_name", "s"},
                                                    {"model_name", "m"},
                                                    {"version", "2"},
                                                    {"operation", "READ_WRITE_MODEL_VERSION"}}));
  EXPECT_EQ(mv.full_name, "main.s.m");
  EXPECT_EQ(mv.version, 2);
  EXPECT_EQ(mv.operation, catalog::ModelVersionOperation::kReadWrite);
  EXPECT_THAT(
      DecodeModelVersionCredentialRequest(json::object{{"catalog_name", "a.b"},
                                                       {"schema_name", "s"},
                                                       {"model_name", "m"},
                                                       {"version", 1},
                                                       {"operation", "READ_MODEL_VERSION"}}),
      StatusIs(StatusCode::kInvalidArgument, HasSubstr("catalog_name")));
  EXPECT_THAT(
      DecodeVolumeCredentialRequest(json::object{{"volume_id", "v"}, {"operation", "READ"}}),
      StatusIs(StatusCode::kInvalidArgument,
               HasSubstr("operation must be one of READ_VOLUME, WRITE_VOLUME")));
  EXPECT_THAT(DecodeVolumeCredentialRequest(json::object{{"volume_id", "v"}}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("operation")));
  TY_ASSERT_OK_AND_ASSIGN(auto path, DecodePathCredentialRequest(json::object{
                                         {"url", "/x"}, {"operation", "PATH_CREATE_TABLE"}}));
  EXPECT_EQ(path.operation, catalog::PathOperation::kCreateTable);
  EXPECT_THAT(DecodePathCredentialRequest(json::object{{"url", "/x"}, {"operation", 3}}),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("operation")));
}

TEST(UcModelJsonTest, EncodersUseUcsFieldNames) {
  catalog::ModelVersionInfo v;
  v.model_name = "m";
  v.catalog_name = "main";
  v.schema_name = "s";
  v.version = 3;
  v.status = registry::ModelVersionStatus::kPendingRegistration;
  v.storage_location = "file:///x/versions/3";
  json::object o = ModelVersionToJson(v);
  EXPECT_EQ(o.at("version").as_int64(), 3);
  EXPECT_EQ(o.at("status").as_string(), "PENDING_REGISTRATION");
  EXPECT_EQ(o.at("storage_location").as_string(), "file:///x/versions/3");
  EXPECT_FALSE(o.contains("comment"));
  json::object c = TemporaryCredentialToJson({"file:///x", 42});
  EXPECT_EQ(c.at("url").as_string(), "file:///x");
  EXPECT_EQ(c.at("expiration_time").as_int64(), 42);
  EXPECT_FALSE(c.contains("aws_temp_credentials"));
  json::object s3 = TemporaryCredentialToJson(
      {"s3://b/t", 7, catalog::AwsTemporaryCredentials{"ASIA1", "secret", "token"}});
  EXPECT_EQ(s3.at("url").as_string(), "s3://b/t");
  const json::object& aws = s3.at("aws_temp_credentials").as_object();
  EXPECT_EQ(aws.at("access_key_id").as_string(), "ASIA1");
  EXPECT_EQ(aws.at("secret_access_key").as_string(), "secret");
  EXPECT_EQ(aws.at("session_token").as_string(), "token");
}

}  // namespace
}  // namespace trainyard::api
