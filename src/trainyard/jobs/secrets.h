// SecretService: named secret values (API keys, tokens) that job specs reference by
// name (`secrets: {HF_TOKEN: hf-token}`) and that are injected into the workload's
// environment at launch. Values are sealed with AES-256-GCM before they reach the
// database and are never returned by any call but Resolve (the job service's, at
// launch). A secret belongs to its creator, or, created with a project, to that
// project's members: only they may use it in a job. Names are unique.
//
// Thread-safe.
#pragma once

#include <string>
#include <vector>

#include "trainyard/common/clock.h"
#include "trainyard/common/status.h"
#include "trainyard/identity/identity_service.h"
#include "trainyard/identity/secret_cipher.h"
#include "trainyard/jobs/projects.h"
#include "trainyard/store/database.h"

namespace trainyard::jobs {

struct SecretInfo {
  std::string name;
  std::string owner;
  std::string project;  // "" = the owner's own
  int64_t created_at = 0;
};

struct CreateSecretRequest {
  std::string name;
  std::string project;  // "" = the creator's own
  std::string value;
};

class SecretService {
 public:
  static constexpr size_t kMaxValueBytes = 64 * 1024;

  SecretService(store::Database& db, Clock& clock, identity::SecretCipher cipher,
                ProjectService& projects)
      : db_(db), clock_(clock), cipher_(std::move(cipher)), projects_(projects) {}
  SecretService(const SecretService&) = delete;
  SecretService& operator=(const SecretService&) = delete;

  static std::vector<store::Migration> Migrations();

  // A project-scoped secret needs membership of the project (or an admin).
  Result<SecretInfo> Create(const identity::Principal& who, const CreateSecretRequest& request);
  // Names only: admins see all; others their own and their projects'.
  Result<std::vector<SecretInfo>> List(const identity::Principal& who);
  // Its owner or an admin.
  Status Delete(const identity::Principal& who, const std::string& name);
  // Deletes every secret `user` owns (the user was deleted).
  Status ForgetUser(const std::string& user);
  // Whether `user` may use secret `name` in a job (its owner, or a member of its project).
  Status CheckUse(const std::string& user, const std::string& name);
  // The value, for `user`'s job at launch (CheckUse applies).
  Result<std::string> Resolve(const std::string& user, const std::string& name);

 private:
  Result<SecretInfo> Load(const std::string& name, std::string* sealed_hex);

  store::Database& db_;
  Clock& clock_;
  const identity::SecretCipher cipher_;
  ProjectService& projects_;
};

}  // namespace trainyard::jobs
