// Row "service": a real sluice serve on the run's Redis with an adaptive
// limit, and Python workers (worker.py) that check it before each call
// and report each 429 without hints with report_response (POST
// /v1/feedback).

package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// sluiceServe is a running sluice serve.
type sluiceServe struct {
	cmd  *exec.Cmd
	url  string
	root string
	dir  string
}

// repoRoot is the repository's root (the directory holding go.work).
func repoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d, nil
		}
		up := filepath.Dir(d)
		if up == d {
			return "", fmt.Errorf("no go.work above the working directory")
		}
		d = up
	}
}

// startService starts sluice serve ($SLUICE_BIN, else built from the
// repository) on a free loopback port, its policy the gates' parameters
// as an adaptive limit, its state on Redis under prefix.
func startService(cfg Config, redisAddr, prefix string) (*sluiceServe, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "adaptive-")
	if err != nil {
		return nil, err
	}
	bin := os.Getenv("SLUICE_BIN")
	if bin == "" {
		bin = filepath.Join(dir, "sluice")
		b := exec.Command("go", "build", "-o", bin, "./cmd/sluice")
		b.Dir, b.Stderr = root, os.Stderr
		if err := b.Run(); err != nil {
			return nil, fmt.Errorf("building sluice: %w", err)
		}
	}
	policy := fmt.Sprintf(`limits:
  - name: provider
    key: "provider:{provider}"
    capacity: 2
    refill_per_second: %v
    adaptive: {min_refill_per_second: %v, decrease: %v, increase_per_second: %v, cooldown: %v}
`, cfg.Max, cfg.Min, cfg.Decrease, cfg.Increase, cfg.Cooldown)
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte(policy), 0o600); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	s := &sluiceServe{url: "http://" + addr, root: root, dir: dir}
	s.cmd = exec.Command(bin, "serve", "--config", path, "--http", addr, "--store", "redis://"+redisAddr+"/0",
		"--max-wait", "15s", "--log-format", "text")
	if os.Getenv("ADAPTIVE_DEBUG") != "" {
		s.cmd.Stderr = os.Stderr
	}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	for start := time.Now(); time.Since(start) < 20*time.Second; time.Sleep(50 * time.Millisecond) {
		if res, err := http.Get(s.url + "/readyz"); err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return s, nil
			}
		}
	}
	s.stop()
	return nil, fmt.Errorf("sluice serve did not become ready at %s", s.url)
}

// worker is the command of one Python worker.
func (s *sluiceServe) worker(cfg Config, provider string, secs float64) *exec.Cmd {
	py := os.Getenv("PYTHON")
	if py == "" {
		py = "python3"
	}
	cmd := exec.Command(py, filepath.Join(s.root, "bench", "adaptive", "worker.py"), s.url, provider,
		strconv.FormatFloat(secs, 'f', -1, 64), strconv.Itoa(cfg.Concurrency))
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(s.root, "clients", "python"))
	return cmd
}

func (s *sluiceServe) stop() {
	if s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
	os.RemoveAll(s.dir)
}
