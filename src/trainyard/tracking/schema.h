// The tracking component's tables (experiments, runs, params, tags, metrics,
// datasets/inputs, logged models) as store migrations.
#pragma once

#include <vector>

#include "trainyard/store/database.h"

namespace trainyard::tracking {

std::vector<store::Migration> TrackingMigrations();

}  // namespace trainyard::tracking
