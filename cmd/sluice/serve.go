package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sluicehq/sluice/limiter"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/server"
	"github.com/sluicehq/sluice/store/memstore"
)

type serveCmd struct {
	Config        string        `required:"" help:"Policy file (hot-reloaded on SIGHUP and when it changes)." type:"path"`
	HTTP          string        `default:"127.0.0.1:8080" help:"Address of the HTTP/JSON API."`
	AuthTokenFile string        `help:"File holding a bearer token required on /v1/ endpoints (compared in constant time)." type:"path"`
	TLSCert       string        `name:"tls-cert" help:"TLS certificate file (with --tls-key)." type:"path"`
	TLSKey        string        `name:"tls-key" help:"TLS key file." type:"path"`
	MaxKeys       int           `default:"1000000" help:"Most keys held in memory; beyond it new keys are refused (503 store_full)."`
	MaxWait       time.Duration `default:"10s" help:"Cap on a request's max_wait_ms."`
	MaxWaiting    int           `default:"1024" help:"Most requests held waiting at once; beyond it requests are decided at once."`
	MaxBody       int64         `default:"65536" help:"Largest request body in bytes."`
	Idempotency   time.Duration `default:"5m" help:"How long a request_id's answer is remembered."`
	Reload        time.Duration `default:"1s" help:"How often the policy file is checked for changes (0 disables; SIGHUP still reloads)."`
}

func (c serveCmd) Run(e *env) error {
	log := slog.New(slog.NewJSONHandler(e.stderr, nil))
	p, err := policy.Load(c.Config)
	if err != nil {
		return err
	}
	token := ""
	if c.AuthTokenFile != "" {
		b, err := os.ReadFile(c.AuthTokenFile)
		if err != nil {
			return fmt.Errorf("--auth-token-file: %w", err)
		}
		if token = strings.TrimSpace(string(b)); token == "" {
			return errors.New("--auth-token-file: the file is empty")
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	st := memstore.New(memstore.WithMaxKeys(c.MaxKeys))
	lim, err := limiter.New(p, st, limiter.WithLogger(log), limiter.WithRegisterer(reg))
	if err != nil {
		return err
	}
	srv, err := server.New(server.Config{
		Limiter: lim, Gatherer: reg, AuthToken: token, MaxBodyBytes: c.MaxBody, MaxWait: c.MaxWait,
		MaxWaiting: c.MaxWaiting, IdempotencyWindow: c.Idempotency, Logger: log,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.HTTP)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	errc := make(chan error, 1)
	go func() {
		if c.TLSCert != "" {
			errc <- hs.ServeTLS(ln, c.TLSCert, c.TLSKey)
		} else {
			errc <- hs.Serve(ln)
		}
	}()
	log.Info("sluice serving", "http", ln.Addr().String(), "tls", c.TLSCert != "", "policy", c.Config, "version", p.Version, "limits", len(p.Limits))

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(stop)
	defer signal.Stop(hup)
	var tick <-chan time.Time
	if c.Reload > 0 {
		t := time.NewTicker(c.Reload)
		defer t.Stop()
		tick = t.C
	}
	last := p.Source
	reload := func(why string) {
		src, err := os.ReadFile(c.Config)
		if err != nil {
			log.Error("policy reload failed; the old policy stays in force", "reason", why, "error", err)
			return
		}
		if why == "file change" && bytes.Equal(src, last) {
			return
		}
		last = src
		np, err := policy.Parse(src)
		if err == nil {
			err = lim.SetPolicy(np)
		}
		if err != nil {
			log.Error("policy reload rejected; the old policy stays in force", "reason", why, "error", err)
			return
		}
		log.Info("policy reloaded", "reason", why, "version", np.Version, "limits", len(np.Limits))
	}
	for {
		select {
		case err := <-errc:
			return err
		case <-hup:
			reload("SIGHUP")
		case <-tick:
			reload("file change")
		case sig := <-stop:
			log.Info("shutting down: draining in-flight requests", "signal", sig.String())
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			err := hs.Shutdown(ctx)
			cancel()
			st.Close()
			if err != nil {
				return fmt.Errorf("shutdown: %w", err)
			}
			log.Info("stopped")
			return nil
		}
	}
}
