#include "trainyard/cli/grant_statement.h"

#include <algorithm>
#include <cctype>

#include "trainyard/catalog/permissions.h"
#include "trainyard/common/strings.h"

namespace trainyard::cli {
namespace {

constexpr std::string_view kGrantExample =
    "trainyard grant SELECT ON TABLE main.support.tickets TO data-scientists";
constexpr std::string_view kRevokeExample =
    "trainyard revoke SELECT ON TABLE main.support.tickets FROM data-scientists";
constexpr std::string_view kShowExample = "trainyard show grants ON TABLE main.support.tickets";

struct Token {
  std::string text;
  bool quoted = false;  // `...`: never a keyword
};

struct SecurableKind {
  std::vector<std::string_view> words;  // as written, upper case
  std::string_view type;                // UC's securable_type
  int name_parts;                       // 0: takes no name
};

const std::vector<SecurableKind>& SecurableKinds() {
  static const std::vector<SecurableKind> kinds = {
      {{"REGISTERED", "MODEL"}, "registered_model", 3},
      {{"EXTERNAL", "LOCATION"}, "external_location", 1},
      {{"REGISTERED_MODEL"}, "registered_model", 3},
      {{"EXTERNAL_LOCATION"}, "external_location", 1},
      {{"MODEL"}, "registered_model", 3},
      {{"METASTORE"}, "metastore", 0},
      {{"CATALOG"}, "catalog", 1},
      {{"SCHEMA"}, "schema", 2},
      {{"DATABASE"}, "schema", 2},
      {{"TABLE"}, "table", 3},
      {{"VOLUME"}, "volume", 3},
      {{"FUNCTION"}, "function", 3},
      {{"CREDENTIAL"}, "credential", 1},
  };
  return kinds;
}

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

bool IsKeyword(const Token& t, std::string_view keyword) {
  return !t.quoted && Upper(t.text) == keyword;
}

Result<std::vector<Token>> Tokenize(std::string_view text) {
  std::vector<Token> tokens;
  size_t i = 0;
  while (i < text.size()) {
    char c = text[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (c == ',') {
      tokens.push_back({",", false});
      ++i;
    } else if (c == '`') {
      size_t end = text.find('`', i + 1);
      if (end == std::string_view::npos) {
        return Status::InvalidArgument("unterminated `quote` starting at '" +
                                       Abbreviate(text.substr(i), 40) + "'; close it with `");
      }
      tokens.push_back({std::string(text.substr(i + 1, end - i - 1)), true});
      i = end + 1;
    } else {
      size_t end = i;
      while (end < text.size() && !std::isspace(static_cast<unsigned char>(text[end])) &&
             text[end] != ',' && text[end] != '`') {
        ++end;
      }
      tokens.push_back({std::string(text.substr(i, end - i)), false});
      i = end;
    }
  }
  return tokens;
}

// Edit distance, for "did you mean".
size_t Distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string AllPrivilegesText() {
  std::string out;
  for (const auto& p : KnownPrivileges()) out += (out.empty() ? "" : ", ") + p;
  return out;
}

Result<std::string> CanonicalPrivilege(const std::vector<Token>& words) {
  std::string name;
  for (const auto& w : words) {
    std::string upper = Upper(w.text);
    std::replace(upper.begin(), upper.end(), '_', ' ');
    name += (name.empty() ? "" : " ") + upper;
  }
  const auto& known = KnownPrivileges();
  if (std::find(known.begin(), known.end(), name) != known.end()) return name;
  std::string best;
  size_t best_distance = 4;
  for (const auto& k : known) {
    size_t d = Distance(name, k);
    if (d < best_distance) best_distance = d, best = k;
  }
  return Status::InvalidArgument("unknown privilege '" + Abbreviate(name, 60) + "'" +
                                 (best.empty() ? "" : "; did you mean " + best + "?") +
                                 " (privileges: " + AllPrivilegesText() + ")");
}

// Privileges: tokens [begin, on) separated by commas.
Result<std::vector<std::string>> ParsePrivileges(const std::vector<Token>& tokens, size_t begin,
                                                 size_t on, std::string_view example) {
  std::vector<std::string> out;
  std::vector<Token> words;
  for (size_t i = begin; i <= on; ++i) {
    if (i < on && tokens[i].text != ",") {
      words.push_back(tokens[i]);
      continue;
    }
    if (words.empty()) {
      return Status::InvalidArgument("a privilege is missing" +
                                     std::string(i < on ? " before ','" : " before ON") +
                                     "; write e.g. '" + std::string(example) + "'");
    }
    TY_ASSIGN_OR_RETURN(std::string p, CanonicalPrivilege(words));
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(std::move(p));
    words.clear();
  }
  return out;
}

std::string SecurableTypesText() {
  return "CATALOG, SCHEMA, TABLE, VOLUME, FUNCTION, MODEL, EXTERNAL LOCATION, CREDENTIAL or "
         "METASTORE";
}

std::string_view PartsText(int parts) {
  if (parts == 1) return "one part (e.g. main)";
  if (parts == 2) return "two parts, catalog.schema (e.g. main.support)";
  return "three parts, catalog.schema.name (e.g. main.support.tickets)";
}

// Reads "<type> <name>" at tokens[*i], advancing *i.
Status ParseSecurable(const std::vector<Token>& tokens, size_t* i, std::string_view example,
                      GrantStatement* out) {
  const SecurableKind* kind = nullptr;
  for (const auto& k : SecurableKinds()) {
    bool match = *i + k.words.size() <= tokens.size();
    for (size_t w = 0; match && w < k.words.size(); ++w) {
      match = IsKeyword(tokens[*i + w], k.words[w]);
    }
    if (match) {
      kind = &k;
      break;
    }
  }
  if (kind == nullptr) {
    std::string got = *i < tokens.size() ? "'" + Abbreviate(tokens[*i].text, 60) + "'" : "nothing";
    return Status::InvalidArgument("expected a securable type after ON (" + SecurableTypesText() +
                                   "), got " + got + "; write e.g. '" + std::string(example) + "'");
  }
  *i += kind->words.size();
  out->securable_type = std::string(kind->type);
  if (kind->name_parts == 0) {
    out->full_name = "metastore";
    return Status::Ok();
  }
  std::string type_words = Upper(std::string(kind->words[0]));
  if (*i >= tokens.size() || tokens[*i].text == ",") {
    return Status::InvalidArgument("the " + type_words + "'s name is missing after ON " +
                                   type_words + "; write e.g. '" + std::string(example) + "'");
  }
  const std::string& name = tokens[*i].text;
  std::vector<std::string> parts = SplitString(name, '.');
  bool empty_part = std::any_of(parts.begin(), parts.end(), [](auto& p) { return p.empty(); });
  if (static_cast<int>(parts.size()) != kind->name_parts || empty_part) {
    return Status::InvalidArgument("a " + type_words + "'s name has " +
                                   std::string(PartsText(kind->name_parts)) + " (got '" +
                                   Abbreviate(name, 80) + "')");
  }
  out->full_name = name;
  ++*i;
  return Status::Ok();
}

Status ExpectEnd(const std::vector<Token>& tokens, size_t i, std::string_view example) {
  if (i == tokens.size()) return Status::Ok();
  return Status::InvalidArgument("unexpected '" + Abbreviate(tokens[i].text, 60) +
                                 "' after the statement; write e.g. '" + std::string(example) +
                                 "' (one principal per statement)");
}

Result<GrantStatement> ParseGrantOrRevoke(const std::vector<Token>& tokens, GrantVerb verb) {
  GrantStatement out;
  out.verb = verb;
  bool grant = verb == GrantVerb::kGrant;
  std::string_view example = grant ? kGrantExample : kRevokeExample;
  size_t on = 1;
  while (on < tokens.size() && !IsKeyword(tokens[on], "ON")) ++on;
  if (on == tokens.size()) {
    return Status::InvalidArgument(
        "expected ON <securable type> <name> after the privileges; "
        "write e.g. '" +
        std::string(example) + "'");
  }
  TY_ASSIGN_OR_RETURN(out.privileges, ParsePrivileges(tokens, 1, on, example));
  size_t i = on + 1;
  TY_RETURN_IF_ERROR(ParseSecurable(tokens, &i, example, &out));
  std::string_view want = grant ? "TO" : "FROM";
  std::string_view other = grant ? "FROM" : "TO";
  if (i < tokens.size() && IsKeyword(tokens[i], other)) {
    return Status::InvalidArgument(std::string(grant ? "GRANT" : "REVOKE") + " takes " +
                                   std::string(want) + " <principal>, not " + std::string(other) +
                                   "; write e.g. '" + std::string(example) + "'");
  }
  if (i >= tokens.size() || !IsKeyword(tokens[i], want)) {
    return Status::InvalidArgument("expected " + std::string(want) +
                                   " <principal> after the securable's name; write e.g. '" +
                                   std::string(example) + "'");
  }
  if (++i >= tokens.size() || tokens[i].text.empty() || tokens[i].text == ",") {
    return Status::InvalidArgument(
        "the principal (a user, group or service principal) is missing "
        "after " +
        std::string(want) + "; write e.g. '" + std::string(example) + "'");
  }
  out.principal = tokens[i].text;
  TY_RETURN_IF_ERROR(ExpectEnd(tokens, i + 1, example));
  return out;
}

Result<GrantStatement> ParseShow(const std::vector<Token>& tokens) {
  GrantStatement out;
  out.verb = GrantVerb::kShow;
  if (tokens.size() < 2 || !IsKeyword(tokens[1], "GRANTS")) {
    return Status::InvalidArgument("expected GRANTS after SHOW; write e.g. '" +
                                   std::string(kShowExample) + "'");
  }
  size_t i = 2;
  if (i < tokens.size() && IsKeyword(tokens[i], "TO")) ++i;
  if (i < tokens.size() && !IsKeyword(tokens[i], "ON")) {
    if (tokens[i].text.empty() || tokens[i].text == ",") {
      return Status::InvalidArgument("expected a principal or ON after SHOW GRANTS; write e.g. '" +
                                     std::string(kShowExample) + "'");
    }
    out.principal = tokens[i++].text;
  }
  if (i >= tokens.size() || !IsKeyword(tokens[i], "ON")) {
    return Status::InvalidArgument("expected ON <securable type> <name>; write e.g. '" +
                                   std::string(kShowExample) + "'");
  }
  ++i;
  TY_RETURN_IF_ERROR(ParseSecurable(tokens, &i, kShowExample, &out));
  TY_RETURN_IF_ERROR(ExpectEnd(tokens, i, kShowExample));
  return out;
}

}  // namespace

const std::vector<std::string>& KnownPrivileges() {
  // The catalog's privilege names, in its order (catalog/permissions.h).
  static const std::vector<std::string> known = [] {
    std::vector<std::string> names;
    for (int i = 0; i < catalog::kPrivilegeCount; ++i) {
      names.emplace_back(catalog::PrivilegeName(static_cast<catalog::Privilege>(i)));
    }
    return names;
  }();
  return known;
}

Result<GrantStatement> ParseGrantStatement(std::string_view text) {
  TY_ASSIGN_OR_RETURN(std::vector<Token> tokens, Tokenize(text));
  if (tokens.empty()) {
    return Status::InvalidArgument("empty statement; write e.g. '" + std::string(kGrantExample) +
                                   "'");
  }
  if (IsKeyword(tokens[0], "GRANT")) return ParseGrantOrRevoke(tokens, GrantVerb::kGrant);
  if (IsKeyword(tokens[0], "REVOKE")) return ParseGrantOrRevoke(tokens, GrantVerb::kRevoke);
  if (IsKeyword(tokens[0], "SHOW")) return ParseShow(tokens);
  return Status::InvalidArgument("a statement starts with GRANT, REVOKE or SHOW GRANTS (got '" +
                                 Abbreviate(tokens[0].text, 40) + "'); write e.g. '" +
                                 std::string(kGrantExample) + "'");
}

Result<GrantStatement> ParseGrantStatement(const std::vector<std::string>& words) {
  std::string text;
  for (const auto& w : words) {
    // UC names hold no spaces, so words joined by one space read as the user wrote them.
    text += (text.empty() ? "" : " ") + w;
  }
  return ParseGrantStatement(text);
}

}  // namespace trainyard::cli
