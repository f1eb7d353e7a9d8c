// --otel's gRPC side: a span per ShouldRateLimit call (both the policy's
// Envoy service and the reference-compatible --envoy-config mode), a
// child of the caller's traceparent in the call's metadata.

package main

import (
	"context"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluicehq/sluice/tracing"
)

// grpcOptions are the gRPC server's options --otel adds: the tracing
// interceptor (none without --otel).
func (s *service) grpcOptions() []grpc.ServerOption {
	t := s.tracer()
	if t == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(tracedUnary(t))}
}

// shouldRateLimit is the method the interceptor traces.
const shouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// tracedUnary makes a span "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
// of each ShouldRateLimit call, with rpc.* and the decision's sluice.*
// attributes: sluice.domain, sluice.descriptors, sluice.decision
// ("allowed", "refused" or "error"), sluice.limits (the names of the
// limits the answer reports, in order), sluice.hits_addend.
func tracedUnary(t tracing.Tracer) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if info.FullMethod != shouldRateLimit {
			return h(ctx, req)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		ctx, sp := t.Start(ctx, shouldRateLimit[1:], tracing.Server, mdCarrier(md))
		resp, err := h(ctx, req)
		if sp.Recording() {
			attrs := []tracing.Attr{tracing.String("rpc.system", "grpc"), tracing.String("rpc.service", "envoy.service.ratelimit.v3.RateLimitService"),
				tracing.String("rpc.method", "ShouldRateLimit")}
			if r, ok := req.(*rls.RateLimitRequest); ok {
				attrs = append(attrs, tracing.String("sluice.domain", r.GetDomain()), tracing.Int("sluice.descriptors", int64(len(r.GetDescriptors()))),
					tracing.Int("sluice.hits_addend", int64(r.GetHitsAddend())))
			}
			if err != nil {
				attrs = append(attrs, tracing.String("sluice.decision", "error"), tracing.String("rpc.grpc.status_code", status.Code(err).String()))
				sp.SetError(err.Error())
			} else if r, ok := resp.(*rls.RateLimitResponse); ok {
				decision := "allowed"
				if r.GetOverallCode() == rls.RateLimitResponse_OVER_LIMIT {
					decision = "refused"
				}
				var names []string
				for _, st := range r.GetStatuses() {
					if n := st.GetCurrentLimit().GetName(); n != "" {
						names = append(names, n)
					}
				}
				attrs = append(attrs, tracing.String("sluice.decision", decision), tracing.Strings("sluice.limits", names))
			}
			sp.SetAttributes(attrs...)
		}
		sp.End()
		return resp, err
	}
}

// mdCarrier reads gRPC metadata as a tracing.Carrier (keys are lowercase
// there).
type mdCarrier metadata.MD

func (m mdCarrier) Get(key string) string {
	if v := metadata.MD(m).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}
