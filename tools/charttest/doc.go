// Package charttest tests the Helm chart deploy/helm/sluice (its tests are
// the whole package): helm lint and helm template for each documented
// combination of values, the rendered objects decoded strictly into the
// Kubernetes API types, and the rendered Deployment and ConfigMap run with
// podman kube play. A module of its own, outside the workspace (run it with
// GOWORK=off): the Kubernetes API modules must not reach sluice's build.
package charttest
