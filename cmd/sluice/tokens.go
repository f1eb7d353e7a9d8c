// Token files: one parser for every flag that names one
// (--auth-token-file, --admin-token-file, a client's --token-file).

package main

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/sluicehq/sluice/server"
)

// tokenName is what may name a token: the part of a line before its first
// ":" when it matches, else the line is a token without a name.
var tokenName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$`)

// parseTokens reads a token file: one token a line, "name:token" giving it
// the name the audit log shows as the actor of its changes, a line without
// a name prefix (no ":" after a name-like start) a token without a name (a
// file of one plain token, as before, is one such line). Blank lines and
// lines starting with "#" are skipped; whitespace around names and tokens
// is dropped. A token that holds ":" after a name-like start must be
// written with a name ("ci:abc:def" is the token "abc:def" named "ci").
// Errors: an empty file, an empty token, a name or a token given twice.
func parseTokens(src string) ([]server.Token, error) {
	var out []server.Token
	names, values := map[string]int{}, map[string]int{}
	for i, line := range strings.Split(src, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		t := server.Token{Value: line}
		if name, value, ok := strings.Cut(line, ":"); ok && tokenName.MatchString(strings.TrimSpace(name)) {
			t = server.Token{Name: strings.TrimSpace(name), Value: strings.TrimSpace(value)}
			if t.Value == "" {
				return nil, fmt.Errorf("line %d: the token named %q is empty", i+1, t.Name)
			}
		}
		if t.Name != "" {
			if at, dup := names[t.Name]; dup {
				return nil, fmt.Errorf("line %d: the name %q is given on line %d too", i+1, t.Name, at)
			}
			names[t.Name] = i + 1
		}
		if at, dup := values[t.Value]; dup {
			return nil, fmt.Errorf("line %d: the same token as on line %d", i+1, at)
		}
		values[t.Value] = i + 1
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, errors.New("the file is empty")
	}
	return out, nil
}

// readTokens reads the token file of flag ("" path: none).
func readTokens(flag, path string) ([]server.Token, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	ts, err := parseTokens(string(b))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	return ts, nil
}

// clientToken is the token a client sends from the token file of flag:
// its first.
func clientToken(flag, path string) (string, error) {
	ts, err := readTokens(flag, path)
	if err != nil || len(ts) == 0 {
		return "", err
	}
	return ts[0].Value, nil
}

// authTokens reads --auth-token-file (nil when not given).
func (c serveCmd) authTokens() ([]server.Token, error) {
	return readTokens("--auth-token-file", c.AuthTokenFile)
}

// adminTokens reads --admin-token-file (nil when not given).
func (c serveCmd) adminTokens() ([]server.Token, error) {
	return readTokens("--admin-token-file", c.AdminTokenFile)
}
