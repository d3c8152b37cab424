// Random human-friendly names for runs and logged models ("bright-fox-42"), as MLflow gives.
#pragma once

#include <string>

#include "trainyard/common/clock.h"

namespace trainyard::tracking {

std::string GenerateRunName(Random& random);

}  // namespace trainyard::tracking
