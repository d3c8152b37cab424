// PostgreSQL for tests. On first use the process starts a throwaway server of
// its own: `initdb` into a fresh temp dir, `postgres` on 127.0.0.1 and a free
// port with its unix socket in that dir (as the `postgres` system user when run
// as root, since PostgreSQL refuses root). The server is stopped and the dir
// deleted when the process exits, also when it crashes: a small shell guardian
// that owns the server does it once the process's end of a pipe closes.
//
// With TRAINYARD_TEST_POSTGRES_URL=postgresql://user@host:port/db set, that
// server is used instead (the user must be allowed to CREATE DATABASE), and the
// databases made for the tests are dropped at exit.
//
// Thread-safe. Lives in the testing library (trainyard_testing), which only test
// binaries and test tools link, so it never ships in the server; it uses no test
// framework and reports failures as a Status. It keeps the namespace of the store
// it serves, so that the store tests' calls read `store::PostgresUrlForTest()`.
#pragma once

#include <string>

#include "trainyard/common/status.h"

namespace trainyard::store {

// Returns the URL of a new, empty database (postgresql://...:PORT/ty_test_PID_N).
// Fails, saying why and what to do, when no server can be had, e.g. when the
// PostgreSQL server binaries are not installed.
Result<std::string> PostgresUrlForTest();

}  // namespace trainyard::store
