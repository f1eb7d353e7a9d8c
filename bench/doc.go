// Package bench holds benchmarks that run sluice side by side with its peers
// (golang.org/x/time/rate, x/sync's semaphore, go-limiter, redis_rate,
// gubernator) in one run. It is a module of its own outside the repository's
// workspace (go.work), so that the peers' requirements never reach sluice's:
// run its commands with GOWORK=off (its scripts do).
//
// Run: GOWORK=off go test -run '^$' -bench . -count 6 | tee new.txt; benchstat -col /impl new.txt
package bench
