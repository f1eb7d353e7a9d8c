// Package xds is an xDS client of rate-limit configuration: it follows an
// xDS management server (Envoy Gateway's, or any built on go-control-plane)
// over the Aggregated Discovery Service in state-of-the-world mode, as
// envoyproxy/ratelimit does with CONFIG_TYPE=GRPC_XDS_SOTW, and hands every
// good snapshot of RateLimitConfig resources to the caller as an
// envoyrls.Config.
//
// The protocol, as the reference service speaks it
// (src/provider/xds_grpc_sotw_provider.go there): one stream
// (StreamAggregatedResources) whose requests carry the node (Options.NodeID
// and NodeMetadata), the type TypeURL and the resource names (none: every
// resource, the wildcard subscription). Each response is a whole snapshot:
// all its resources are converted (Convert) and applied; a snapshot that
// converts and applies is ACKed (a request with the response's
// version_info and nonce), one that does not is NACKed (the nonce, the
// version of the last good snapshot, and error_detail saying every
// problem), and the last good configuration stays in force. A lost stream
// or connection is opened again after a bounded, jittered exponential
// backoff (Backoff); the reconnecting request carries the last good
// version, so a server that still has it sends nothing new.
package xds

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/envoyrls"
)

// Options says which server to follow and how.
type Options struct {
	// ServerURL is the management server's gRPC target, "host:port"
	// (CONFIG_GRPC_XDS_SERVER_URL). Required.
	ServerURL string
	// NodeID is the node's id, the key a snapshot cache serves by
	// (CONFIG_GRPC_XDS_NODE_ID); NodeMetadata its metadata, as strings.
	NodeID       string
	NodeMetadata map[string]string
	// ResourceNames subscribes to these resources only; none is every
	// resource of the type (wildcard), as the reference service asks.
	ResourceNames []string
	// TLS, when not nil, connects with TLS (a client certificate in it
	// makes it mTLS); nil connects in plaintext.
	TLS *tls.Config
	// Headers are sent as gRPC metadata on the stream
	// (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS).
	Headers map[string]string
	// MaxRecvMsgSize bounds one response, in bytes; 0 is gRPC's default
	// (4 MiB).
	MaxRecvMsgSize int
	// Logger says what happens (connected, applied, NACKed, lost);
	// nil discards.
	Logger *slog.Logger
	// Backoff paces reconnection.
	Backoff Backoff
	// Loaded, when set, is told of every snapshot's outcome: nil for one
	// applied (ACKed), the error for one refused (NACKed); sluice
	// ratelimit counts them in ratelimit_service_config_load_*.
	Loaded func(err error)
}

// Backoff is the delay before opening a lost stream again: Initial, then
// doubling up to Max, each delay shortened by a random fraction of at most
// Jitter (so never more than Max); it starts again from Initial once a
// stream has received a response. Zero fields take the defaults: 1 s,
// 60 s and 0.5 (a negative Jitter is none).
type Backoff struct {
	Initial, Max time.Duration
	Jitter       float64
}

// Default backoff.
const (
	DefaultBackoffInitial = time.Second
	DefaultBackoffMax     = 60 * time.Second
	DefaultBackoffJitter  = 0.5
)

// delay is the n-th (0-based) delay.
func (b Backoff) delay(n int) time.Duration {
	initial, max, jitter := b.Initial, b.Max, b.Jitter
	if initial <= 0 {
		initial = DefaultBackoffInitial
	}
	if max <= 0 {
		max = DefaultBackoffMax
	}
	if max < initial {
		max = initial
	}
	switch {
	case jitter == 0:
		jitter = DefaultBackoffJitter
	case jitter < 0:
		jitter = 0
	case jitter > 1:
		jitter = 1
	}
	d := initial
	for i := 0; i < n && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return d - time.Duration(jitter*rand.Float64()*float64(d))
}

// Run follows the server until ctx ends, calling apply with every new
// snapshot's configuration (all its RateLimitConfig resources merged, one
// domain each, see Convert); apply's non-nil error NACKs the snapshot, as
// a snapshot that does not convert is NACKed, and the last good
// configuration stays (apply is not called for it). apply is called from
// one goroutine at a time, never after Run returns. Run returns nil once
// ctx ends; it returns an error at once only for Options it cannot use.
// Servers that cannot be reached, streams that break and responses of the
// wrong type are logged and retried, never returned.
func Run(ctx context.Context, o Options, apply func(*envoyrls.Config) error) error {
	if o.ServerURL == "" {
		return errors.New("xds: no server URL")
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &client{o: o, log: log.With("xds_server", o.ServerURL), apply: apply, node: node(o)}
	creds := insecure.NewCredentials()
	if o.TLS != nil {
		creds = credentials.NewTLS(o.TLS)
	}
	c.dial = []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if o.MaxRecvMsgSize > 0 {
		c.dial = append(c.dial, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(o.MaxRecvMsgSize)))
	}
	if len(o.Headers) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, metadata.New(o.Headers))
	}
	// A target the client cannot even parse is an error of the Options.
	cc, err := grpc.NewClient(o.ServerURL, c.dial...)
	if err != nil {
		return err
	}
	cc.Close()
	fails := 0
	for {
		received, err := c.stream(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if received {
			fails = 0
		}
		d := o.Backoff.delay(fails)
		fails++
		c.log.Warn("xds: stream lost, reconnecting", "err", err, "retry_in", d.Round(time.Millisecond).String(), "attempt", fails)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// client is Run's state: the version of the last good snapshot ("" before
// one) outlives streams.
type client struct {
	o       Options
	log     *slog.Logger
	apply   func(*envoyrls.Config) error
	node    *corev3.Node
	dial    []grpc.DialOption
	version string
}

func node(o Options) *corev3.Node {
	n := &corev3.Node{Id: o.NodeID}
	if len(o.NodeMetadata) > 0 {
		f := make(map[string]*structpb.Value, len(o.NodeMetadata))
		for k, v := range o.NodeMetadata {
			f[k] = structpb.NewStringValue(v)
		}
		n.Metadata = &structpb.Struct{Fields: f}
	}
	return n
}

// request is a DiscoveryRequest of this client's subscription.
func (c *client) request(nonce string, detail *statuspb.Status) *discoveryv3.DiscoveryRequest {
	return &discoveryv3.DiscoveryRequest{
		Node:          c.node,
		TypeUrl:       TypeURL,
		ResourceNames: c.o.ResourceNames,
		VersionInfo:   c.version,
		ResponseNonce: nonce,
		ErrorDetail:   detail,
	}
}

// take converts and applies resp's snapshot; a panic on the way (a bug)
// is an error, NACKing the snapshot, as the reference service recovers
// its loader's panics.
func (c *client) take(resp *discoveryv3.DiscoveryResponse) (cfg *envoyrls.Config, err error) {
	defer func() {
		if p := recover(); p != nil {
			cfg, err = nil, fmt.Errorf("xds: internal error converting the snapshot: %v", p)
		}
	}()
	if cfg, err = Convert(resp.GetResources()); err != nil {
		return nil, err
	}
	return cfg, c.apply(cfg)
}

// maxDetail bounds a NACK's message.
const maxDetail = 16 << 10

// stream connects, subscribes and follows one stream until it breaks,
// saying whether it received a response.
func (c *client) stream(ctx context.Context) (received bool, err error) {
	// A connection of its own per stream: the backoff here is the only
	// one (gRPC's reconnection would otherwise add its own, up to 2 min).
	cc, err := grpc.NewClient(c.o.ServerURL, c.dial...)
	if err != nil {
		return false, err
	}
	defer cc.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(sctx)
	if err != nil {
		return false, err
	}
	if err := st.Send(c.request("", nil)); err != nil {
		return false, err
	}
	c.log.Info("xds: subscribed", "node_id", c.o.NodeID, "type", TypeURL, "version", c.version)
	for {
		resp, err := st.Recv()
		if err != nil {
			return received, err
		}
		received = true
		if resp.GetTypeUrl() != TypeURL {
			c.log.Warn("xds: response of another type ignored", "type", resp.GetTypeUrl())
			continue
		}
		cfg, err := c.take(resp)
		if err != nil {
			msg := err.Error()
			if len(msg) > maxDetail {
				msg = msg[:maxDetail] + "..."
			}
			c.log.Error("xds: snapshot refused (NACK), the last good config stays", "version", resp.GetVersionInfo(), "kept_version", c.version, "err", msg)
			if c.o.Loaded != nil {
				c.o.Loaded(err)
			}
			if err := st.Send(c.request(resp.GetNonce(), &statuspb.Status{Code: int32(codes.InvalidArgument), Message: msg})); err != nil {
				return received, err
			}
			continue
		}
		c.version = resp.GetVersionInfo()
		if c.o.Loaded != nil {
			c.o.Loaded(nil)
		}
		c.log.Info("xds: config applied (ACK)", "version", c.version, "resources", len(resp.GetResources()), "domains", len(cfg.Domains))
		if err := st.Send(c.request(resp.GetNonce(), nil)); err != nil {
			return received, err
		}
	}
}
