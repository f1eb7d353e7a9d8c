// The chart's Deployment and ConfigMap, as helm template renders them, run
// with podman kube play on the image scripts/image.sh builds.

package charttest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// playPolicy is the policy of the kube play test: two checks of a tenant
// admitted, the third refused.
const playPolicy = `policy: |
  limits:
    - name: tenant_api
      key: "tenant:{tenant}"
      capacity: 2
      refill_per_second: 0.01
`

// podmanConf is the containers.conf kube play runs with ($CONTAINERS_CONF;
// kube play takes no --runtime-like flags of its own): runc, and explicit
// ulimits (the defaults podman would take from the host fail on the test
// machines), no systemd (cgroupfs, events in a file), as scripts/image.sh
// and cmd/sluice's TestImage run podman.
const podmanConf = `[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
`

// podman returns the podman program like internal/testbin (whose module
// this one does not require): skipped under -short, failed when missing.
func podman(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("podman")
	if testing.Short() {
		t.Skip("needs podman: skipped under -short")
	}
	if err != nil {
		t.Fatalf("needs podman (apt-get install --no-install-recommends podman runc catatonit): %v", err)
	}
	return path
}

// freePort is a loopback port free at the time of the call.
func freePort(t *testing.T) int32 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return int32(ln.Addr().(*net.TCPAddr).Port)
}

// TestChartKubePlay renders the Deployment and the ConfigMap of the
// chart's defaults (with a small policy), publishes the container's ports
// on free loopback ports (hostPort, hostIP 127.0.0.1: the only change to
// what helm rendered), plays them with podman kube play on the image
// ($SLUICE_IMAGE, else one scripts/image.sh builds for this test), and
// asks through the published port: /healthz and /readyz answer, a check
// is admitted twice then refused, and the container runs as uid 65532
// with a read-only root filesystem, as the securityContext says.
func TestChartKubePlay(t *testing.T) {
	bin := podman(t)
	helm(t) // (skips under -short before anything runs)
	id := strconv.Itoa(os.Getpid())
	dir := t.TempDir()
	conf := filepath.Join(dir, "containers.conf")
	if err := os.WriteFile(conf, []byte(podmanConf), 0o644); err != nil {
		t.Fatal(err)
	}
	pm := func(ctx context.Context, args ...string) *exec.Cmd {
		flags := append([]string{"--cgroup-manager", "cgroupfs", "--events-backend", "file"}, strings.Fields(os.Getenv("SLUICE_IMAGE_ENGINE_FLAGS"))...)
		cmd := exec.CommandContext(ctx, bin, append(flags, args...)...)
		cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+conf)
		return cmd
	}
	out := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		var stderr bytes.Buffer
		cmd := pm(ctx, args...)
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("podman %s: %v\n%s%s", strings.Join(args, " "), err, b, stderr.String())
		}
		return string(b)
	}

	image := os.Getenv("SLUICE_IMAGE")
	if image == "" {
		image = "localhost/sluice:charttest-" + id
		cmd := exec.Command("../../scripts/image.sh", image)
		// The binary is built in the workspace, not under this module's
		// GOWORK=off.
		cmd.Env = append(os.Environ(), "GOWORK=")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if b, err := cmd.Output(); err != nil || strings.TrimSpace(string(b)) != image {
			t.Fatalf("scripts/image.sh %s: %v %q\n%s", image, err, b, stderr.String())
		}
		t.Cleanup(func() { pm(context.Background(), "rmi", "-f", image).Run() })
	}
	repo, tag, _ := strings.Cut(image[strings.LastIndexByte(image, '/')+1:], ":")
	repo = image[:strings.LastIndexByte(image, '/')+1] + repo
	if tag == "" {
		tag = "latest"
	}

	release := "ct" + id
	values := playPolicy + fmt.Sprintf("image:\n  repository: %s\n  tag: %q\n  pullPolicy: Never\n", repo, tag)
	cm, stderr, ok := run(t, values, "template", release, chartDir, "-s", "templates/configmap.yaml")
	if !ok {
		t.Fatalf("helm template (ConfigMap): %s", stderr)
	}
	dm, stderr, ok := run(t, values, "template", release, chartDir, "-s", "templates/deployment.yaml")
	if !ok {
		t.Fatalf("helm template (Deployment): %s", stderr)
	}
	var d appsv1.Deployment
	if err := decodeStrict([]byte(dm), &d); err != nil {
		t.Fatal(err)
	}
	ports := map[string]int32{}
	c := &d.Spec.Template.Spec.Containers[0]
	for i := range c.Ports {
		p := &c.Ports[i]
		p.HostIP, p.HostPort = "127.0.0.1", freePort(t)
		ports[p.Name] = p.HostPort
	}
	db, err := yaml.Marshal(&d)
	if err != nil {
		t.Fatal(err)
	}
	play := filepath.Join(dir, "play.yaml")
	if err := os.WriteFile(play, []byte(cm+"\n---\n"+string(db)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		pm(ctx, "kube", "down", play).Run()
		pm(ctx, "volume", "rm", "-f", d.Name).Run() // the ConfigMap's volume
	})
	out("kube", "play", play)
	ctr := d.Name + "-pod-0-sluice"
	logs := func() string {
		b, _ := pm(context.Background(), "logs", ctr).CombinedOutput()
		return string(b)
	}

	base := fmt.Sprintf("http://127.0.0.1:%d", ports["http"])
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if code, _ := get("/healthz"); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no /healthz at %s within 60 s; podman ps:\n%s\nlogs:\n%s", base, out("ps", "-a", "--pod"), logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, body := get("/readyz"); code != 200 {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	for i, want := range []int{200, 200, 429} {
		resp, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(`{"descriptors": {"tenant": "acme"}}`))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("check %d: %d %s, want %d", i+1, resp.StatusCode, b, want)
		}
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, `sluice_decisions_total{attempt="original",limit="tenant_api",result="rejected"} 1`) {
		t.Fatalf("/metrics: %d %.300s", code, body)
	}

	// What podman made of the securityContext and the mount.
	var insp []struct {
		Config struct {
			User string
		}
		HostConfig struct {
			ReadonlyRootfs bool
			CapAdd         []string
			SecurityOpt    []string
		}
		Mounts []struct {
			Destination string
			RW          bool
		}
	}
	if err := yaml.Unmarshal([]byte(out("inspect", "--type", "container", ctr)), &insp); err != nil || len(insp) != 1 {
		t.Fatalf("podman inspect %s: %v", ctr, err)
	}
	in := insp[0]
	if in.Config.User != "65532:65532" || !in.HostConfig.ReadonlyRootfs || len(in.HostConfig.CapAdd) != 0 ||
		!strings.Contains(strings.Join(in.HostConfig.SecurityOpt, " "), "no-new-privileges") {
		t.Errorf("container %s: user %q, read-only %v, cap-add %v, security-opt %v", ctr, in.Config.User,
			in.HostConfig.ReadonlyRootfs, in.HostConfig.CapAdd, in.HostConfig.SecurityOpt)
	}
	if caps := strings.TrimSpace(out("top", ctr, "capeff")); !strings.HasSuffix(caps, "none") {
		t.Errorf("effective capabilities: %q", caps)
	}
	mounted := false
	for _, m := range in.Mounts {
		if m.Destination == "/etc/sluice" && !m.RW {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("the ConfigMap is not mounted read-only at /etc/sluice: %+v", in.Mounts)
	}
}
