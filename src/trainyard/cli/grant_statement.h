// GrantStatement: the SQL-style privilege statements of the CLI, parsed without I/O.
//
//   GRANT <privileges> ON <securable type> <full name> TO <principal>
//   REVOKE <privileges> ON <securable type> <full name> FROM <principal>
//   SHOW GRANTS [TO <principal>] ON <securable type> <full name>
//
// <privileges> is a comma-separated list of Unity Catalog privilege names ("SELECT",
// "USE CATALOG", "ALL PRIVILEGES", ...; keywords are case-insensitive, "USE_CATALOG" is
// accepted too). The securable type is one of UC's (CATALOG, SCHEMA, TABLE, VOLUME, FUNCTION,
// MODEL / REGISTERED MODEL, EXTERNAL LOCATION, CREDENTIAL, METASTORE; METASTORE takes no
// name). A name or principal may be quoted with backticks. Errors say what to write instead.
//
// Pure functions of their input; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "trainyard/common/status.h"

namespace trainyard::cli {

enum class GrantVerb { kGrant, kRevoke, kShow };

struct GrantStatement {
  GrantVerb verb = GrantVerb::kGrant;
  // Canonical UC names ("USE CATALOG"), without duplicates, in the order written. Empty for SHOW.
  std::vector<std::string> privileges;
  // UC's securable_type of the permissions API ("table", "registered_model", ...).
  std::string securable_type;
  // The object's full name ("main.support.tickets"); "metastore" for the metastore.
  std::string full_name;
  // Who gets or loses the privileges; for SHOW, "" (everyone) or the one principal asked for.
  std::string principal;
};

// Parses one statement from its words (argv after `trainyard`: "grant", "SELECT", "ON", ...;
// a word may hold several, e.g. "USE CATALOG, USE SCHEMA").
Result<GrantStatement> ParseGrantStatement(const std::vector<std::string>& words);
Result<GrantStatement> ParseGrantStatement(std::string_view text);

// The privileges ParseGrantStatement accepts, in UC's order followed by MANAGE and
// ALL PRIVILEGES.
const std::vector<std::string>& KnownPrivileges();

}  // namespace trainyard::cli
