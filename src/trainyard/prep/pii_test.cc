#include "trainyard/prep/pii.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "trainyard/testing/status_matchers.h"

namespace trainyard::prep {
namespace {

PiiRedactor AllKinds() {
  PiiOptions options;
  options.kinds = {"email", "phone", "card", "iban", "ip"};
  options.patterns = {{"order_id", "ORD-[0-9]{6}"}};
  auto r = PiiRedactor::Create(options, "steps[4].redact_pii");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

std::string Redact(std::string_view text) { return AllKinds().Redact(text, nullptr); }

TEST(PiiTest, CreateNamesTheField) {
  PiiOptions options;
  options.kinds = {"email", "phone", "ssn"};
  TY_EXPECT_ERROR(PiiRedactor::Create(options, "steps[4].redact_pii"), StatusCode::kInvalidArgument,
                  "steps[4].redact_pii.kinds[2]: unknown PII kind \"ssn\"; known: email, phone, "
                  "card, iban, ip");
  options.kinds = {"email", "email"};
  TY_EXPECT_ERROR(PiiRedactor::Create(options, "r"), StatusCode::kInvalidArgument, "r.kinds[1]");
  options.kinds = {};
  TY_EXPECT_ERROR(PiiRedactor::Create(options, "r"), StatusCode::kInvalidArgument, "at least one");
  options.patterns = {{"order_id", "ORD-[0-9"}};
  TY_EXPECT_ERROR(PiiRedactor::Create(options, "r"), StatusCode::kInvalidArgument,
                  "r.patterns.order_id");
  options.patterns = {{"Order-Id", "x"}};
  TY_EXPECT_ERROR(PiiRedactor::Create(options, "r"), StatusCode::kInvalidArgument, "\"Order-Id\"");
  options.patterns = {{"email", "x"}};
  TY_EXPECT_ERROR(PiiRedactor::Create(options, "r"), StatusCode::kInvalidArgument, "built-in");
  options.patterns = {{"a", "x"}, {"a", "y"}};
  TY_EXPECT_ERROR(PiiRedactor::Create(options, "r"), StatusCode::kInvalidArgument, "r.patterns.a");
  options.patterns = {{"a", "x"}};
  options.replacement = "\xff";
  TY_EXPECT_ERROR(PiiRedactor::Create(options, "r"), StatusCode::kInvalidArgument, "r.replacement");
}

TEST(PiiTest, Emails) {
  EXPECT_EQ(Redact("mail john.doe+tag@example.co.uk, please"), "mail [EMAIL], please");
  EXPECT_EQ(Redact("<a.b@sub-domain.example.com>."), "<[EMAIL]>.");
  // Not emails: no dot in the domain, a numeric top label, an @-mention, a trailing-dot local.
  EXPECT_EQ(Redact("user@localhost @handle x@y.123 .@a.com"),
            "user@localhost @handle x@y.123 .@a.com");
}

TEST(PiiTest, Phones) {
  EXPECT_EQ(Redact("call +44 20 7946 0958 now"), "call [PHONE] now");
  EXPECT_EQ(Redact("+1 (555) 234-5678"), "[PHONE]");
  EXPECT_EQ(Redact("+49 (0)30 1234567."), "[PHONE].");
  EXPECT_EQ(Redact("+14155552671"), "[PHONE]");
  EXPECT_EQ(Redact("(555) 234-5678 or 555.234.5678 or 555-234-5678 or 1-800-555-1234"),
            "[PHONE] or [PHONE] or [PHONE] or [PHONE]");
  EXPECT_EQ(Redact("tel:555 234 5678"), "tel:[PHONE]");
}

TEST(PiiTest, PhoneFalsePositiveTraps) {
  const std::string traps =
      "Date 2024-01-15 and 15/01/2024 and 01.02.2024 at 10:30:45, version 2.14.3, "
      "price $1,299.00, total 1234.56 EUR, ticket 5552345678, qty 555-23-4567, "
      "mixed 555-234.5678, area 155-234-5678, +5 points, build 20240115";
  EXPECT_EQ(Redact(traps), traps);
}

TEST(PiiTest, Cards) {
  EXPECT_EQ(Redact("card 4111 1111 1111 1111 exp"), "card [CARD] exp");
  EXPECT_EQ(Redact("4111-1111-1111-1111"), "[CARD]");
  EXPECT_EQ(Redact("4111111111111111"), "[CARD]");
  EXPECT_EQ(Redact("amex 3782 822463 10005."), "amex [CARD].");
}

TEST(PiiTest, CardFalsePositiveTraps) {
  // Luhn-invalid 16 digits, grouped and plain; too short and too long runs; a decimal number;
  // mixed separators.
  const std::string traps =
      "4111 1111 1111 1112, 4111111111111112, 411111111111, 41111111111111111111, "
      "order 1234567812345678, amount 4111111111111111.50, 4111 1111-1111 1111";
  EXPECT_EQ(Redact(traps), traps);
}

TEST(PiiTest, Ibans) {
  EXPECT_EQ(Redact("IBAN DE89 3704 0044 0532 0130 00 thanks"), "IBAN [IBAN] thanks");
  EXPECT_EQ(Redact("GB82WEST12345698765432"), "[IBAN]");
  EXPECT_EQ(Redact("to GB82 WEST 1234 5698 7654 32."), "to [IBAN].");
  // The longest prefix of groups that checks out: the trailing word is not part of it.
  EXPECT_EQ(Redact("NL91 ABNA 0417 1643 00 CASH"), "[IBAN] CASH");
}

TEST(PiiTest, IbanFalsePositiveTraps) {
  // Wrong check digits; a lowercase country; too short.
  const std::string traps =
      "DE88 3704 0044 0532 0130 00, GB82WEST12345698765433, "
      "de89370400440532013000, DE89 3704";
  EXPECT_EQ(Redact(traps), traps);
  EXPECT_TRUE(IbanChecksumValid("DE89 3704 0044 0532 0130 00"));
  EXPECT_FALSE(IbanChecksumValid("DE88 3704 0044 0532 0130 00"));
}

TEST(PiiTest, IpAddresses) {
  EXPECT_EQ(Redact("from 192.168.0.1, then 10.0.0.254:8080"), "from [IP], then [IP]:8080");
  EXPECT_EQ(Redact("host 2001:db8::8a2e:370:7334 and fe80::1."), "host [IP] and [IP].");
  EXPECT_EQ(Redact("mapped ::ffff:192.0.2.128 here"), "mapped [IP] here");
}

TEST(PiiTest, IpFalsePositiveTraps) {
  const std::string traps =
      "v1.2.3.4, version 1.2.3.4, Version: 10.0.0.1, ver 2.0.1.0, 1.2.3.4.5, 256.1.1.1, "
      "01.02.03.04, at 12:30:45, std::vector, a::b::c, MAC 00:1a:2b:3c:4d:5e";
  EXPECT_EQ(Redact(traps), traps);
}

TEST(PiiTest, QuickstartTicketsKeepEverythingButThePii) {
  // Text shaped like examples/quickstart/make_support_tickets.py's: order numbers, prices in
  // three currencies, dates, a card's last 4 digits and an address stay; the email goes.
  EXPECT_EQ(Redact("I was charged twice for order #A123456, $45.07 each time. Order 654321 "
                   "placed 3/14, \u20ac399.99 and \u00a312.50 on March 3. Card ending in 0042. "
                   "The reset email never arrives at mia42@example.com. Ship to 12 Elm Street, "
                   "Springfield."),
            "I was charged twice for order #A123456, $45.07 each time. Order 654321 placed "
            "3/14, \u20ac399.99 and \u00a312.50 on March 3. Card ending in 0042. The reset "
            "email never arrives at [EMAIL]. Ship to 12 Elm Street, Springfield.");
}

TEST(PiiTest, CustomPatternsAndCounts) {
  PiiRedactor r = AllKinds();
  std::map<std::string, int64_t> counts;
  counts["email"] = 10;  // counts add to what is there
  std::string out = r.Redact(
      "Order ORD-123456 and ORD-654321 for a@b.io, card 4111 1111 1111 1111, "
      "ip 8.8.8.8, call 555-234-5678, IBAN GB82WEST12345698765432",
      &counts);
  EXPECT_EQ(out,
            "Order [ORDER_ID] and [ORDER_ID] for [EMAIL], card [CARD], ip [IP], call [PHONE], "
            "IBAN [IBAN]");
  EXPECT_EQ(
      counts,
      (std::map<std::string, int64_t>{
          {"order_id", 2}, {"email", 11}, {"card", 1}, {"ip", 1}, {"phone", 1}, {"iban", 1}}));
}

TEST(PiiTest, ReplacementTemplate) {
  PiiOptions options;
  options.kinds = {"email"};
  options.replacement = "<{kind}:{kind}>";
  TY_ASSERT_OK_AND_ASSIGN(PiiRedactor r, PiiRedactor::Create(options, "r"));
  EXPECT_EQ(r.Redact("x a@b.io", nullptr), "x <EMAIL:EMAIL>");
  options.replacement = "";
  TY_ASSERT_OK_AND_ASSIGN(PiiRedactor empty, PiiRedactor::Create(options, "r"));
  EXPECT_EQ(empty.Redact("x a@b.io y", nullptr), "x  y");
}

TEST(PiiTest, EarliestThenLongestThenFirstListedWins) {
  PiiOptions options;
  options.kinds = {"email"};
  // "short" matches "ab" at 0; "long" matches "abcd" at 0: the longest wins. "later" starts
  // inside it and is dropped; "tie" matches the same span as "long" but is listed later.
  options.patterns = {{"short", "ab"}, {"long", "abcd"}, {"later", "cdef"}, {"tie", "abcd"}};
  TY_ASSERT_OK_AND_ASSIGN(PiiRedactor r, PiiRedactor::Create(options, "r"));
  std::map<std::string, int64_t> counts;
  EXPECT_EQ(r.Redact("abcdef ab", &counts), "[LONG]ef [SHORT]");
  EXPECT_EQ(counts, (std::map<std::string, int64_t>{{"long", 1}, {"short", 1}}));
  // An email that contains a pattern's match wins by starting earlier.
  options.patterns = {{"domain", "example\\.com"}};
  TY_ASSERT_OK_AND_ASSIGN(PiiRedactor r2, PiiRedactor::Create(options, "r"));
  EXPECT_EQ(r2.Redact("joe@example.com", nullptr), "[EMAIL]");
  std::vector<PiiMatch> m = r2.Find("joe@example.com and example.com");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(r2.kind_names()[m[0].kind], "email");
  EXPECT_EQ(r2.kind_names()[m[1].kind], "domain");
  EXPECT_EQ(m[1].begin, 20u);
  EXPECT_EQ(m[1].end, 31u);
}

TEST(PiiTest, CustomMatchesAreWidenedToWholeCharacters) {
  PiiOptions options;
  options.patterns = {{"any", "\\x{a9}|\\xa9"}};  // the second byte of "é" (C3 A9)
  TY_ASSERT_OK_AND_ASSIGN(PiiRedactor r, PiiRedactor::Create(options, "r"));
  EXPECT_EQ(r.Redact("caf\xc3\xa9!", nullptr), "caf[ANY]!");
  options.patterns = {{"empty", "x*"}};  // zero-length matches are ignored
  TY_ASSERT_OK_AND_ASSIGN(PiiRedactor e, PiiRedactor::Create(options, "r"));
  EXPECT_EQ(e.Redact("abxxc", nullptr), "ab[EMPTY]c");
}

TEST(PiiTest, Luhn) {
  EXPECT_TRUE(LuhnValid("4111 1111 1111 1111"));
  EXPECT_TRUE(LuhnValid("79927398713"));
  EXPECT_FALSE(LuhnValid("79927398710"));
  EXPECT_FALSE(LuhnValid(""));
}

}  // namespace
}  // namespace trainyard::prep
