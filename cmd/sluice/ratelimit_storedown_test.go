// sluice ratelimit with its Redis down: the reference's answer (an error Envoy's failure_mode_deny decides), or the mode SLUICE_ON_STORE_ERROR names.

package main

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestRatelimitRedisDown: with nothing listening at REDIS_URL, a
// ShouldRateLimit call fails UNAVAILABLE and counts as the reference's
// redis_error, so that Envoy applies its failure_mode_deny as it does
// with the reference, while /healthcheck stays 200 (startRatelimit waits
// for it) unless REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true;
// SLUICE_ON_STORE_ERROR=fail_open admits instead, and a mode that is none
// of serve's stops the start naming the variable.
func TestRatelimitRedisDown(t *testing.T) {
	root := filepath.Join(t.TempDir(), "data")
	writeRuntime(t, root, map[string]string{"ratelimit/config/basic.yaml": rtBasic})
	dead := "127.0.0.1:" + rlPort(t) // a free port: nothing listens there
	req := rlRequest("basic", [][][2]string{{{"key1", "foo"}}}, 1)

	t.Run("default", func(t *testing.T) {
		env := rlEnv(t, root, dead)
		env["REDIS_TIMEOUT"] = "250ms"
		p := startRatelimit(t, env)
		c := rlClient(t, p)
		for i := range 3 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := c.ShouldRateLimit(ctx, req)
			cancel()
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("call %d with Redis down: %v, want UNAVAILABLE", i+1, err)
			}
		}
		if n := rlMetric(t, p.metrics, "ratelimit_service_should_rate_limit_error", `err_type="redis_error"`); n < 3 {
			t.Fatalf("redis_error = %v, want >= 3", n)
		}
	})

	t.Run("fail_open", func(t *testing.T) {
		env := rlEnv(t, root, dead)
		env["REDIS_TIMEOUT"] = "250ms"
		env["SLUICE_ON_STORE_ERROR"] = "fail_open"
		p := startRatelimit(t, env)
		if got := rlAsk(t, rlClient(t, p), req).GetOverallCode(); got != ok {
			t.Fatalf("fail_open with Redis down: %v, want OK", got)
		}
	})

	t.Run("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", func(t *testing.T) {
		env := rlEnv(t, root, dead)
		env["REDIS_TIMEOUT"] = "250ms"
		env["REDIS_HEALTH_CHECK_ACTIVE_CONNECTION"] = "true"
		cmd := rlCommand(context.Background(), env)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		// From its first answer on, for a second and a half (the default
		// case is 200 by then: startRatelimit waits for it), never 200.
		deadline, answered := time.Now().Add(15*time.Second), time.Time{}
		for answered.IsZero() || time.Since(answered) < 1500*time.Millisecond {
			resp, err := http.Get("http://127.0.0.1:" + env["PORT"] + "/healthcheck")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					t.Fatal("/healthcheck 200 with Redis down and REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true")
				}
				if answered.IsZero() {
					answered = time.Now()
				}
			} else if time.Now().After(deadline) {
				t.Fatalf("/healthcheck never answered: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("bad mode", func(t *testing.T) {
		env := rlEnv(t, root, dead)
		env["SLUICE_ON_STORE_ERROR"] = "fail_sideways"
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := rlCommand(ctx, env).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "SLUICE_ON_STORE_ERROR") {
			t.Fatalf("bad SLUICE_ON_STORE_ERROR: err %v, output %s", err, out)
		}
	})
}
