// sluice check: a policy file or an Envoy configuration directory validated and summarised.

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/envoyrls"
	"github.com/sluicehq/sluice/policy"
)

type checkCmd struct {
	Policy      string `arg:"" optional:"" help:"Policy file to validate (or give it with --config)." type:"path"`
	Config      string `placeholder:"FILE" help:"Policy file to validate (or give it as the argument)." type:"path"`
	EnvoyConfig string `placeholder:"DIR" help:"Directory of Envoy ratelimit configuration files (*.yaml, *.yml) to validate instead of a policy." type:"path"`
}

// Validate requires exactly one of: the policy file given as the argument,
// the one given by --config, or the Envoy directory of --envoy-config (kong
// calls it after parsing; its error is a usage error, exit status 2).
func (c checkCmd) Validate() error {
	var given []string
	if c.Policy != "" {
		given = append(given, fmt.Sprintf("the argument %s", c.Policy))
	}
	if c.Config != "" {
		given = append(given, fmt.Sprintf("--config %s (or $SLUICE_CHECK_CONFIG)", c.Config))
	}
	if c.EnvoyConfig != "" {
		given = append(given, fmt.Sprintf("--envoy-config %s (or $SLUICE_CHECK_ENVOY_CONFIG)", c.EnvoyConfig))
	}
	switch {
	case len(given) == 0:
		return errors.New("nothing to validate: give a policy file (sluice check FILE, or --config FILE) or a directory of Envoy ratelimit config (--envoy-config DIR)")
	case len(given) > 1:
		return fmt.Errorf("validates one thing at a time; got %s", strings.Join(given, " and "))
	}
	return nil
}

// Run validates what Validate accepted and prints a summary of it.
func (c checkCmd) Run(e *env) error {
	if c.EnvoyConfig != "" {
		return c.envoy(e)
	}
	path := c.Policy
	if path == "" {
		path = c.Config
	}
	p, err := policy.Load(path)
	if err != nil {
		if looksLikeEnvoy(err) {
			return fmt.Errorf("%w\nthis looks like an Envoy ratelimit config: use --envoy-config %s", err, filepath.Dir(path))
		}
		if fi, serr := os.Stat(path); serr == nil && fi.IsDir() {
			return fmt.Errorf("%w (a directory: for Envoy ratelimit config use --envoy-config %s)", err, path)
		}
		return err
	}
	ovs, err := readPolicyOverrides(p)
	if err != nil {
		return err
	}
	more := ""
	if len(ovs) > 0 {
		more = ", " + plural(len(ovs), "override")
	}
	fmt.Fprintf(e.stdout, "%s: %s, %s%s, version %s: OK\n", path, plural(len(p.Limits), "limit"), plural(len(p.Costs), "cost rule"), more, p.Version)
	return nil
}

// looksLikeEnvoy reports whether a policy error is an unknown top-level
// field of Envoy's ratelimit format (domain, descriptors).
func looksLikeEnvoy(err error) bool {
	var es policy.Errors
	if !errors.As(err, &es) {
		return false
	}
	for _, pe := range es {
		if pe.Limit == "" && (pe.Field == "domain" || pe.Field == "descriptors") && strings.HasPrefix(pe.Msg, "unknown field") {
			return true
		}
	}
	return false
}

func (c checkCmd) envoy(e *env) error {
	cfg, err := envoyrls.LoadDir(c.EnvoyConfig)
	if err != nil {
		return envoyDirError(c.EnvoyConfig, err)
	}
	domains := make([]string, 0, len(cfg.Domains))
	limits := 0
	for d, root := range cfg.Domains {
		domains = append(domains, d)
		limits += countLimits(root)
	}
	sort.Strings(domains)
	fmt.Fprintf(e.stdout, "%s: %s (%s), %s: OK\n", c.EnvoyConfig, plural(len(domains), "domain"), strings.Join(domains, ", "), plural(limits, "rate limit"))
	return nil
}

// envoyDirError is err, of envoyrls.LoadDir(dir) for --envoy-config dir,
// naming the flag when it is about the directory itself ("--envoy-config
// DIR: no such directory", "... is a file, not a directory").
func envoyDirError(dir string, err error) error {
	if !errors.Is(err, envoyrls.ErrInvalid) && strings.HasPrefix(err.Error(), dir+": ") {
		return fmt.Errorf("--envoy-config %w", err)
	}
	return err
}

// plural is "1 noun" or "n nouns".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// countLimits is the number of rate_limit entries in n's tree.
func countLimits(n *envoyrls.Node) int {
	k := 0
	if n.Limit != nil {
		k++
	}
	for _, c := range n.Children {
		k += countLimits(c)
	}
	return k
}
