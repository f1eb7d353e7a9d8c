// Tests of the Helm chart deploy/helm/sluice: helm lint and helm template
// for each documented combination of values, every rendered object decoded
// strictly into its Kubernetes API type, and the properties the chart
// promises checked on those objects.

package charttest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// chartDir is the chart, from this directory.
const chartDir = "../../deploy/helm/sluice"

// drainSeconds is sluice serve's shutdown drain (cmd/sluice drainTimeout).
const drainSeconds = 15

var (
	helmOnce sync.Once
	helmPath string
	helmErr  error
)

// helm returns the helm binary: $HELM when set, else tools/helm/build.sh's
// build (cached per machine). Under -short the test is skipped (building
// helm is minutes of CPU); otherwise a helm that cannot be had fails it.
func helm(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs helm (tools/helm/build.sh): skipped under -short")
	}
	helmOnce.Do(func() {
		if h := os.Getenv("HELM"); h != "" {
			helmPath = h
			_, helmErr = os.Stat(h)
			return
		}
		cmd := exec.Command("../helm/build.sh")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			helmErr = fmt.Errorf("tools/helm/build.sh: %v\n%s", err, stderr.String())
			return
		}
		helmPath = strings.TrimSpace(string(out))
	})
	if helmErr != nil {
		t.Fatalf("helm: %v", helmErr)
	}
	return helmPath
}

// run runs helm with args and values (YAML, "" for the chart's defaults),
// returning its stdout and stderr and whether it succeeded.
func run(t *testing.T, values string, args ...string) (string, string, bool) {
	t.Helper()
	if values != "" {
		f := filepath.Join(t.TempDir(), "values.yaml")
		if err := os.WriteFile(f, []byte(values), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-f", f)
	}
	cmd := exec.Command(helm(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Helm's own state (repositories, cache) stays out of $HOME.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	err := cmd.Run()
	return stdout.String(), stderr.String(), err == nil
}

// rendered is what helm template made of one combination of values.
type rendered struct {
	deploy   *appsv1.Deployment
	service  *corev1.Service
	config   *corev1.ConfigMap
	secret   *corev1.Secret
	account  *corev1.ServiceAccount
	pdb      *policyv1.PodDisruptionBudget
	hpa      *autoscalingv2.HorizontalPodAutoscaler
	monitor  *serviceMonitor
	docs     map[string][]byte // kind -> the document as rendered
	kinds    []string
	manifest string
}

// serviceMonitor is the part of monitoring.coreos.com/v1 ServiceMonitor
// the chart writes (no k8s.io type exists for it); decoding is strict, so
// a field outside it fails.
type serviceMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// render lints and renders the chart with values, failing t unless both
// succeed, and decodes every object strictly (an unknown or misspelt
// field, or a duplicate key, fails).
func render(t *testing.T, values string) *rendered {
	t.Helper()
	if out, stderr, ok := run(t, values, "lint", "--strict", chartDir); !ok {
		t.Fatalf("helm lint --strict: %s\n%s", out, stderr)
	}
	out, stderr, ok := run(t, values, "template", "rel", chartDir, "--namespace", "ns")
	if !ok {
		t.Fatalf("helm template: %s", stderr)
	}
	r := &rendered{docs: map[string][]byte{}, manifest: out}
	for _, doc := range strings.Split(out, "\n---\n") {
		doc = strings.TrimPrefix(strings.TrimSpace(doc), "---")
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("a rendered document is not YAML: %v\n%s", err, doc)
		}
		if head.Kind == "" {
			continue // comments only
		}
		var obj any
		want := map[string]string{
			"Deployment": "apps/v1", "Service": "v1", "ConfigMap": "v1", "Secret": "v1", "ServiceAccount": "v1",
			"PodDisruptionBudget": "policy/v1", "HorizontalPodAutoscaler": "autoscaling/v2",
			"ServiceMonitor": "monitoring.coreos.com/v1",
		}[head.Kind]
		switch head.Kind {
		case "Deployment":
			r.deploy = &appsv1.Deployment{}
			obj = r.deploy
		case "Service":
			r.service = &corev1.Service{}
			obj = r.service
		case "ConfigMap":
			r.config = &corev1.ConfigMap{}
			obj = r.config
		case "Secret":
			r.secret = &corev1.Secret{}
			obj = r.secret
		case "ServiceAccount":
			r.account = &corev1.ServiceAccount{}
			obj = r.account
		case "PodDisruptionBudget":
			r.pdb = &policyv1.PodDisruptionBudget{}
			obj = r.pdb
		case "HorizontalPodAutoscaler":
			r.hpa = &autoscalingv2.HorizontalPodAutoscaler{}
			obj = r.hpa
		case "ServiceMonitor":
			r.monitor = &serviceMonitor{}
			obj = r.monitor
		default:
			t.Fatalf("rendered a %s, which the test does not know:\n%s", head.Kind, doc)
		}
		if head.APIVersion != want {
			t.Fatalf("%s has apiVersion %q, want %q", head.Kind, head.APIVersion, want)
		}
		if _, dup := r.docs[head.Kind]; dup {
			t.Fatalf("two %s objects rendered", head.Kind)
		}
		if err := decodeStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s does not decode strictly into its API type: %v\n%s", head.Kind, err, doc)
		}
		r.docs[head.Kind] = []byte(doc)
		r.kinds = append(r.kinds, head.Kind)
	}
	slices.Sort(r.kinds)
	r.checkCommon(t)
	return r
}

// decodeStrict decodes a YAML document into obj the way the API server
// decodes a strict request: a duplicate key, or a field the type does not
// have, fails, and field names match case-sensitively (encoding/json alone
// would take readOnlyRootFileSystem for readOnlyRootFilesystem).
func decodeStrict(doc []byte, obj any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, obj)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// checkCommon checks what every combination must hold.
func (r *rendered) checkCommon(t *testing.T) {
	t.Helper()
	for _, k := range []string{"ConfigMap", "Deployment", "Service", "ServiceAccount"} {
		if _, ok := r.docs[k]; !ok {
			t.Fatalf("no %s rendered (kinds %v)", k, r.kinds)
		}
	}
	for kind, doc := range r.docs {
		var m struct {
			Metadata struct {
				Name   string            `json:"name"`
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		_ = yaml.Unmarshal(doc, &m)
		if errs := validation.IsDNS1123Subdomain(m.Metadata.Name); len(errs) > 0 {
			t.Errorf("%s name %q: %v", kind, m.Metadata.Name, errs)
		}
		for k, v := range m.Metadata.Labels {
			if errs := append(validation.IsQualifiedName(k), validation.IsValidLabelValue(v)...); len(errs) > 0 {
				t.Errorf("%s label %s=%s: %v", kind, k, v, errs)
			}
		}
	}
	d := r.deploy
	pod := d.Spec.Template.Spec
	for k, v := range d.Spec.Selector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("the pod template lacks the selector's label %s=%s", k, v)
		}
		if r.service.Spec.Selector[k] != v {
			t.Errorf("the Service's selector lacks %s=%s", k, v)
		}
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]

	// Probes: liveness /healthz, readiness /readyz, on the HTTP port.
	for name, p := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != name || p.HTTPGet.Port.String() != "http" {
			t.Errorf("probe %s: %+v", name, p)
		}
	}
	// Ports: http 8080, grpc 8081 (the flags serve listens with).
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["http"] != 8080 || ports["grpc"] != 8081 {
		t.Errorf("container ports %v", ports)
	}
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"serve ", "--http 0.0.0.0:8080", "--grpc 0.0.0.0:8081", "--config /etc/sluice/policy.yaml"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	svc := map[string]*corev1.ServicePort{"http": {}, "grpc": {}, "metrics": {}}
	for i, p := range r.service.Spec.Ports {
		svc[p.Name] = &r.service.Spec.Ports[i]
	}
	if svc["http"].Port != 8080 || svc["http"].TargetPort.String() != "http" ||
		svc["grpc"].Port != 8081 || svc["grpc"].TargetPort.String() != "grpc" ||
		svc["metrics"].Port == 0 || svc["metrics"].TargetPort.String() != "http" {
		t.Errorf("Service ports %+v", r.service.Spec.Ports)
	}

	// Security: non-root 65532, read-only root, no capabilities, no
	// escalation, seccomp RuntimeDefault.
	sc := c.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container securityContext %+v", sc)
	}
	if ps := pod.SecurityContext; ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.SeccompProfile == nil ||
		ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod securityContext %+v", ps)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the service account token is mounted")
	}

	// Shutdown: the preStop sleep, then the drain, within the grace period.
	grace := int64(30)
	if pod.TerminationGracePeriodSeconds != nil {
		grace = *pod.TerminationGracePeriodSeconds
	}
	sleep := int64(0)
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil {
		if c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Exec != nil {
			t.Errorf("preStop is not a sleep action (the image has no shell): %+v", c.Lifecycle.PreStop)
		} else {
			sleep = c.Lifecycle.PreStop.Sleep.Seconds
		}
	}
	if grace < sleep+drainSeconds {
		t.Errorf("terminationGracePeriodSeconds %d < preStop %d s + drain %d s", grace, sleep, drainSeconds)
	}

	// The policy: the ConfigMap's key, mounted as a directory (a subPath
	// mount never sees the kubelet's ..data swap).
	if _, ok := r.config.Data["policy.yaml"]; !ok {
		t.Errorf("ConfigMap data %v has no policy.yaml", r.config.Data)
	}
	found := false
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/etc/sluice" {
			found = true
			if m.SubPath != "" || !m.ReadOnly {
				t.Errorf("the policy mount %+v", m)
			}
			for _, v := range pod.Volumes {
				if v.Name == m.Name && (v.ConfigMap == nil || v.ConfigMap.Name != r.config.Name) {
					t.Errorf("volume %s is not the ConfigMap %s: %+v", v.Name, r.config.Name, v)
				}
			}
		}
	}
	if !found {
		t.Error("no mount at /etc/sluice")
	}
}

// container is the Deployment's one container.
func (r *rendered) container() corev1.Container { return r.deploy.Spec.Template.Spec.Containers[0] }

// env returns the container's variable name, or nil.
func (r *rendered) env(name string) *corev1.EnvVar {
	for _, e := range r.container().Env {
		if e.Name == name {
			return &e
		}
	}
	return nil
}

// fails renders values, which helm template must refuse with a message
// holding want. helm lint renders in its lint mode, where a template's
// fail is reported ("[INFO] Fail: ...") but does not fail the lint: the
// message must be there.
func fails(t *testing.T, values, want string) {
	t.Helper()
	out, stderr, ok := run(t, values, "template", "rel", chartDir)
	if ok || !strings.Contains(stderr, want) {
		t.Fatalf("helm template: ok %v, stderr %q, want an error with %q\n%s", ok, stderr, want, out)
	}
	out, stderr, _ = run(t, values, "lint", chartDir)
	if !strings.Contains(out+stderr, "Fail: "+want) {
		t.Fatalf("helm lint does not report %q:\n%s%s", want, out, stderr)
	}
}
