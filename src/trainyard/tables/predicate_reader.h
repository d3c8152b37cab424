// PredicateReader: who reads, for a predicate's current_user() and is_member() (predicate.h),
// as a light header the catalog's service interface includes.
#pragma once

#include <string>
#include <vector>

namespace trainyard::tables {

// A user (or service principal) name and every group they are in, transitively, sorted.
struct PredicateReader {
  std::string user;
  std::vector<std::string> groups;
};

}  // namespace trainyard::tables
