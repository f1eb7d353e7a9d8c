// Package bench holds benchmarks that run sluice side by side with its peers
// (golang.org/x/time/rate, and later redis_rate and others) in one run. It is
// a separate module so that the main module's dependencies stay lean.
//
// Run: go test -run '^$' -bench . -count 6 | tee new.txt; benchstat -col /impl new.txt
package bench
