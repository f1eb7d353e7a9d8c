//go:build race

package policy_test

// raceEnabled is true under the race detector, which slows parsing ~10x.
const raceEnabled = true
