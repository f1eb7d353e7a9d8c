package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sluicehq/sluice/envoyrls"
	"github.com/sluicehq/sluice/policy"
)

type checkCmd struct {
	Policy      string `arg:"" optional:"" help:"Policy file to validate (or give it with --config)." type:"path"`
	Config      string `placeholder:"FILE" help:"Policy file to validate (or give it as the argument)." type:"path"`
	EnvoyConfig string `placeholder:"DIR" help:"Directory of Envoy ratelimit configuration files (*.yaml, *.yml) to validate instead of a policy." type:"path"`
}

// Run validates exactly one of: the policy file given as the argument, the
// one given by --config, or the Envoy directory of --envoy-config.
func (c checkCmd) Run(e *env) error {
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
		return errors.New("check needs what to validate: a policy file (sluice check FILE, or --config FILE) or a directory of Envoy ratelimit config (--envoy-config DIR)")
	case len(given) > 1:
		return fmt.Errorf("check validates one thing at a time; got %s", strings.Join(given, " and "))
	case c.EnvoyConfig != "":
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
		return err
	}
	fmt.Fprintf(e.stdout, "%s: %d limits, %d cost rules, version %s: OK\n", path, len(p.Limits), len(p.Costs), p.Version)
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
		return err
	}
	domains := make([]string, 0, len(cfg.Domains))
	limits := 0
	for d, root := range cfg.Domains {
		domains = append(domains, d)
		limits += countLimits(root)
	}
	sort.Strings(domains)
	fmt.Fprintf(e.stdout, "%s: %d domains (%s), %d rate limits: OK\n", c.EnvoyConfig, len(domains), strings.Join(domains, ", "), limits)
	return nil
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
