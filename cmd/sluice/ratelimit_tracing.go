// sluice ratelimit's traces: the reference's TRACING_* variables read as
// serve's --otel and the OTEL_* variables they stand for.

package main

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// rlTracingEnv is what TRACING_ENABLED=true asks of envoyproxy/ratelimit's
// other TRACING_* variables, as the OTEL_* variables serve's --otel reads
// (the values to set; get reads the environment):
//
//   - TRACING_EXPORTER_PROTOCOL (http, the default, or grpc):
//     OTEL_EXPORTER_OTLP_TRACES_PROTOCOL http/protobuf or grpc (the
//     reference picks its exporter by it whatever OTEL_* says);
//   - TRACING_SERVICE_NAME (default RateLimit): OTEL_SERVICE_NAME, unless
//     that is set;
//   - TRACING_SERVICE_NAMESPACE, TRACING_SERVICE_INSTANCE_ID:
//     service.namespace and service.instance.id added to
//     OTEL_RESOURCE_ATTRIBUTES (unless it names them);
//   - TRACING_SAMPLING_RATE (0 to 1, default 1): OTEL_TRACES_SAMPLER
//     parentbased_traceidratio with that ratio, unless OTEL_TRACES_SAMPLER
//     is set.
//
// OTEL_EXPORTER_OTLP_ENDPOINT and the exporter's other settings are read
// as they are, as the reference reads them.
func rlTracingEnv(get func(string) string) (map[string]string, error) {
	env := map[string]string{}
	switch p := strings.ToLower(strings.TrimSpace(get("TRACING_EXPORTER_PROTOCOL"))); p {
	case "", "http", "http/protobuf":
		env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"
	case "grpc":
		env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "grpc"
	default:
		return nil, fmt.Errorf("TRACING_EXPORTER_PROTOCOL=%q: not http or grpc", p)
	}
	if get("OTEL_SERVICE_NAME") == "" {
		name := get("TRACING_SERVICE_NAME")
		if name == "" {
			name = "RateLimit"
		}
		env["OTEL_SERVICE_NAME"] = name
	}
	attrs := get("OTEL_RESOURCE_ATTRIBUTES")
	var add []string
	for _, a := range []struct{ v, attr string }{
		{"TRACING_SERVICE_NAMESPACE", "service.namespace"},
		{"TRACING_SERVICE_INSTANCE_ID", "service.instance.id"},
	} {
		if v := get(a.v); v != "" && !strings.Contains(attrs, a.attr+"=") {
			add = append(add, a.attr+"="+url.PathEscape(v))
		}
	}
	if len(add) > 0 {
		if attrs != "" {
			add = append(add, attrs)
		}
		env["OTEL_RESOURCE_ATTRIBUTES"] = strings.Join(add, ",")
	}
	rate := 1.0
	if v := strings.TrimSpace(get("TRACING_SAMPLING_RATE")); v != "" {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r < 0 || r > 1 {
			return nil, fmt.Errorf("TRACING_SAMPLING_RATE=%q: not a ratio from 0 to 1", v)
		}
		rate = r
	}
	if get("OTEL_TRACES_SAMPLER") == "" {
		env["OTEL_TRACES_SAMPLER"] = "parentbased_traceidratio"
		env["OTEL_TRACES_SAMPLER_ARG"] = strconv.FormatFloat(rate, 'g', -1, 64)
	}
	return env, nil
}

// setRLTracingEnv sets rlTracingEnv's variables in the process's
// environment (read by --otel's exporter, sampler and resource).
func setRLTracingEnv() error {
	env, err := rlTracingEnv(os.Getenv)
	if err != nil {
		return err
	}
	for k, v := range env {
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	return nil
}
