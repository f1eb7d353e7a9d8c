// The audit log on Redis: the last records of every instance's changes of
// what is enforced, one capped stream (sluice serve's GET /v1/audit).

package redisstore

import (
	"context"
	"strconv"
)

// AuditLog keeps audit records (opaque bytes: sluice serve's JSON) in one
// Redis stream, <prefix>audit, capped at its Max newest records, so that
// every instance on the same Redis lists every instance's changes. Safe for
// concurrent use; every call is bounded by the store's timeout.
type AuditLog struct {
	s   *Store
	key string
	Max int // records kept (default 10,000)
}

// AuditMax is the default of AuditLog.Max.
const AuditMax = 10000

// Audit returns the store's audit log.
func (s *Store) Audit() *AuditLog {
	return &AuditLog{s: s, key: s.cfg.prefix + "audit", Max: AuditMax}
}

// AppendAudit adds a record (XADD, the stream trimmed to Max records). On
// Redis Cluster the stream lives on the node of its key's hash slot.
func (a *AuditLog) AppendAudit(ctx context.Context, rec []byte) error {
	ctx, cancel := a.s.ctx(ctx)
	defer cancel()
	c := a.s.c
	err := c.Do(ctx, c.B().Xadd().Key(a.key).Maxlen().Threshold(strconv.Itoa(a.max())).Id("*").
		FieldValue().FieldValue("r", string(rec)).Build()).Error()
	if err != nil {
		return a.s.fail("audit", err)
	}
	return nil
}

// AuditSince returns, oldest first, the last n records added at or after
// sinceMs (Unix milliseconds, Redis's clock: the stream ids' time).
func (a *AuditLog) AuditSince(ctx context.Context, sinceMs int64, n int) ([][]byte, error) {
	ctx, cancel := a.s.ctx(ctx)
	defer cancel()
	c := a.s.c
	start := "-"
	if sinceMs > 0 {
		start = strconv.FormatInt(sinceMs, 10)
	}
	entries, err := c.Do(ctx, c.B().Xrevrange().Key(a.key).End("+").Start(start).Count(int64(n)).Build()).AsXRange()
	if err != nil {
		return nil, a.s.fail("audit", err)
	}
	out := make([][]byte, 0, len(entries))
	for i := len(entries) - 1; i >= 0; i-- {
		if r, ok := entries[i].FieldValues["r"]; ok {
			out = append(out, []byte(r))
		}
	}
	return out, nil
}

func (a *AuditLog) max() int {
	if a.Max > 0 {
		return a.Max
	}
	return AuditMax
}
