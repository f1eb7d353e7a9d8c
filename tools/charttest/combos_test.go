// The chart's documented combinations of values (docs/deploy.md "Helm
// chart"), each rendered and checked, and the values it refuses.

package charttest

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The defaults: one pod on the memory store, no Secret, no PDB, HPA or
// ServiceMonitor, soft anti-affinity, the policy hot-reloaded (no
// checksum/policy annotation).
func TestChartDefaults(t *testing.T) {
	r := render(t, "")
	if got := strings.Join(r.kinds, ","); got != "ConfigMap,Deployment,Service,ServiceAccount" {
		t.Fatalf("kinds %s", got)
	}
	d := r.deploy
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("replicas %v", d.Spec.Replicas)
	}
	if _, ok := d.Spec.Template.Annotations["checksum/policy"]; ok {
		t.Error("checksum/policy by default: a policy change would roll the pods instead of hot-reloading")
	}
	if r.env("SLUICE_STORE") != nil || strings.Contains(strings.Join(r.container().Args, " "), "token-file") {
		t.Errorf("memory store without tokens, yet env %v args %v", r.container().Env, r.container().Args)
	}
	if e := r.env("GOMEMLIMIT"); e == nil || e.ValueFrom == nil || e.ValueFrom.ResourceFieldRef == nil ||
		e.ValueFrom.ResourceFieldRef.Resource != "limits.memory" {
		t.Errorf("GOMEMLIMIT %+v", e)
	}
	aff := d.Spec.Template.Spec.Affinity
	if aff == nil || aff.PodAntiAffinity == nil || len(aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
		len(aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 0 {
		t.Fatalf("anti-affinity %+v", aff)
	}
	term := aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm
	if term.TopologyKey != "kubernetes.io/hostname" || term.LabelSelector == nil ||
		term.LabelSelector.MatchLabels["app.kubernetes.io/instance"] != "rel" {
		t.Errorf("anti-affinity term %+v", term)
	}
	if c := r.container(); c.Lifecycle == nil || c.Lifecycle.PreStop.Sleep.Seconds != 5 {
		t.Errorf("preStop %+v", c.Lifecycle)
	}
	if g := d.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g != 30 {
		t.Errorf("terminationGracePeriodSeconds %v", g)
	}
	if !strings.Contains(r.config.Data["policy.yaml"], "name: tenant_api") {
		t.Errorf("policy %q", r.config.Data["policy.yaml"])
	}
}

// Redis: three pods sharing state, the URL kept in the chart's Secret and
// given as $SLUICE_STORE; the Secret's checksum rolls the pods.
func TestChartRedis(t *testing.T) {
	r := render(t, `
replicaCount: 3
store:
  type: redis
  redis:
    url: redis://:hunter2@redis.default.svc:6379/0
  onStoreError: local
podAntiAffinity: hard
`)
	if *r.deploy.Spec.Replicas != 3 {
		t.Errorf("replicas %d", *r.deploy.Spec.Replicas)
	}
	if r.secret == nil || r.secret.Name != "rel-sluice" {
		t.Fatalf("no Secret rel-sluice: kinds %v", r.kinds)
	}
	if got := string(r.secret.Data["redis-url"]); got != "redis://:hunter2@redis.default.svc:6379/0" {
		t.Errorf("Secret redis-url %q", got)
	}
	if len(r.secret.Data) != 1 {
		t.Errorf("Secret keys %v", r.secret.Data)
	}
	e := r.env("SLUICE_STORE")
	if e == nil || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
		e.ValueFrom.SecretKeyRef.Name != "rel-sluice" || e.ValueFrom.SecretKeyRef.Key != "redis-url" {
		t.Fatalf("SLUICE_STORE %+v", e)
	}
	if strings.Contains(r.manifest, "hunter2") {
		t.Error("the Redis password is in the manifest in the clear")
	}
	if !strings.Contains(strings.Join(r.container().Args, " "), "--on-store-error local --store-prefix sluice: --instances 3") {
		t.Errorf("args %v", r.container().Args)
	}
	if r.deploy.Spec.Template.Annotations["checksum/secret"] == "" {
		t.Error("no checksum/secret: a changed URL would not reach the pods (read at start)")
	}
	aff := r.deploy.Spec.Template.Spec.Affinity.PodAntiAffinity
	if len(aff.RequiredDuringSchedulingIgnoredDuringExecution) != 1 || len(aff.PreferredDuringSchedulingIgnoredDuringExecution) != 0 {
		t.Errorf("hard anti-affinity %+v", aff)
	}
}

// existingSecret: no Secret rendered; the tokens mounted as files and the
// Redis URL read from the user's Secret.
func TestChartExistingSecret(t *testing.T) {
	r := render(t, `
replicaCount: 2
store:
  type: redis
auth:
  enabled: true
  adminEnabled: true
existingSecret: my-sluice
`)
	if r.secret != nil {
		t.Fatal("a Secret rendered beside existingSecret")
	}
	if _, ok := r.deploy.Spec.Template.Annotations["checksum/secret"]; ok {
		t.Error("checksum/secret of a Secret the chart does not make")
	}
	args := strings.Join(r.container().Args, " ")
	for _, want := range []string{"--auth-token-file /var/run/secrets/sluice/auth-token", "--admin-token-file /var/run/secrets/sluice/admin-token"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if e := r.env("SLUICE_STORE"); e == nil || e.ValueFrom.SecretKeyRef.Name != "my-sluice" || e.ValueFrom.SecretKeyRef.Key != "redis-url" {
		t.Errorf("SLUICE_STORE %+v", e)
	}
	var vol *corev1.Volume
	for i, v := range r.deploy.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			vol = &r.deploy.Spec.Template.Spec.Volumes[i]
		}
	}
	// optional written out (false, the default): podman 4.3's kube play
	// crashes on a secret volume without it.
	if vol == nil || vol.Secret.SecretName != "my-sluice" || len(vol.Secret.Items) != 2 || vol.Secret.Optional == nil || *vol.Secret.Optional {
		t.Fatalf("secret volume %+v", vol)
	}
	mounted := false
	for _, m := range r.container().VolumeMounts {
		if m.Name == vol.Name && m.MountPath == "/var/run/secrets/sluice" && m.ReadOnly {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("the secret volume is not mounted read-only at /var/run/secrets/sluice: %+v", r.container().VolumeMounts)
	}
}

// Everything on: Redis, tokens in the chart's Secret, PDB, HPA (the
// Deployment then leaves replicas to it), ServiceMonitor on the metrics
// port, the policy as a YAML object and rolled on change.
func TestChartEverythingOn(t *testing.T) {
	r := render(t, `
store:
  type: redis
  redis:
    url: redis://redis:6379
auth:
  enabled: true
  token: s3cret
podDisruptionBudget:
  enabled: true
autoscaling:
  enabled: true
  minReplicas: 2
  maxReplicas: 6
  targetMemoryUtilizationPercentage: 80
serviceMonitor:
  enabled: true
  labels:
    release: prometheus
rollOnPolicyChange: true
policy:
  limits:
    - name: per_ip
      key: "ip:{ip}"
      capacity: 10
      refill_per_second: 1
`)
	if got := strings.Join(r.kinds, ","); got != "ConfigMap,Deployment,HorizontalPodAutoscaler,PodDisruptionBudget,Secret,Service,ServiceAccount,ServiceMonitor" {
		t.Fatalf("kinds %s", got)
	}
	if r.deploy.Spec.Replicas != nil {
		t.Errorf("replicas %d beside an HPA", *r.deploy.Spec.Replicas)
	}
	if args := strings.Join(r.container().Args, " "); strings.Contains(args, "--instances") {
		t.Errorf("--instances under fail_open: %s", args)
	}
	h := r.hpa.Spec
	if h.ScaleTargetRef.Kind != "Deployment" || h.ScaleTargetRef.Name != r.deploy.Name || *h.MinReplicas != 2 || h.MaxReplicas != 6 || len(h.Metrics) != 2 {
		t.Errorf("HPA %+v", h)
	}
	if r.pdb.Spec.MinAvailable == nil || r.pdb.Spec.MinAvailable.IntValue() != 1 ||
		r.pdb.Spec.Selector.MatchLabels["app.kubernetes.io/name"] != "sluice" {
		t.Errorf("PDB %+v", r.pdb.Spec)
	}
	m := r.monitor
	if len(m.Spec.Endpoints) != 1 || m.Spec.Endpoints[0].Port != "metrics" || m.Spec.Endpoints[0].Path != "/metrics" ||
		m.Metadata.Labels["release"] != "prometheus" || m.Spec.Selector.MatchLabels["app.kubernetes.io/instance"] != "rel" {
		t.Errorf("ServiceMonitor %+v", m)
	}
	for k, v := range m.Spec.Selector.MatchLabels {
		if r.service.Labels[k] != v {
			t.Errorf("the ServiceMonitor's selector %s=%s does not select the Service (labels %v)", k, v, r.service.Labels)
		}
	}
	if string(r.secret.Data["auth-token"]) != "s3cret" || len(r.secret.Data) != 2 {
		t.Errorf("Secret %v", r.secret.Data)
	}
	if r.deploy.Spec.Template.Annotations["checksum/policy"] == "" {
		t.Error("rollOnPolicyChange without checksum/policy")
	}
	var pol struct {
		Limits []map[string]any `json:"limits"`
	}
	if err := decodeStrict([]byte(r.config.Data["policy.yaml"]), &pol); err != nil || len(pol.Limits) != 1 || pol.Limits[0]["name"] != "per_ip" {
		t.Errorf("policy from an object: %v %q", err, r.config.Data["policy.yaml"])
	}
}

// The values the chart refuses, each with a message naming the fix.
func TestChartRefuses(t *testing.T) {
	for _, c := range []struct{ name, values, want string }{
		{"memory with 2 replicas", "replicaCount: 2\n",
			"store.type memory keeps the limit state in each pod, so it needs replicaCount: 1 and autoscaling.enabled: false (got replicaCount: 2"},
		{"memory with autoscaling", "autoscaling:\n  enabled: true\n", "store.type memory keeps the limit state in each pod"},
		{"redis without a URL", "store:\n  type: redis\n", "store.type redis needs store.redis.url"},
		{"an unknown store", "store:\n  type: etcd\n", `store.type "etcd": must be memory or redis`},
		{"a token without its value", "auth:\n  enabled: true\n", "auth.enabled needs auth.token or existingSecret"},
		{"a grace period shorter than the drain", "terminationGracePeriodSeconds: 10\n",
			"terminationGracePeriodSeconds 10 must be at least preStopSleepSeconds (5) + 15"},
	} {
		t.Run(c.name, func(t *testing.T) { fails(t, c.values, c.want) })
	}
}
