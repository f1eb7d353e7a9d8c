// TRACING_ENABLED and the reference's other TRACING_* variables.

package main

import (
	"strings"
	"testing"
)

func mapEnv(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// The reference's TRACING_* variables as the OTEL_* ones --otel reads;
// the OTEL_* ones set win where the reference lets them.
func TestRLTracingEnv(t *testing.T) {
	env, err := rlTracingEnv(mapEnv(nil))
	if err != nil || env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] != "http/protobuf" || env["OTEL_SERVICE_NAME"] != "RateLimit" ||
		env["OTEL_TRACES_SAMPLER"] != "parentbased_traceidratio" || env["OTEL_TRACES_SAMPLER_ARG"] != "1" || env["OTEL_RESOURCE_ATTRIBUTES"] != "" {
		t.Fatalf("the reference's defaults: %v %v", env, err)
	}
	env, err = rlTracingEnv(mapEnv(map[string]string{"TRACING_EXPORTER_PROTOCOL": "grpc", "TRACING_SERVICE_NAME": "rl",
		"TRACING_SERVICE_NAMESPACE": "gw", "TRACING_SERVICE_INSTANCE_ID": "pod a,1", "TRACING_SAMPLING_RATE": "0.25",
		"OTEL_RESOURCE_ATTRIBUTES": "team=x"}))
	if err != nil || env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] != "grpc" || env["OTEL_SERVICE_NAME"] != "rl" ||
		env["OTEL_TRACES_SAMPLER_ARG"] != "0.25" || env["OTEL_RESOURCE_ATTRIBUTES"] != "service.namespace=gw,service.instance.id=pod%20a%2C1,team=x" {
		t.Fatalf("%v %v", env, err)
	}
	env, _ = rlTracingEnv(mapEnv(map[string]string{"OTEL_SERVICE_NAME": "mine", "OTEL_TRACES_SAMPLER": "always_on", "TRACING_SERVICE_NAME": "rl"}))
	if _, set := env["OTEL_SERVICE_NAME"]; set || env["OTEL_TRACES_SAMPLER"] != "" {
		t.Fatalf("OTEL_SERVICE_NAME and OTEL_TRACES_SAMPLER set win: %v", env)
	}
	for _, bad := range []map[string]string{{"TRACING_EXPORTER_PROTOCOL": "zipkin"}, {"TRACING_SAMPLING_RATE": "2"}, {"TRACING_SAMPLING_RATE": "x"}} {
		if _, err := rlTracingEnv(mapEnv(bad)); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

// TRACING_ENABLED=true runs serve with --otel (it stopped the start
// before); a bad TRACING_* value stops it, naming the variable.
func TestRatelimitTracingEnabled(t *testing.T) {
	base := map[string]string{"USE_STATSD": "false", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:1", "RUNTIME_ROOT": t.TempDir()}
	c, err := ratelimitServe(mapEnv(base))
	if err != nil || c.OTel {
		t.Fatalf("without TRACING_ENABLED: otel %v, %v", c.OTel, err)
	}
	base["TRACING_ENABLED"] = "true"
	if c, err = ratelimitServe(mapEnv(base)); err != nil || !c.OTel {
		t.Fatalf("TRACING_ENABLED=true: otel %v, %v", c.OTel, err)
	}
	base["TRACING_EXPORTER_PROTOCOL"] = "zipkin"
	if _, err = ratelimitServe(mapEnv(base)); err == nil || !strings.Contains(err.Error(), "TRACING_EXPORTER_PROTOCOL") {
		t.Fatalf("a bad TRACING_EXPORTER_PROTOCOL: %v", err)
	}
}
