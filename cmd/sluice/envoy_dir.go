// Reading the Envoy modes' configuration directories: entries that are not regular files skipped, logged and counted.

package main

import (
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/envoyrls"
)

// newSkippedCounter is sluice_config_files_skipped_total, of the Envoy
// modes (--envoy-config, sluice ratelimit's runtime directory).
func newSkippedCounter() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: "sluice_config_files_skipped_total",
		Help: "Entries of the Envoy configuration directory (--envoy-config, sluice ratelimit's runtime directory) that a configuration load " +
			"skipped, not opened (a dangling link, a link to a directory, a socket, FIFO or device, an unreadable directory), once per entry and load; each is logged."})
}

// noteSkipped logs (a warning msg with "path" and "error") and counts in c
// each entry a load skipped.
func noteSkipped(log *slog.Logger, c prometheus.Counter, msg string, skipped []envoyrls.Skipped) {
	for _, sk := range skipped {
		c.Inc()
		log.Warn(msg, "path", sk.Path, "error", sk.Err.Error())
	}
}

// filesDigest hashes files (names and contents), to notice changes.
func filesDigest(files []string) []byte {
	h := sha256.New()
	for _, f := range files {
		b, _ := os.ReadFile(f)
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(b))
		h.Write(b)
	}
	return h.Sum(nil)
}

// envoyDigest hashes the files of --envoy-config that a load reads
// (envoyrls.DirFiles: a FIFO among them is not opened), to notice changes.
func envoyDigest(dir string) []byte {
	files, _, err := envoyrls.DirFiles(dir)
	if err != nil {
		return filesDigest(nil)
	}
	return filesDigest(files)
}

// loadEnvoyDir reads --envoy-config as envoyrls.LoadDir does, each entry
// it skips logged ("envoy config entry skipped") and counted in
// sluice_config_files_skipped_total.
func (s *service) loadEnvoyDir() (*envoyrls.Config, error) {
	files, skipped, err := envoyrls.DirFiles(s.c.EnvoyConfig)
	noteSkipped(s.log, s.skipped, "envoy config entry skipped", skipped)
	if err != nil {
		return nil, err
	}
	return envoyrls.LoadFiles(files)
}
