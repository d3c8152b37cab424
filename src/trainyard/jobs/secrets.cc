#include "trainyard/jobs/secrets.h"

#include "trainyard/common/strings.h"

namespace trainyard::jobs {
namespace {

// The longest secret name (it names an env variable's source in specs and errors).
constexpr size_t kMaxNameBytes = 128;

bool ValidSecretName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) {
      return false;
    }
  }
  return true;
}

std::string ToHex(std::string_view bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

Result<std::string> FromHex(std::string_view hex) {
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (hex.size() % 2 != 0) return Status::Internal("a stored secret is not hex");
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return Status::Internal("a stored secret is not hex");
    out[i] = static_cast<char>(hi * 16 + lo);
  }
  return out;
}

Status SecretNotFound(const std::string& name) {
  return Status::NotFound("secret '" + name +
                          "' does not exist; create it with 'trainyard secrets create " + name +
                          "' (list yours with 'trainyard secrets list')");
}

}  // namespace

std::vector<store::Migration> SecretService::Migrations() {
  return {{"secrets",
           1,
           {"CREATE TABLE secrets (name TEXT PRIMARY KEY, owner TEXT NOT NULL, project TEXT NOT "
            "NULL, sealed TEXT NOT NULL, created_at BIGINT NOT NULL)"}}};
}

Result<SecretInfo> SecretService::Create(const identity::Principal& who,
                                         const CreateSecretRequest& request) {
  const std::string& name = request.name;
  const std::string& project = request.project;
  const std::string& value = request.value;
  if (!who.scope.empty()) {
    return Status::PermissionDenied("a token scoped to " + who.scope + " may not create secrets");
  }
  if (!ValidSecretName(name)) {
    return Status::InvalidArgument("name must be 1-" + std::to_string(kMaxNameBytes) +
                                   " letters, digits, '_', '-', '.' (got '" + Abbreviate(name) +
                                   "')");
  }
  if (value.empty() || value.size() > kMaxValueBytes) {
    return Status::InvalidArgument("value must be 1 to " + std::to_string(kMaxValueBytes) +
                                   " bytes");
  }
  if (value.find('\0') != std::string::npos) {
    return Status::InvalidArgument("value must not contain NUL bytes (it becomes an env variable)");
  }
  if (!project.empty() && !who.is_admin) {
    TY_ASSIGN_OR_RETURN(bool member, projects_.IsMember(who.user, project));
    if (!member) {
      return Status::PermissionDenied("user '" + who.user + "' is not a member of project '" +
                                      project + "'; ask an admin: trainyard projects add-member " +
                                      project + " " + who.user);
    }
  }
  TY_ASSIGN_OR_RETURN(std::string sealed, cipher_.Seal(value, name));
  SecretInfo info{name, who.user, project, clock_.NowMillis()};
  TY_RETURN_IF_ERROR(db_.Write([&](store::Transaction& tx) -> Status {
    auto r = tx.Exec(
        "INSERT INTO secrets (name, owner, project, sealed, created_at) VALUES (?, ?, ?, ?, ?)",
        {name, who.user, project, ToHex(sealed), info.created_at});
    if (!r.ok() && r.status().IsAlreadyExists()) {
      return Status::AlreadyExists("secret '" + name +
                                   "' already exists; delete it first with 'trainyard secrets "
                                   "delete " +
                                   name + "' to replace it");
    }
    return r.status();
  }));
  return info;
}

Result<std::vector<SecretInfo>> SecretService::List(const identity::Principal& who) {
  std::vector<SecretInfo> all;
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto rows, tx.Query("SELECT name, owner, project, created_at FROM secrets "
                                            "ORDER BY name"));
    for (const auto& r : rows) all.push_back({r.Text(0), r.Text(1), r.Text(2), r.Int(3)});
    return Status::Ok();
  }));
  if (who.is_admin) return all;
  std::vector<SecretInfo> out;
  for (auto& s : all) {
    bool visible = s.owner == who.user;
    if (!visible && !s.project.empty()) {
      TY_ASSIGN_OR_RETURN(visible, projects_.IsMember(who.user, s.project));
    }
    if (visible) out.push_back(std::move(s));
  }
  return out;
}

Result<SecretInfo> SecretService::Load(const std::string& name, std::string* sealed_hex) {
  SecretInfo info;
  TY_RETURN_IF_ERROR(db_.Read([&](store::Transaction& tx) -> Status {
    TY_ASSIGN_OR_RETURN(auto rows, tx.Query("SELECT name, owner, project, created_at, sealed FROM "
                                            "secrets WHERE name = ?",
                                            {name}));
    if (rows.empty()) return SecretNotFound(name);
    info = {rows[0].Text(0), rows[0].Text(1), rows[0].Text(2), rows[0].Int(3)};
    if (sealed_hex) *sealed_hex = rows[0].Text(4);
    return Status::Ok();
  }));
  return info;
}

Status SecretService::Delete(const identity::Principal& who, const std::string& name) {
  if (!who.scope.empty()) {
    return Status::PermissionDenied("a token scoped to " + who.scope + " may not delete secrets");
  }
  TY_ASSIGN_OR_RETURN(SecretInfo info, Load(name, nullptr));
  if (!who.is_admin && info.owner != who.user) {
    return Status::PermissionDenied("secret '" + name + "' belongs to " + info.owner +
                                    "; only its owner or an admin may delete it");
  }
  return db_.Write([&](store::Transaction& tx) -> Status {
    return tx.Exec("DELETE FROM secrets WHERE name = ?", {name}).status();
  });
}

Status SecretService::ForgetUser(const std::string& user) {
  return db_.Write([&](store::Transaction& tx) -> Status {
    return tx.Exec("DELETE FROM secrets WHERE owner = ?", {user}).status();
  });
}

Status SecretService::CheckUse(const std::string& user, const std::string& name) {
  TY_ASSIGN_OR_RETURN(SecretInfo info, Load(name, nullptr));
  if (info.owner == user) return Status::Ok();
  if (!info.project.empty()) {
    TY_ASSIGN_OR_RETURN(bool member, projects_.IsMember(user, info.project));
    if (member) return Status::Ok();
  }
  // Not found rather than denied would hide its existence; the name is not the secret.
  return Status::PermissionDenied(
      "secret '" + name + "' belongs to " + info.owner +
      (info.project.empty() ? "" : " (project " + info.project + ")") + "; only its owner" +
      (info.project.empty() ? "" : " or the project's members") + " may use it");
}

Result<std::string> SecretService::Resolve(const std::string& user, const std::string& name) {
  TY_RETURN_IF_ERROR(CheckUse(user, name));
  std::string sealed_hex;
  TY_RETURN_IF_ERROR(Load(name, &sealed_hex).status());
  TY_ASSIGN_OR_RETURN(std::string sealed, FromHex(sealed_hex));
  return cipher_.Open(sealed, name);
}

}  // namespace trainyard::jobs
