// Command rlscompare drives sluice's Envoy RateLimitService and a single
// gubernator v2.13 node (from its Go module) with the same gRPC load on
// loopback, in the same process and run, alternating rounds, and prints
// decisions/s and latency for each. Both servers run in this process, so
// they share the machine with the load alike. A third server, "floor",
// answers OK without deciding anything: the ceiling any grpc-go
// RateLimitService can reach under this load on this machine.
//
//	go run ./cmd/rlscompare -clients 64 -seconds 5 -rounds 3
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	gubernator "github.com/gubernator-io/gubernator/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/envoyrls"
	"github.com/sluicehq/sluice/store/memstore"
)

func main() {
	clients := flag.Int("clients", 64, "concurrent clients")
	seconds := flag.Int("seconds", 5, "seconds per round")
	rounds := flag.Int("rounds", 3, "rounds per implementation (alternating)")
	keys := flag.Int("keys", 1000, "distinct keys")
	only := flag.String("only", "", "run only this implementation (sluice, floor or gubernator)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the rounds to this file")
	flag.Parse()
	ctx := context.Background()

	sluiceClient, stop := startSluice()
	defer stop()
	floorClient, stopFloor := startFloor()
	defer stopFloor()
	gubClient, stopGub := startGubernator(ctx, *keys)
	defer stopGub()

	impls := []struct {
		name string
		call func(i int) (bool, error)
	}{
		{"sluice", func(i int) (bool, error) {
			r, err := sluiceClient.ShouldRateLimit(ctx, &rls.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: strconv.Itoa(i)}}}}})
			return err == nil && r.OverallCode == rls.RateLimitResponse_OK, err
		}},
		{"floor", func(i int) (bool, error) {
			r, err := floorClient.ShouldRateLimit(ctx, &rls.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: strconv.Itoa(i)}}}}})
			return err == nil && r.OverallCode == rls.RateLimitResponse_OK, err
		}},
		{"gubernator", func(i int) (bool, error) {
			r, err := gubClient.GetRateLimits(ctx, &gubernator.GetRateLimitsReq{Requests: []*gubernator.RateLimitReq{{
				Name: "edge", UniqueKey: strconv.Itoa(i), Hits: 1, Limit: 1_000_000_000, Duration: 1000, Algorithm: gubernator.Algorithm_TOKEN_BUCKET}}})
			return err == nil && r.Responses[0].Status == gubernator.Status_UNDER_LIMIT, err
		}},
	}
	fmt.Printf("%d clients, %d keys, %d s per round, rounds alternate\n", *clients, *keys, *seconds)
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			log.Fatal(err)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	for round := 1; round <= *rounds; round++ {
		for _, im := range impls {
			if *only != "" && im.name != *only {
				continue
			}
			n, bad, lat := load(im.call, *clients, *keys, time.Duration(*seconds)*time.Second)
			fmt.Printf("round %d %-10s decisions/s %8.0f  not-admitted %d  p50 %v  p90 %v  p99 %v\n", round, im.name,
				float64(n)/float64(*seconds), bad, pct(lat, 0.5), pct(lat, 0.9), pct(lat, 0.99))
		}
	}
}

// serveRLS serves impl on a free loopback port with grpc-go's defaults (as
// sluice serve does) and returns a client of it and the server's stop.
func serveRLS(impl rls.RateLimitServiceServer) (rls.RateLimitServiceClient, func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	gs := grpc.NewServer()
	rls.RegisterRateLimitServiceServer(gs, impl)
	go gs.Serve(ln)
	c, _ := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	return rls.NewRateLimitServiceClient(c), gs.Stop
}

// startSluice serves Envoy's RateLimitService from an Envoy config whose
// limit is never reached, on memstore.
func startSluice() (rls.RateLimitServiceClient, func()) {
	_, root, err := envoyrls.Parse([]byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n"))
	if err != nil {
		log.Fatal(err)
	}
	return serveRLS(envoyrls.NewService(&envoyrls.Config{Domains: map[string]*envoyrls.Node{"edge": root}}, memstore.New()))
}

// startFloor serves the floor: the same gRPC server answering OK without
// deciding anything, what any grpc-go RateLimitService costs on this
// machine under this load (neither server can go below it).
func startFloor() (rls.RateLimitServiceClient, func()) { return serveRLS(floorService{}) }

// startGubernator runs one gubernator v2.13 node sized for keys.
func startGubernator(ctx context.Context, keys int) (gubernator.V1Client, func()) {
	port := func() string {
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		defer l.Close()
		return l.Addr().String()
	}
	gaddr, ml := port(), port()
	d, err := gubernator.SpawnDaemon(ctx, gubernator.DaemonConfig{
		GRPCListenAddress: gaddr, HTTPListenAddress: port(), AdvertiseAddress: gaddr, CacheSize: 4 * keys,
		PeerDiscoveryType: "member-list", Logger: quiet(),
		MemberListPoolConf: gubernator.MemberListPoolConfig{MemberListAddress: ml, MemberListBindAddress: ml, AdvertiseAddress: ml, NodeName: "bench"},
	})
	if err != nil {
		log.Fatal(err)
	}
	gc, _ := grpc.NewClient(gaddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	return gubernator.NewV1Client(gc), func() { d.Close() }
}

// floorService answers every ShouldRateLimit with OK and one status,
// deciding nothing: the cost of the gRPC path alone.
type floorService struct {
	rls.UnimplementedRateLimitServiceServer
}

func (floorService) ShouldRateLimit(_ context.Context, req *rls.RateLimitRequest) (*rls.RateLimitResponse, error) {
	return &rls.RateLimitResponse{OverallCode: rls.RateLimitResponse_OK,
		Statuses: []*rls.RateLimitResponse_DescriptorStatus{{Code: rls.RateLimitResponse_OK}}}, nil
}

func load(call func(int) (bool, error), clients, keys int, d time.Duration) (int64, int64, []time.Duration) {
	var n, bad, next atomic.Int64
	deadline := time.Now().Add(d)
	lats := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				t0 := time.Now()
				if !t0.Before(deadline) {
					return
				}
				ok, _ := call(int(next.Add(1) % int64(keys)))
				lats[w] = append(lats[w], time.Since(t0))
				n.Add(1)
				if !ok {
					bad.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	var all []time.Duration
	for _, l := range lats {
		all = append(all, l...)
	}
	slices.Sort(all)
	return n.Load(), bad.Load(), all
}

func pct(s []time.Duration, p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[min(int(p*float64(len(s))), len(s)-1)].Round(time.Microsecond)
}
