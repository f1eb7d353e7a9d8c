// Package internal holds, in its subdirectories, the packages sluice's
// modules share with each other and with no one else (the go command
// refuses an import of github.com/sluicehq/sluice/internal/... from outside
// github.com/sluicehq/sluice and its nested modules). This package itself is
// empty: it is the list below, of what each internal package holds and
// which packages may import it.
//
// Importers are directories from the repository root: "." is the root
// package sluice, a name ending in "/..." is every package under it,
// "tests" is any _test.go file of the repository; a package's own tests
// may always import it. The modules are those of go.work (the root module
// github.com/sluicehq/sluice, cmd/sluice, envoyrls, sim, store/failover,
// store/lease, store/redisstore) and bench/, a module outside the
// workspace. TestImports (doc_test.go) fails on an import this list does
// not allow and on an internal package it does not name.
//
//   - internal/answer renders decisions and errors into answers, once for
//     every surface: a decision's tightest limit, its RateLimit,
//     RateLimit-Policy and Retry-After headers, and the error table (each
//     error code with its HTTP status and gRPC code). Imported by:
//     envoyrls, httplimit, server.
//   - internal/keyesc escapes descriptor values into store keys (%XX).
//     Imported by: bench, envoyrls, gate, limiter, policy, store/redisstore.
//   - internal/ratelog rate-limits repeated log records, counting the ones
//     it holds back. Imported by: limiter, server, store/failover.
//   - internal/redistest starts redis-server processes and Redis Clusters of
//     a test's own, on free loopback ports. Imported by: bench/..., tests.
//   - internal/suggest finds the nearest known name to a misspelled one,
//     for "did you mean" hints. Imported by: envoyrls, limiter, policy.
//   - internal/testbin finds the programs other than Go that tests run
//     (redis-server, nginx, Chromium, Caddy, ...): a test that needs one
//     is skipped in -short mode and fails without -short when it is
//     missing. Imported by: tests, internal/redistest.
//   - internal/yamlmsg turns a YAML syntax error into a line and a message.
//     Imported by: envoyrls, policy.
package internal
