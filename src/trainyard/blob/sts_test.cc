#include "trainyard/blob/sts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <map>

#include "trainyard/blob/s3_blob_store.h"
#include "trainyard/testing/moto_s3.h"
#include "trainyard/testing/status_matchers.h"

namespace trainyard::blob {
namespace {

namespace json = boost::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

json::object Statement(const json::value& policy, std::string_view sid) {
  for (const auto& s : policy.at("Statement").as_array()) {
    if (s.at("Sid").as_string() == sid) return s.as_object();
  }
  ADD_FAILURE() << "no statement " << sid;
  return {};
}

std::vector<std::string> Strings(const json::value& v) {
  std::vector<std::string> out;
  if (v.is_string()) return {std::string(v.as_string())};
  for (const auto& s : v.as_array()) out.emplace_back(s.as_string());
  return out;
}

TEST(S3SessionPolicyTest, ReadAllowsGetAndListUnderThePrefixOnly) {
  json::value p = json::parse(S3SessionPolicy({"data", "cat/tables/t1"}, S3Access::kRead));
  EXPECT_EQ(p.at("Version").as_string(), "2012-10-17");
  ASSERT_EQ(p.at("Statement").as_array().size(), 2u);
  json::object objects = Statement(p, "Objects");
  EXPECT_EQ(objects.at("Effect").as_string(), "Allow");
  EXPECT_THAT(Strings(objects.at("Action")), ElementsAre("s3:GetObject"));
  EXPECT_EQ(objects.at("Resource").as_string(), "arn:aws:s3:::data/cat/tables/t1/*");
  json::object list = Statement(p, "List");
  EXPECT_THAT(Strings(list.at("Action")), ElementsAre("s3:ListBucket"));
  EXPECT_EQ(list.at("Resource").as_string(), "arn:aws:s3:::data");
  EXPECT_THAT(Strings(list.at("Condition").at("StringLike").at("s3:prefix")),
              ElementsAre("cat/tables/t1", "cat/tables/t1/*"));
}

TEST(S3SessionPolicyTest, WriteAddsPutDeleteAndAbortButNothingOnOtherResources) {
  json::value p = json::parse(S3SessionPolicy({"data", "t"}, S3Access::kReadWrite, "aws-cn"));
  json::object objects = Statement(p, "Objects");
  EXPECT_THAT(
      Strings(objects.at("Action")),
      ElementsAre("s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"));
  EXPECT_EQ(objects.at("Resource").as_string(), "arn:aws-cn:s3:::data/t/*");
  EXPECT_THAT(Strings(Statement(p, "List").at("Action")), ElementsAre("s3:ListBucket"));
  // No statement allows anything on another bucket, and nothing is a Deny or a NotAction.
  for (const auto& s : p.at("Statement").as_array()) {
    EXPECT_EQ(s.at("Effect").as_string(), "Allow");
    EXPECT_FALSE(s.as_object().contains("NotAction"));
    EXPECT_FALSE(s.as_object().contains("NotResource"));
    EXPECT_THAT(std::string(s.at("Resource").as_string()), HasSubstr(":s3:::data"));
  }
}

TEST(S3SessionPolicyTest, IamWildcardsInThePrefixMatchOnlyThemselves) {
  // A prefix "a*" must not allow "ab/..."; "?" and "$" likewise.
  json::value p = json::parse(S3SessionPolicy({"data", "a*b/c?d/$x"}, S3Access::kRead));
  EXPECT_EQ(Statement(p, "Objects").at("Resource").as_string(),
            "arn:aws:s3:::data/a${*}b/c${?}d/${$}x/*");
  EXPECT_THAT(Strings(Statement(p, "List").at("Condition").at("StringLike").at("s3:prefix")),
              ElementsAre("a${*}b/c${?}d/${$}x", "a${*}b/c${?}d/${$}x/*"));
}

TEST(S3SessionPolicyTest, QuotesAndBackslashesStayInsideTheirJsonString) {
  std::string text = S3SessionPolicy({"data", "x\",\"Effect\":\"Deny\\"}, S3Access::kRead);
  json::value p = json::parse(text);
  EXPECT_EQ(Statement(p, "Objects").at("Resource").as_string(),
            "arn:aws:s3:::data/x\",\"Effect\":\"Deny\\/*");
  EXPECT_EQ(Statement(p, "Objects").at("Effect").as_string(), "Allow");
}

TEST(S3SessionPolicyTest, TheWholeBucketListsWithoutACondition) {
  json::value p = json::parse(S3SessionPolicy({"data", ""}, S3Access::kRead));
  EXPECT_EQ(Statement(p, "Objects").at("Resource").as_string(), "arn:aws:s3:::data/*");
  EXPECT_FALSE(Statement(p, "List").contains("Condition"));
}

TEST(S3SessionPolicyTest, ATypicalTableFitsStsSizeLimit) {
  std::string prefix =
      "catalog/schemas/0123456789abcdef0123456789abcdef/tables/"
      "0123456789abcdef0123456789abcdef";
  EXPECT_LT(S3SessionPolicy({"my-company-datalake", prefix}, S3Access::kReadWrite).size(),
            kMaxSessionPolicyBytes);
}

TEST(ParseS3LocationTest, NormalizesSlashesAndRefusesWhatS3WouldNot) {
  TY_ASSERT_OK_AND_ASSIGN(S3Location l, ParseS3Location("s3://bucket//a/b/"));
  EXPECT_EQ(l.bucket, "bucket");
  EXPECT_EQ(l.prefix, "a/b");
  EXPECT_EQ(l.Url(), "s3://bucket/a/b");
  TY_ASSERT_OK_AND_ASSIGN(S3Location root, ParseS3Location("s3://bucket"));
  EXPECT_EQ(root.prefix, "");
  EXPECT_EQ(root.Url(), "s3://bucket");
  TY_ASSERT_OK_AND_ASSIGN(S3Location utf8,
                          ParseS3Location("s3://bucket/caf\xc3\xa9/\xf0\x9f\x9a\x82"));
  EXPECT_EQ(utf8.prefix, "caf\xc3\xa9/\xf0\x9f\x9a\x82");
  for (const char* bad :
       {"s3://", "s3:///x", "s3://b*/x", "s3://ab", "http://bucket/x", "s3://bucket/a/../b",
        "s3://bucket/./b", "s3://bucket/a\nb", "s3://bucket/\xff", "s3://bucket/\xc0\xaf",
        "s3://bucket/\xed\xa0\x80", "s3://bucket/\xe2\x82"}) {
    EXPECT_THAT(ParseS3Location(bad), StatusIs(StatusCode::kInvalidArgument)) << bad;
  }
}

constexpr char kAnswer[] = R"(<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleResult>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::123456789012:assumed-role/demo/trainyard-alice</Arn>
      <AssumedRoleId>ARO123EXAMPLE123:trainyard-alice</AssumedRoleId>
    </AssumedRoleUser>
    <Credentials>
      <AccessKeyId>ASIAIOSFODNN7EXAMPLE</AccessKeyId>
      <SecretAccessKey>wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY</SecretAccessKey>
      <SessionToken>
       AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQW
      </SessionToken>
      <Expiration>2019-11-09T13:34:41Z</Expiration>
    </Credentials>
    <PackedPolicySize>6</PackedPolicySize>
  </AssumeRoleResult>
  <ResponseMetadata><RequestId>c6104cbe-af31-11e0-8154-cbc7ccf896c7</RequestId></ResponseMetadata>
</AssumeRoleResponse>)";

TEST(ParseStsCredentialsTest, ReadsAwsDocumentedAnswer) {
  TY_ASSERT_OK_AND_ASSIGN(TemporaryS3Credentials c, ParseStsCredentials(kAnswer));
  EXPECT_EQ(c.credentials.access_key_id, "ASIAIOSFODNN7EXAMPLE");
  EXPECT_EQ(c.credentials.secret_access_key, "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY");
  EXPECT_EQ(c.credentials.session_token,
            "AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQW");
  EXPECT_EQ(c.expiration_millis, int64_t{1573306481} * 1000);
}

TEST(ParseStsCredentialsTest, ReadsFractionalSecondsAndEntities) {
  std::string xml =
      "<Credentials><AccessKeyId>A</AccessKeyId><SecretAccessKey>s&amp;t</SecretAccessKey>"
      "<SessionToken>T</SessionToken><Expiration>2000-02-29T00:00:00.250Z</Expiration>"
      "</Credentials>";
  TY_ASSERT_OK_AND_ASSIGN(TemporaryS3Credentials c, ParseStsCredentials(xml));
  EXPECT_EQ(c.credentials.secret_access_key, "s&t");
  EXPECT_EQ(c.expiration_millis, int64_t{951782400} * 1000 + 250);
}

TEST(ParseStsCredentialsTest, RefusesErrorsAndMalformedAnswers) {
  std::map<std::string, std::string> cases = {
      {"error", "<ErrorResponse><Error><Code>AccessDenied</Code></Error></ErrorResponse>"},
      {"no token",
       "<Credentials><AccessKeyId>A</AccessKeyId><SecretAccessKey>S</SecretAccessKey>"
       "<Expiration>2019-11-09T13:34:41Z</Expiration></Credentials>"},
      {"empty key",
       "<Credentials><AccessKeyId> </AccessKeyId><SecretAccessKey>S</SecretAccessKey>"
       "<SessionToken>T</SessionToken><Expiration>2019-11-09T13:34:41Z</Expiration>"
       "</Credentials>"},
      {"two keys",
       "<Credentials><AccessKeyId>A</AccessKeyId><AccessKeyId>B</AccessKeyId>"
       "<SecretAccessKey>S</SecretAccessKey><SessionToken>T</SessionToken>"
       "<Expiration>2019-11-09T13:34:41Z</Expiration></Credentials>"},
      {"control char",
       "<Credentials><AccessKeyId>A&#10;B</AccessKeyId><SecretAccessKey>S</SecretAccessKey>"
       "<SessionToken>T</SessionToken><Expiration>2019-11-09T13:34:41Z</Expiration>"
       "</Credentials>"},
      {"local time",
       "<Credentials><AccessKeyId>A</AccessKeyId><SecretAccessKey>S</SecretAccessKey>"
       "<SessionToken>T</SessionToken><Expiration>2019-11-09T13:34:41+01:00</Expiration>"
       "</Credentials>"},
      {"month 13",
       "<Credentials><AccessKeyId>A</AccessKeyId><SecretAccessKey>S</SecretAccessKey>"
       "<SessionToken>T</SessionToken><Expiration>2019-13-09T13:34:41Z</Expiration>"
       "</Credentials>"},
      {"two blocks", std::string("<Credentials></Credentials>") + kAnswer},
  };
  for (const auto& [name, xml] : cases) {
    EXPECT_THAT(ParseStsCredentials(xml), StatusIs(StatusCode::kInvalidArgument)) << name;
  }
}

TEST(StsSessionNameTest, IsAValidRoleSessionName) {
  EXPECT_EQ(StsSessionName("alice"), "trainyard-alice");
  EXPECT_EQ(StsSessionName("a b/c:d"), "trainyard-a-b-c-d");
  EXPECT_EQ(StsSessionName(std::string(100, 'x')).size(), 64u);
}

TEST(StsConfigFromEnvTest, TakesAwsVariablesAndChecksTheFlags) {
  std::map<std::string, std::string> vars = {{"AWS_ACCESS_KEY_ID", "AK"},
                                             {"AWS_SECRET_ACCESS_KEY", "SK"},
                                             {"AWS_REGION", "eu-west-1"},
                                             {"AWS_ENDPOINT_URL", "http://127.0.0.1:9"},
                                             {"AWS_ENDPOINT_URL_STS", "http://127.0.0.1:5"}};
  auto env = [&](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
  const std::string arn = "arn:aws:iam::123456789012:role/trainyard-data";
  TY_ASSERT_OK_AND_ASSIGN(StsConfig c, StsConfigFromEnv(arn, 3600, env));
  EXPECT_EQ(c.endpoint, "http://127.0.0.1:5");
  EXPECT_EQ(c.region, "eu-west-1");
  EXPECT_EQ(c.credentials.access_key_id, "AK");
  EXPECT_EQ(c.duration_seconds, 3600);
  vars.erase("AWS_ENDPOINT_URL_STS");
  TY_ASSERT_OK_AND_ASSIGN(c, StsConfigFromEnv(arn, 900, env));
  EXPECT_EQ(c.endpoint, "http://127.0.0.1:9");

  EXPECT_THAT(StsConfigFromEnv("arn:aws:iam::1:user/bob", 3600, env),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("--s3-credentials-role-arn")));
  EXPECT_THAT(StsConfigFromEnv("arn:aws:iam::1:role/", 3600, env),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("--s3-credentials-role-arn")));
  EXPECT_THAT(StsConfigFromEnv(arn, 899, env),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("--s3-credentials-duration")));
  EXPECT_THAT(StsConfigFromEnv(arn, 43201, env),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("--s3-credentials-duration")));
  vars.erase("AWS_SECRET_ACCESS_KEY");
  EXPECT_THAT(StsConfigFromEnv(arn, 3600, env),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("AWS_SECRET_ACCESS_KEY")));
}

TEST(MakeStsCredentialIssuerTest, RefusesABadEndpoint) {
  StsConfig c;
  c.role_arn = "arn:aws:iam::1:role/r";
  c.endpoint = "ftp://x";
  EXPECT_THAT(MakeStsCredentialIssuer(c),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("STS endpoint")));
}

// The bytes read, or the error.
std::string Text(const Result<std::string>& r) { return r.ok() ? *r : r.status().ToString(); }

// Against moto's STS and S3 (tests/moto_s3.py), which enforce the role's policy and, as AWS
// does, the session policy's actions and resources (not its s3:prefix condition on listing).
class StsIssuerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(moto().ok()) << moto().error();
    prefix_ = "sts/" +
              std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "-" +
              std::to_string(::getpid());
  }
  static const testing::MotoS3& moto() { return testing::MotoS3::Get(); }

  StsConfig Config(std::string role_arn = moto().role_arn()) {
    StsConfig c;
    c.endpoint = moto().endpoint();
    c.region = moto().region();
    c.role_arn = std::move(role_arn);
    c.credentials = {moto().access_key_id(), moto().secret_access_key(), ""};
    c.duration_seconds = 900;
    return c;
  }
  // A store on `prefix` with `credentials` (the server's own when not given).
  std::unique_ptr<BlobStore> Store(const std::string& prefix,
                                   const sigv4::Credentials* credentials = nullptr) {
    S3Config c;
    c.endpoint = moto().endpoint();
    c.region = moto().region();
    c.bucket = moto().bucket();
    c.prefix = prefix;
    c.credentials =
        credentials ? *credentials
                    : sigv4::Credentials{moto().access_key_id(), moto().secret_access_key(), ""};
    c.max_attempts = 1;
    c.cache_dir = testing::MotoS3::TempDir("sts-cache");
    auto store = OpenS3BlobStore(std::move(c));
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }

  std::string prefix_;
};

TEST_F(StsIssuerTest, CredentialsReachTheirPrefixOnlyAndReadOnesCannotWrite) {
  auto admin = Store(prefix_);
  ASSERT_TRUE(admin);
  TY_ASSERT_OK(admin->PutBytes("in/a.txt", "inside"));
  TY_ASSERT_OK(admin->PutBytes("out/b.txt", "outside"));
  TY_ASSERT_OK_AND_ASSIGN(auto issuer, MakeStsCredentialIssuer(Config()));
  EXPECT_THAT(issuer->Describe(), HasSubstr(moto().role_arn()));

  SystemClock clock;
  const int64_t before = clock.NowMillis();
  TY_ASSERT_OK_AND_ASSIGN(
      TemporaryS3Credentials read,
      issuer->Issue({moto().bucket(), prefix_ + "/in"}, S3Access::kRead, "alice"));
  EXPECT_THAT(read.credentials.access_key_id, ::testing::StartsWith("ASIA"));
  EXPECT_FALSE(read.credentials.session_token.empty());
  EXPECT_GE(read.expiration_millis, before + 890 * 1000);
  EXPECT_LE(read.expiration_millis, clock.NowMillis() + 910 * 1000);

  auto in = Store(prefix_ + "/in", &read.credentials);
  ASSERT_TRUE(in);
  EXPECT_EQ(Text(in->GetBytes("a.txt")), "inside");
  EXPECT_THAT(in->PutBytes("new.txt", "x"), StatusIs(StatusCode::kPermissionDenied));
  auto out = Store(prefix_ + "/out", &read.credentials);
  ASSERT_TRUE(out);
  EXPECT_THAT(out->GetBytes("b.txt"), StatusIs(StatusCode::kPermissionDenied));
  // A sibling whose name starts with the prefix is outside it too.
  TY_ASSERT_OK(admin->PutBytes("in-other/c.txt", "sibling"));
  auto sibling = Store(prefix_ + "/in-other", &read.credentials);
  ASSERT_TRUE(sibling);
  EXPECT_THAT(sibling->GetBytes("c.txt"), StatusIs(StatusCode::kPermissionDenied));

  TY_ASSERT_OK_AND_ASSIGN(
      TemporaryS3Credentials write,
      issuer->Issue({moto().bucket(), prefix_ + "/in"}, S3Access::kReadWrite, "alice"));
  auto writable = Store(prefix_ + "/in", &write.credentials);
  ASSERT_TRUE(writable);
  TY_EXPECT_OK(writable->PutBytes("new.txt", "written"));
  EXPECT_EQ(Text(admin->GetBytes("in/new.txt")), "written");
  TY_EXPECT_OK(writable->Delete("new.txt"));
  auto out_writable = Store(prefix_ + "/out", &write.credentials);
  ASSERT_TRUE(out_writable);
  EXPECT_THAT(out_writable->PutBytes("x.txt", "x"), StatusIs(StatusCode::kPermissionDenied));
  EXPECT_THAT(out_writable->Delete("b.txt"), StatusIs(StatusCode::kPermissionDenied));
}

TEST_F(StsIssuerTest, ARoleTheServerMayNotAssumeIsAFailedPreconditionNamingIt) {
  const std::string other = "arn:aws:iam::123456789012:role/not-for-trainyard";
  TY_ASSERT_OK_AND_ASSIGN(auto issuer, MakeStsCredentialIssuer(Config(other)));
  EXPECT_THAT(issuer->Issue({moto().bucket(), prefix_}, S3Access::kRead, "alice"),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr(other)));
}

TEST_F(StsIssuerTest, AnUnreachableStsIsUnavailable) {
  StsConfig c = Config();
  c.endpoint = "http://127.0.0.1:1";
  c.max_attempts = 1;
  TY_ASSERT_OK_AND_ASSIGN(auto issuer, MakeStsCredentialIssuer(c));
  EXPECT_THAT(issuer->Issue({moto().bucket(), prefix_}, S3Access::kRead, "alice"),
              StatusIs(StatusCode::kUnavailable, HasSubstr("AWS_ENDPOINT_URL_STS")));
}

}  // namespace
}  // namespace trainyard::blob
