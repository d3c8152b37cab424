#include "trainyard/blob/sigv4.h"

#include <gtest/gtest.h>

#include "trainyard/common/strings.h"

namespace trainyard::blob::sigv4 {
namespace {

// The examples of AWS's "Signature Calculations for the Authorization Header" page of the S3
// API reference: bucket "examplebucket", us-east-1, 2013-05-24T00:00:00Z, and the documentation's
// example key pair.
const Credentials kExampleCredentials{"AKIAIOSFODNN7EXAMPLE",
                                      "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", ""};
constexpr char kDate[] = "20130524T000000Z";
constexpr char kEmptySha[] = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

TEST(Sigv4Test, GetObjectExample) {
  Request r;
  r.method = "GET";
  r.canonical_uri = "/test.txt";
  r.headers = {{"Host", "examplebucket.s3.amazonaws.com"},
               {"Range", "bytes=0-9"},
               {"x-amz-content-sha256", kEmptySha},
               {"x-amz-date", kDate}};
  r.payload_sha256 = kEmptySha;
  EXPECT_EQ(CanonicalRequest(r),
            "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
            "x-amz-content-sha256:" +
                std::string(kEmptySha) + "\nx-amz-date:20130524T000000Z\n\n" +
                "host;range;x-amz-content-sha256;x-amz-date\n" + kEmptySha);
  EXPECT_EQ(StringToSign(kDate, CredentialScope(kDate, "us-east-1", "s3"), CanonicalRequest(r)),
            "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n"
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(AuthorizationHeader(r, kExampleCredentials, kDate, "us-east-1", "s3"),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(Sigv4Test, PutObjectExampleEncodesTheKeyAndSignsThePayload) {
  std::string payload = "Welcome to Amazon S3.";
  std::string payload_sha = Sha256Hex(payload);
  EXPECT_EQ(payload_sha, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  Request r;
  r.method = "PUT";
  r.canonical_uri = "/" + UriEncode("test$file.text", true);
  EXPECT_EQ(r.canonical_uri, "/test%24file.text");
  r.headers = {{"Host", "examplebucket.s3.amazonaws.com"},
               {"Date", "Fri, 24 May 2013 00:00:00 GMT"},
               {"x-amz-date", kDate},
               {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
               {"x-amz-content-sha256", payload_sha}};
  r.payload_sha256 = payload_sha;
  EXPECT_EQ(Sha256Hex(CanonicalRequest(r)),
            "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d");
  EXPECT_EQ(Signature(r, kExampleCredentials, kDate, "us-east-1", "s3"),
            "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
  EXPECT_EQ(SignedHeaders(r), "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class");
}

TEST(Sigv4Test, GetBucketLifecycleExampleHasAnEmptyQueryValue) {
  Request r;
  r.method = "GET";
  r.canonical_uri = "/";
  r.query = {{"lifecycle", ""}};
  r.headers = {{"Host", "examplebucket.s3.amazonaws.com"},
               {"x-amz-date", kDate},
               {"x-amz-content-sha256", kEmptySha}};
  r.payload_sha256 = kEmptySha;
  EXPECT_EQ(CanonicalQueryString(r), "lifecycle=");
  EXPECT_EQ(Sha256Hex(CanonicalRequest(r)),
            "9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca");
  EXPECT_EQ(Signature(r, kExampleCredentials, kDate, "us-east-1", "s3"),
            "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

TEST(Sigv4Test, ListObjectsExampleSortsTheQuery) {
  Request r;
  r.method = "GET";
  r.canonical_uri = "/";
  r.query = {{"prefix", "J"}, {"max-keys", "2"}};  // given unsorted on purpose
  r.headers = {{"Host", "examplebucket.s3.amazonaws.com"},
               {"x-amz-date", kDate},
               {"x-amz-content-sha256", kEmptySha}};
  r.payload_sha256 = kEmptySha;
  EXPECT_EQ(CanonicalQueryString(r), "max-keys=2&prefix=J");
  EXPECT_EQ(Sha256Hex(CanonicalRequest(r)),
            "df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7");
  EXPECT_EQ(Signature(r, kExampleCredentials, kDate, "us-east-1", "s3"),
            "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
  // Any change to what is signed changes the signature.
  r.query[0].second = "K";
  EXPECT_NE(Signature(r, kExampleCredentials, kDate, "us-east-1", "s3"),
            "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST(Sigv4Test, EncodingTrimmingAndDates) {
  EXPECT_EQ(UriEncode("a b/c+d=é~", true), "a%20b/c%2Bd%3D%C3%A9~");
  EXPECT_EQ(UriEncode("a/b", false), "a%2Fb");
  EXPECT_EQ(AmzDate(1369353600000), "20130524T000000Z");
  EXPECT_EQ(AmzDate(1700000000123), "20231114T221320Z");
  Request r;
  r.method = "GET";
  r.canonical_uri = "/";
  r.headers = {{"X-Multi", "  a   b  "}, {"x-multi", "c"}, {"Host", "h"}};
  r.payload_sha256 = "UNSIGNED-PAYLOAD";
  EXPECT_EQ(CanonicalRequest(r),
            "GET\n/\n\nhost:h\nx-multi:a b,c\n\nhost;x-multi\nUNSIGNED-PAYLOAD");
}

}  // namespace
}  // namespace trainyard::blob::sigv4
