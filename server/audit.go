// The audit log: every change of what is enforced (an override set or
// deleted, a pause, a policy reload) as one log record with audit true and
// one record of GET /v1/audit, kept in an AuditStore (shared on Redis).

package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/internal/answer"
	"github.com/sluicehq/sluice/policy"
)

// AuditRecord is one change of what is enforced. Action is one of
// "policy_reload", "override_set", "override_delete", "override_expire",
// "pause", "adaptive_ceiling" (POST /v1/feedback lowered a key's adaptive
// ceiling); Change says what changed (per action: docs/operations.md, "Audit
// log"); Actor is the name of the token the change came with ("token" for
// a token without a name, "anonymous" when the service has none; "system"
// for a reload or an expiry), Via how it came (the endpoint, or SIGHUP, or
// "file change").
type AuditRecord struct {
	Time       time.Time       `json:"time"`
	Instance   string          `json:"instance,omitempty"`
	Actor      string          `json:"actor"`
	Action     string          `json:"action"`
	Via        string          `json:"via,omitempty"`
	RemoteAddr string          `json:"remote_addr,omitempty"`
	Change     json.RawMessage `json:"change"`
}

// AuditStore keeps audit records (JSON) for GET /v1/audit. Implementations
// are safe for concurrent use.
type AuditStore interface {
	// AppendAudit adds a record, dropping the oldest beyond the store's
	// cap.
	AppendAudit(ctx context.Context, rec []byte) error
	// AuditSince returns, oldest first, the last n records added at or
	// after sinceMs (Unix milliseconds; 0: all).
	AuditSince(ctx context.Context, sinceMs int64, n int) ([][]byte, error)
}

// AuditKept is how many records GET /v1/audit lists at most: the last
// ones (the in-memory store keeps that many; redisstore.AuditLog too).
const AuditKept = 10000

// MemoryAudit is an AuditStore in this process: the last Max records (a
// ring).
type MemoryAudit struct {
	mu   sync.Mutex
	max  int
	recs []memRecord
	next int // where the next record goes once the ring is full
}

type memRecord struct {
	ms  int64
	rec []byte
}

// NewMemoryAudit keeps the last max records (AuditKept when max <= 0).
func NewMemoryAudit(max int) *MemoryAudit {
	if max <= 0 {
		max = AuditKept
	}
	return &MemoryAudit{max: max}
}

func (m *MemoryAudit) AppendAudit(_ context.Context, rec []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := memRecord{time.Now().UnixMilli(), append([]byte(nil), rec...)}
	if len(m.recs) < m.max {
		m.recs = append(m.recs, r)
		return nil
	}
	m.recs[m.next] = r
	m.next = (m.next + 1) % m.max
	return nil
}

func (m *MemoryAudit) AuditSince(_ context.Context, sinceMs int64, n int) ([][]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out [][]byte
	for i := range m.recs {
		r := m.recs[(m.next+i)%len(m.recs)]
		if r.ms >= sinceMs {
			out = append(out, r.rec)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out, nil
}

// Audit records a change of what is enforced: one log record (msg
// "audit: <action>", audit true, with the record's fields) and one record
// of the AuditStore. A store that fails is logged; the change stands.
// change is encoded as JSON.
func (s *Server) Audit(ctx context.Context, actor, action, via, remoteAddr string, change any) {
	rec := s.auditRecord(actor, action, via, remoteAddr, change)
	s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "audit: "+action, slog.Bool("audit", true), slog.String("actor", actor),
		slog.String("action", action), slog.String("via", via), slog.String("remote_addr", remoteAddr),
		slog.String("instance", s.cfg.Instance), slog.Any("change", rawJSON(rec.Change)))
	s.storeAudit(ctx, rec)
}

func (s *Server) auditRecord(actor, action, via, remoteAddr string, change any) AuditRecord {
	b, err := json.Marshal(change)
	if err != nil {
		b = []byte("null")
	}
	return AuditRecord{Time: time.Now().UTC(), Instance: s.cfg.Instance, Actor: actor, Action: action, Via: via, RemoteAddr: remoteAddr, Change: b}
}

// storeAudit adds rec to the AuditStore (within 2 s, whether or not the
// caller has left), logging a failure.
func (s *Server) storeAudit(ctx context.Context, rec AuditRecord) {
	raw, _ := json.Marshal(rec)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := s.auditStore.AppendAudit(ctx, raw); err != nil {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "audit record not stored", slog.String("action", rec.Action), slog.String("error", err.Error()))
	}
}

// auditRequest records a change made through the API by r.
func (s *Server) auditRequest(r *http.Request, action string, change any) {
	s.Audit(r.Context(), s.actor(r), action, r.Method+" "+r.URL.Path, r.RemoteAddr, change)
}

// auditAnswer is the body of GET /v1/audit.
type auditAnswer struct {
	Records []json.RawMessage `json:"records"`
}

// auditList serves GET /v1/audit?since=T: the last AuditKept records
// (every instance's on a shared store) added at or after T, oldest first.
// T is an RFC 3339 time, Unix milliseconds, or a duration back from now
// ("24h"); absent: all kept.
func (s *Server) auditList(w http.ResponseWriter, r *http.Request) {
	since := int64(0)
	if v := r.URL.Query().Get("since"); v != "" {
		ms, ok := parseSince(v, time.Now())
		if !ok {
			fail(w, answer.BadRequest, "since %.40q: want an RFC 3339 time, Unix milliseconds or a duration such as 24h", v)
			return
		}
		since = ms
	}
	recs, err := s.auditStore.AuditSince(r.Context(), since, AuditKept)
	if err != nil {
		fail(w, answer.StoreError, "audit: %v", err)
		return
	}
	out := auditAnswer{Records: make([]json.RawMessage, 0, len(recs))}
	for _, b := range recs {
		out.Records = append(out.Records, b)
	}
	writeJSON(w, http.StatusOK, out)
}

// parseSince reads since= as Unix milliseconds.
func parseSince(v string, now time.Time) (int64, bool) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t.UnixMilli(), true
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		return n, true
	}
	if d, err := time.ParseDuration(strings.TrimSpace(v)); err == nil && d >= 0 {
		return now.Add(-d).UnixMilli(), true
	}
	return 0, false
}

// shownDescriptors are desc as the audit log shows them: a descriptor the
// policy redacts as the hash statuses show.
func (s *Server) shownDescriptors(desc map[string]string) map[string]string {
	p := s.cfg.Limiter.Policy()
	out := make(map[string]string, len(desc))
	for k, v := range desc {
		if p != nil && p.Redacts(k) {
			v = policy.RedactValue(v)
		}
		out[k] = v
	}
	return out
}
