// Package testdb gives each test its own fully migrated database on the test
// cluster that `make test` starts (SYNCHRO_TEST_DATABASE_URL). A test that cannot
// get one fails; it never skips.
//
// Every database is made from a template migrated once per test binary with
// the same code synchrod runs (internal/migrate); the package also manages
// logical replication slots of a test database and decodes their changes with
// internal/capture, for tests of capture. It is test support only: no package
// outside tests imports it.
package testdb
