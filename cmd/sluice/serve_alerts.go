// sluice serve's alerts: --webhook and --webhook-secret-file, and the
// claims of alert events in the shared store.

package main

import (
	"bytes"
	"fmt"
	"net/url"
	"os"

	"github.com/sluicehq/sluice/server"
)

// alertFlags are serve's alert flags (the alerts themselves are the
// policy's: a limit's alerts).
type alertFlags struct {
	Webhook           string `name:"webhook" help:"POST each alert event (a limit's alerts crossed by a key: once per key, threshold and period across the instances) to this http(s) URL as JSON, retried with backoff for 10 minutes; off unless given."`
	WebhookSecretFile string `name:"webhook-secret-file" help:"File holding the secret that signs each webhook body (X-Sluice-Signature: sha256=<hex HMAC-SHA256 of the body>); surrounding whitespace is ignored."`
}

func (f alertFlags) validateAlerts() error {
	if f.Webhook != "" {
		u, err := url.Parse(f.Webhook)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--webhook %q must be an http:// or https:// URL", f.Webhook)
		}
	}
	if f.WebhookSecretFile != "" && f.Webhook == "" {
		return fmt.Errorf("--webhook-secret-file needs --webhook")
	}
	return nil
}

// alertConfig is the server's AlertConfig: events claimed in Redis when
// the store is shared, the webhook and its secret.
func (s *service) alertConfig(shared sharedStore) (server.AlertConfig, error) {
	cfg := server.AlertConfig{WebhookURL: s.c.Webhook}
	if shared.redis != nil {
		cfg.Once = shared.redis
	}
	if s.c.WebhookSecretFile != "" {
		b, err := os.ReadFile(s.c.WebhookSecretFile)
		if err != nil {
			return cfg, fmt.Errorf("--webhook-secret-file: %w", err)
		}
		if cfg.WebhookSecret = bytes.TrimSpace(b); len(cfg.WebhookSecret) == 0 {
			return cfg, fmt.Errorf("--webhook-secret-file %s is empty", s.c.WebhookSecretFile)
		}
	}
	return cfg, nil
}
