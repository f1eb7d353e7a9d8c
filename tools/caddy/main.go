// Command caddy is Caddy v2 with its standard modules, built from its Go
// module (github.com/caddyserver/caddy/v2), for the forward-auth recipe of
// docs/proxies.md: scripts/test.sh builds it and cmd/sluice's
// TestForwardAuthCaddy runs it. A module of its own, outside the
// workspace: Caddy's requirements must not raise the versions sluice is
// built with (build it with GOWORK=off).
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"
)

func main() { caddycmd.Main() }
