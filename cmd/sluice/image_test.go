package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/testbin"
)

// maxImageSize is the most the image may weigh, uncompressed (issue 26:
// 50 MB; the stripped static binary alone is about 38 MB).
const maxImageSize = 50_000_000

// podmanRun are the flags every container of the test runs with: podman
// from Debian runs containers on the test machines with runc and explicit
// ulimits (the defaults it would set from the host's fail there).
var podmanRun = []string{"--runtime", "runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}

// podman runs the podman CLI with the global flags scripts/image.sh uses
// (no systemd here) and $SLUICE_IMAGE_ENGINE_FLAGS.
type podman struct {
	bin   string
	flags []string
}

func (p podman) cmd(ctx context.Context, args ...string) *exec.Cmd {
	all := append(append([]string{"--cgroup-manager", "cgroupfs", "--events-backend", "file"}, p.flags...), args...)
	return exec.CommandContext(ctx, p.bin, all...)
}

// out runs podman args and returns its stdout; a failure ends t with
// stderr.
func (p podman) out(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	c := p.cmd(ctx, args...)
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		t.Fatalf("podman %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// container is a detached container of the test, removed when it ends.
type container struct {
	p    podman
	name string
}

// start runs the image detached: podman run -d podmanRun flags... image args...
func (p podman) start(t *testing.T, name string, flags []string, image string, args ...string) container {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p.cmd(ctx, "rm", "-f", "-t", "0", name).Run()
	})
	all := append([]string{"run", "-d", "--name", name}, podmanRun...)
	all = append(append(append(all, flags...), image), args...)
	p.out(t, all...)
	return container{p, name}
}

// logs is the container's output (sluice's log records).
func (c container) logs(t *testing.T) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, _ := c.p.cmd(ctx, "logs", c.name).CombinedOutput()
	return string(out)
}

// inspect is podman inspect's answer about the container.
type inspected struct {
	State struct {
		Pid        int
		ExitCode   int
		Running    bool
		FinishedAt time.Time
	}
	Config struct {
		User string
	}
	HostConfig struct {
		ReadonlyRootfs bool
	}
}

func (c container) inspect(t *testing.T) inspected {
	t.Helper()
	var got []inspected
	if err := json.Unmarshal([]byte(c.p.out(t, "inspect", "--type", "container", c.name)), &got); err != nil || len(got) != 1 {
		t.Fatalf("podman inspect %s: %v %v", c.name, got, err)
	}
	return got[0]
}

// waitHTTP waits until base/healthz answers 200, failing t with the
// container's logs after 30 s.
func (c container) waitHTTP(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if code, _, err := get(base + "/healthz"); err == nil && code == 200 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: no /healthz at %s within 30 s; logs:\n%s", c.name, base, c.logs(t))
}

// stop sends SIGTERM and waits: sluice must exit 0 within 2 s of the
// signal (the process's own exit time, as podman recorded it).
func (c container) stop(t *testing.T) {
	t.Helper()
	sent := time.Now()
	c.p.out(t, "kill", "--signal", "TERM", c.name)
	code := strings.TrimSpace(c.p.out(t, "wait", c.name))
	waited := time.Since(sent)
	st := c.inspect(t).State
	took := st.FinishedAt.Sub(sent)
	t.Logf("%s: SIGTERM to exit %v (podman wait returned after %v)", c.name, took.Round(time.Millisecond), waited.Round(time.Millisecond))
	if code != "0" || st.ExitCode != 0 {
		t.Fatalf("%s: exit status %s (%d) after SIGTERM, want 0; logs:\n%s", c.name, code, st.ExitCode, c.logs(t))
	}
	if took > 2*time.Second {
		t.Fatalf("%s: exited %v after SIGTERM, want within 2 s; logs:\n%s", c.name, took, c.logs(t))
	}
}

func get(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func check(t *testing.T, base, tenant string) int {
	t.Helper()
	resp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(`{"descriptors": {"tenant": "`+tenant+`"}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// exhaust spends tenant's bucket of the example policy (capacity 10):
// ten checks admitted, the eleventh refused.
func exhaust(t *testing.T, base, tenant string) {
	t.Helper()
	for i := range 11 {
		want := 200
		if i == 10 {
			want = 429
		}
		if code := check(t, base, tenant); code != want {
			t.Fatalf("check %d of tenant %s at %s: %d, want %d", i+1, tenant, base, code, want)
		}
	}
}

// TestImage builds the container image with scripts/image.sh (once; or
// takes $SLUICE_IMAGE, an image scripts/image.sh built from this tree
// beforehand, as the test command does to build it while other tests run) and
// runs it for real with podman, rootful, on loopback ports: what it holds,
// the default CMD (the example policy on :8080 and :8081, /healthz and
// /readyz, a check admitted then refused, over HTTP and gRPC) with a
// read-only root filesystem (no tmpfs either) as uid 65532, its
// HEALTHCHECK, SIGTERM (exit 0 within 2 s), `sluice version`, and the same
// image on a real Redis given by URL (--network host: the redis-server
// listens on the host's loopback only).
func TestImage(t *testing.T) {
	bin := testbin.Need(t, testbin.Podman)
	p := podman{bin: bin, flags: strings.Fields(os.Getenv("SLUICE_IMAGE_ENGINE_FLAGS"))}
	id := strconv.Itoa(os.Getpid())
	image := "localhost/sluice:test-" + id
	name := func(s string) string { return "sluice-test-" + id + "-" + s }

	head, _ := exec.Command("git", "rev-parse", "HEAD").Output() // before the build: others may commit meanwhile
	if prebuilt := os.Getenv("SLUICE_IMAGE"); prebuilt != "" {
		image = prebuilt
		t.Logf("testing $SLUICE_IMAGE=%s, built beforehand by scripts/image.sh (not built, not removed here)", image)
	} else {
		buildImage(t, p, image)
	}

	t.Run("config", func(t *testing.T) { imageConfig(t, p, image) })
	t.Run("files", func(t *testing.T) { imageFiles(t, p, image, name("files")) })
	t.Run("version", func(t *testing.T) { imageVersion(t, p, image, strings.TrimSpace(string(head))) })
	t.Run("default", func(t *testing.T) { imageDefault(t, p, image, name("default")) })
	t.Run("redis", func(t *testing.T) { imageRedis(t, p, image, name("redis")) })
	t.Run("ratelimit", func(t *testing.T) { imageRatelimit(t, p, image, name("ratelimit")) })
}

// buildImage builds image with scripts/image.sh (podman), removed when t
// ends.
func buildImage(t *testing.T, p podman, image string) {
	script, err := filepath.Abs("../../scripts/image.sh")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, script, image)
	build.Env = append(os.Environ(), "SLUICE_IMAGE_ENGINE=podman")
	var stdout, stderr bytes.Buffer
	build.Stdout, build.Stderr = &stdout, &stderr
	if err := build.Run(); err != nil {
		t.Fatalf("scripts/image.sh: %v\n%s", err, stderr.String())
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p.cmd(ctx, "rmi", "-f", image).Run()
	})
	if got := strings.TrimSpace(stdout.String()); got != image {
		t.Fatalf("scripts/image.sh printed %q, want the tag %q", got, image)
	}
	t.Logf("scripts/image.sh built %s in %v", image, time.Since(start).Round(time.Second))
}

// The image's configuration: its size, user, entrypoint, default command,
// healthcheck and labels.
func imageConfig(t *testing.T, p podman, image string) {
	var got []struct {
		Size        int64
		Healthcheck struct{ Test []string } // podman: here, docker: in Config
		Config      struct {
			User        string
			Entrypoint  []string
			Cmd         []string
			Labels      map[string]string
			Healthcheck struct{ Test []string }
		}
	}
	if err := json.Unmarshal([]byte(p.out(t, "image", "inspect", image)), &got); err != nil || len(got) != 1 {
		t.Fatalf("podman image inspect: %v %v", got, err)
	}
	img := got[0]
	t.Logf("image size %d bytes (%.1f MB)", img.Size, float64(img.Size)/1e6)
	if img.Size > maxImageSize || img.Size < 1_000_000 {
		t.Errorf("image size %d bytes, want at most %d", img.Size, maxImageSize)
	}
	c := img.Config
	if c.User != "65532:65532" && c.User != "65532" {
		t.Errorf("User %q, want 65532", c.User)
	}
	if want := []string{"/sluice"}; !equal(c.Entrypoint, want) {
		t.Errorf("Entrypoint %q, want %q", c.Entrypoint, want)
	}
	if want := []string{"serve", "--http", "0.0.0.0:8080", "--grpc", "0.0.0.0:8081", "--config", "/etc/sluice/policy.yaml"}; !equal(c.Cmd, want) {
		t.Errorf("Cmd %q, want %q", c.Cmd, want)
	}
	hc := c.Healthcheck.Test
	if len(hc) == 0 {
		hc = img.Healthcheck.Test
	}
	if want := []string{"CMD", "/sluice", "healthcheck", "--url", "http://127.0.0.1:8080", "--timeout", "2s"}; !equal(hc, want) {
		t.Errorf("Healthcheck %q, want %q", hc, want)
	}
	for _, l := range []string{"title", "source", "licenses", "version", "revision", "created"} {
		if v := c.Labels["org.opencontainers.image."+l]; v == "" || v == "unknown" {
			t.Errorf("label org.opencontainers.image.%s = %q", l, v)
		}
	}
}

func equal(a, b []string) bool {
	return strings.Join(a, "\x00") == strings.Join(b, "\x00") && len(a) == len(b)
}

// The image's files, read from podman export of a created (never started)
// container: one copy of the binary, /bin/ratelimit a symlink to it, the
// users, the CA bundle and the example policy, nothing else of weight.
func imageFiles(t *testing.T, p podman, image, name string) {
	p.out(t, "create", "--name", name, image)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		p.cmd(ctx, "rm", "-f", name).Run()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	export := p.cmd(ctx, "export", name)
	r, err := export.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := export.Start(); err != nil {
		t.Fatal(err)
	}
	files := map[string]*tar.Header{}
	contents := map[string]string{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		n := "/" + strings.Trim(strings.TrimPrefix(h.Name, "./"), "/")
		files[n] = h
		if h.Typeflag == tar.TypeReg && h.Size < 1<<20 {
			b, _ := io.ReadAll(tr)
			contents[n] = string(b)
		}
		if h.Typeflag == tar.TypeReg && h.Size > 1<<20 && n != "/sluice" {
			t.Errorf("%s: %d bytes: the binary is /sluice alone", n, h.Size)
		}
	}
	if err := export.Wait(); err != nil {
		t.Fatalf("podman export: %v", err)
	}
	if h := files["/sluice"]; h == nil || h.Typeflag != tar.TypeReg || h.Mode&0o111 == 0 {
		t.Fatalf("/sluice: %+v, want an executable file", h)
	}
	if h := files["/bin/ratelimit"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "/sluice" {
		t.Errorf("/bin/ratelimit: %+v, want a symlink to /sluice", h)
	}
	if !regexp.MustCompile(`(?m)^nonroot:x:65532:65532:`).MatchString(contents["/etc/passwd"]) {
		t.Errorf("/etc/passwd: %q, want nonroot with uid 65532", contents["/etc/passwd"])
	}
	if !strings.Contains(contents["/etc/group"], "nonroot:x:65532:") {
		t.Errorf("/etc/group: %q", contents["/etc/group"])
	}
	if !strings.Contains(contents["/etc/ssl/certs/ca-certificates.crt"], "BEGIN CERTIFICATE") {
		t.Errorf("/etc/ssl/certs/ca-certificates.crt: no certificates")
	}
	if pol, err := os.ReadFile(examplePolicy); err != nil || contents["/etc/sluice/policy.yaml"] != string(pol) {
		t.Errorf("/etc/sluice/policy.yaml is not %s (%v)", examplePolicy, err)
	}
	if h := files["/tmp"]; h == nil || h.Typeflag != tar.TypeDir || h.Mode&0o1777 != 0o1777 {
		t.Errorf("/tmp: %+v, want a directory of mode 1777", h)
	}
}

// `sluice version` in the image says the version and the revision of this
// checkout (head, git's HEAD when the build started; "" outside a checkout).
func imageVersion(t *testing.T, p podman, image, head string) {
	out := p.out(t, append(append([]string{"run", "--rm"}, podmanRun...), "--read-only", image, "version")...)
	t.Logf("sluice version in the image: %s", strings.TrimSpace(out))
	if !regexp.MustCompile(`^sluice v\S+ \(revision [0-9a-f]{12}[,)]`).MatchString(out) {
		t.Fatalf("sluice version: %q, want a version and a revision", out)
	}
	if len(head) >= 12 && !strings.Contains(out, "revision "+head[:12]) {
		t.Fatalf("sluice version: %q, want revision %s (git HEAD)", out, head[:12])
	}
}

// The default CMD, as a user runs it: ports published on loopback, a
// read-only root filesystem without even podman's tmpfs on /tmp.
func imageDefault(t *testing.T, p podman, image, name string) {
	httpAddr, grpcAddr := freePort(t), freePort(t)
	c := p.start(t, name, []string{"--read-only", "--read-only-tmpfs=false",
		"-p", httpAddr + ":8080", "-p", grpcAddr + ":8081"}, image)
	base := "http://" + httpAddr
	c.waitHTTP(t, base)

	if code, body, err := get(base + "/readyz"); err != nil || code != 200 || !strings.Contains(body, `"ready"`) {
		t.Fatalf("/readyz: %d %q %v", code, body, err)
	}
	exhaust(t, base, "acme")

	// gRPC on :8081 shares the buckets: acme is refused there too, another
	// tenant admitted.
	_, rl := dialRLS(t, &proc{grpc: grpcAddr})
	for tenant, want := range map[string]rls.RateLimitResponse_Code{"acme": rls.RateLimitResponse_OVER_LIMIT, "other": rls.RateLimitResponse_OK} {
		req := &rls.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "tenant", Value: tenant}}}}}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := rl.ShouldRateLimit(ctx, req)
		cancel()
		if err != nil || r.OverallCode != want {
			t.Fatalf("gRPC ShouldRateLimit tenant %s: %v %v, want %v", tenant, r, err, want)
		}
	}

	st := c.inspect(t)
	if !st.HostConfig.ReadonlyRootfs {
		t.Errorf("HostConfig.ReadonlyRootfs false")
	}
	if st.Config.User != "65532:65532" && st.Config.User != "65532" {
		t.Errorf("Config.User %q, want 65532", st.Config.User)
	}
	// The process itself, seen from the host (rootful podman maps no
	// users): its uids and gids, and its root mount.
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", st.State.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"Uid", "Gid"} {
		if m := regexp.MustCompile(`(?m)^` + f + `:\s+(.*)$`).FindSubmatch(status); m == nil || strings.Join(strings.Fields(string(m[1])), " ") != "65532 65532 65532 65532" {
			t.Errorf("process %d %s: %q, want 65532 (real, effective, saved, fs)", st.State.Pid, f, m)
		}
	}
	mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", st.State.Pid))
	if err != nil {
		t.Fatal(err)
	}
	rootRO := false
	for _, l := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(l)
		if len(f) > 5 && f[4] == "/" {
			rootRO = strings.Contains(","+f[5]+",", ",ro,")
		}
		if len(f) > 5 && f[4] == "/tmp" {
			t.Errorf("a mount on /tmp (%s): want none, sluice writes nothing", l)
		}
	}
	if !rootRO {
		t.Errorf("the root filesystem is not mounted read-only:\n%s", mounts)
	}

	// The image's HEALTHCHECK (sluice healthcheck, no shell), run by podman.
	if out := p.out(t, "healthcheck", "run", c.name); strings.Contains(out, "unhealthy") {
		t.Fatalf("podman healthcheck run: %q", out)
	}
	if logs := c.logs(t); strings.Contains(logs, `"level":"ERROR"`) {
		t.Errorf("errors logged:\n%s", logs)
	}
	c.stop(t)
}

// The same image on a real Redis given by URL, as --store and as
// SLUICE_STORE: a second container finds the first one's buckets there.
func imageRedis(t *testing.T, p podman, image, name string) {
	rd := redistest.New(t)
	storeURL := "redis://" + rd.Addr
	hostNet := []string{"--read-only", "--network", "host"}

	httpA := freePort(t)
	a := p.start(t, name+"-a", hostNet, image,
		"serve", "--http", httpA, "--config", "/etc/sluice/policy.yaml", "--store", storeURL)
	a.waitHTTP(t, "http://"+httpA)
	if code, body, err := get("http://" + httpA + "/readyz"); err != nil || code != 200 || !strings.Contains(body, `"reachable"`) {
		t.Fatalf("/readyz on Redis: %d %q %v", code, body, err)
	}
	exhaust(t, "http://"+httpA, "acme")
	a.stop(t)

	httpB := freePort(t)
	b := p.start(t, name+"-b", append(hostNet, "-e", "SLUICE_STORE="+storeURL), image,
		"serve", "--http", httpB, "--config", "/etc/sluice/policy.yaml")
	b.waitHTTP(t, "http://"+httpB)
	if code := check(t, "http://"+httpB, "acme"); code != 429 {
		t.Fatalf("acme on the second container: %d, want 429 (the first one's bucket, in Redis)", code)
	}
	if code := check(t, "http://"+httpB, "other"); code != 200 {
		t.Fatalf("another tenant on the second container: %d, want 200", code)
	}
	b.stop(t)
}

// /bin/ratelimit as Envoy Gateway starts it (the container's command
// /bin/ratelimit, no arguments, envoyproxy/ratelimit's environment, the
// config directory mounted read-only): `sluice ratelimit` on a real Redis,
// its /healthcheck, `sluice healthcheck` exec'd in the container, a
// descriptor of one a minute admitted then refused.
func imageRatelimit(t *testing.T, p podman, image, name string) {
	rd := redistest.New(t)
	root := t.TempDir()
	cfg := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(cfg, 0o755); err != nil {
		t.Fatal(err)
	}
	src := "domain: image\ndescriptors:\n  - key: one_per_minute\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1\n"
	if err := os.WriteFile(filepath.Join(cfg, "image.yaml"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{root, filepath.Join(root, "ratelimit"), cfg} {
		if err := os.Chmod(d, 0o755); err != nil { // t.TempDir is 0700; the container runs as 65532
			t.Fatal(err)
		}
	}
	port, grpcPort, debugPort := freePort(t), freePort(t), freePort(t)
	portOf := func(addr string) string { return addr[strings.LastIndex(addr, ":")+1:] }
	flags := []string{"--read-only", "--network", "host", "--entrypoint", "/bin/ratelimit",
		"-v", root + ":/data:ro"}
	for _, kv := range []string{
		"RUNTIME_ROOT=/data", "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"USE_STATSD=false", "LOG_LEVEL=info", "LOG_FORMAT=json",
		"BACKEND_TYPE=redis", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + rd.Addr,
		"HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
		"PORT=" + portOf(port), "GRPC_PORT=" + portOf(grpcPort), "DEBUG_PORT=" + portOf(debugPort),
	} {
		flags = append(flags, "-e", kv)
	}
	c := p.start(t, name, flags, image)
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body, err := get("http://" + port + "/healthcheck")
		if err == nil && code == 200 && body == "OK" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/bin/ratelimit: no healthy /healthcheck in 30 s (%d %q %v); logs:\n%s", code, body, err, c.logs(t))
		}
		time.Sleep(100 * time.Millisecond)
	}
	// sluice healthcheck inside the container (the HEALTHCHECK's command,
	// on this test's PORT): ratelimit mode serves /healthz too.
	if out := p.out(t, "exec", c.name, "/sluice", "healthcheck", "--url", "http://"+port); !strings.HasPrefix(out, "healthy: ") {
		t.Fatalf("sluice healthcheck in the container: %q", out)
	}
	_, rl := dialRLS(t, &proc{grpc: grpcPort})
	req := &rls.RateLimitRequest{Domain: "image", HitsAddend: 1, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "one_per_minute", Value: "x"}}}}}
	for i, want := range []rls.RateLimitResponse_Code{rls.RateLimitResponse_OK, rls.RateLimitResponse_OVER_LIMIT} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		r, err := rl.ShouldRateLimit(ctx, req)
		cancel()
		if err != nil || r.OverallCode != want {
			t.Fatalf("call %d: %v %v, want %v; logs:\n%s", i+1, r, err, want, c.logs(t))
		}
	}
	c.stop(t)
}
