// Small network helpers shared by components and tests.
#pragma once

#include "trainyard/common/status.h"

namespace trainyard {

// A TCP port that was free on 127.0.0.1 a moment ago (bind port 0, read it, close). Another
// process may take it before the caller binds it; use only where that race is acceptable
// (torchrun's MASTER_PORT, servers started by tests).
Result<int> PickFreeLocalPort();

}  // namespace trainyard
