// ModelNamespace: the names of registered models that another component also holds as
// objects of its own, so that one registry can be seen two ways (docs/decisions/0013).
//
// The catalog implements it for three-level names ("catalog.schema.model"): such a model is
// a securable there (owner, grants, storage location) and its versions, tags and aliases are
// the registry's, under the same name. RegistryService asks the namespace whether it claims
// a name and calls it around the changes that create, rename or remove a claimed model, so
// the two stay one whichever API (MLflow's or Unity Catalog's) made the change.
//
// Implementations must be thread-safe and must not call back into RegistryService from
// these methods.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "trainyard/common/status.h"
#include "trainyard/identity/authorizer.h"

namespace trainyard::registry {

class ModelNamespace {
 public:
  virtual ~ModelNamespace() = default;

  // The stored form of `name` when it is one of the namespace's names ("Main.S.M" →
  // "main.s.m"); nullopt for any other name (a plain MLflow model name).
  virtual std::optional<std::string> Claim(std::string_view name) = 0;
  // Before the registry creates the claimed model `name`: decides whether `who` may create
  // it (PermissionDenied, or NotFound for a missing parent) and creates its object.
  virtual Status Create(const identity::Principal& who, const std::string& name,
                        const std::string& description) = 0;
  // Before the registry renames a model where `name` or `new_name` is claimed: decides and
  // renames the object (InvalidArgument naming new_name when the rename cannot be made).
  virtual Status Rename(const identity::Principal& who, const std::string& name,
                        const std::string& new_name) = 0;
  // After the registry removed the claimed model `name` (or failed to create it): removes
  // its object. The registry has already authorized the removal. Ok when there is none.
  virtual Status Remove(const std::string& name) = 0;
};

}  // namespace trainyard::registry
