package main

// The Traefik recipe of docs/proxies.md and forward-auth's path limits
// (pathsThroughProxy, authpaths_test.go).

import "testing"

// Through the Traefik recipe, no spelling of /export escapes its limit
// (pathsThroughProxy: escapes, dot segments, repeated slashes, encoded
// slashes, ";" parameters).
func TestForwardAuthTraefikPaths(t *testing.T) {
	pathsThroughProxy(t, func(t *testing.T, sluiceAddr, app string, port int) (string, func() string) {
		return startTraefik(t, "http://"+sluiceAddr, app, port, nil, "")
	})
}
