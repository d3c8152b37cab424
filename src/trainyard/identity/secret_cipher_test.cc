#include "trainyard/identity/secret_cipher.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace trainyard::identity {
namespace {

class SecretCipherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("ty-cipher-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(SecretCipherTest, KeyIsCreatedOnceWithMode0600) {
  std::string path = dir_ + "/secrets.key";
  auto first = SecretCipher::LoadOrCreate(path);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  EXPECT_EQ(st.st_size, 32);
  auto sealed = first->Seal("hf_abc", "hf-token");
  ASSERT_TRUE(sealed.ok());
  auto second = SecretCipher::LoadOrCreate(path);  // a restart reads the same key
  ASSERT_TRUE(second.ok());
  auto opened = second->Open(*sealed, "hf-token");
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(*opened, "hf_abc");
}

TEST_F(SecretCipherTest, RoundTripHidesThePlaintextAndUsesFreshNonces) {
  SecretCipher cipher(std::string(32, 'k'));
  std::string value = "s3cr3t-value-that-is-long-enough";
  auto a = cipher.Seal(value, "name");
  auto b = cipher.Seal(value, "name");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->find(value), std::string::npos);
  EXPECT_NE(*a, *b);
  EXPECT_EQ(*cipher.Open(*a, "name"), value);
  EXPECT_EQ(*cipher.Open(*b, "name"), value);
}

TEST_F(SecretCipherTest, TamperingAnotherRowOrAnotherKeyIsDetected) {
  SecretCipher cipher(std::string(32, 'k'));
  auto sealed = cipher.Seal("value", "name");
  ASSERT_TRUE(sealed.ok());
  for (size_t i = 0; i < sealed->size(); ++i) {
    std::string bad = *sealed;
    bad[i] = static_cast<char>(bad[i] ^ 1);
    EXPECT_FALSE(cipher.Open(bad, "name").ok()) << "byte " << i;
  }
  EXPECT_FALSE(cipher.Open(*sealed, "other-name").ok());
  EXPECT_FALSE(cipher.Open(sealed->substr(0, 20), "name").ok());
  EXPECT_FALSE(SecretCipher(std::string(32, 'x')).Open(*sealed, "name").ok());
}

TEST_F(SecretCipherTest, ABadKeyFileIsAnErrorNotANewKey) {
  std::string path = dir_ + "/secrets.key";
  std::ofstream(path) << "short";
  auto c = SecretCipher::LoadOrCreate(path);
  EXPECT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("32 bytes"), std::string::npos);
}

}  // namespace
}  // namespace trainyard::identity
