// Command floor serves Envoy's RateLimitService with a handler that decides
// nothing: what a grpc-go RateLimitService costs on its own, for
// bench/service/envoy-compare.sh (FLOOR=1). No server that decides can be
// faster under the same load.
//
//	go run ./service/floor -grpc 127.0.0.1:18091
package main

import (
	"context"
	"flag"
	"log"
	"net"
	"runtime"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

func main() {
	addr := flag.String("grpc", "127.0.0.1:18091", "gRPC listen address")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	// sluice serve's gRPC server options (cmd/sluice newGRPC).
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(256<<10), grpc.NumStreamWorkers(uint32(max(64, 16*runtime.GOMAXPROCS(0)))))
	rls.RegisterRateLimitServiceServer(gs, floorService{})
	log.Fatal(gs.Serve(ln))
}

// floorService answers every ShouldRateLimit OK, one OK status per
// descriptor.
type floorService struct {
	rls.UnimplementedRateLimitServiceServer
}

func (floorService) ShouldRateLimit(_ context.Context, req *rls.RateLimitRequest) (*rls.RateLimitResponse, error) {
	st := make([]*rls.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))
	for i := range st {
		st[i] = &rls.RateLimitResponse_DescriptorStatus{Code: rls.RateLimitResponse_OK}
	}
	return &rls.RateLimitResponse{OverallCode: rls.RateLimitResponse_OK, Statuses: st}, nil
}
