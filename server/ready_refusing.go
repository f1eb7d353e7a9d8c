// /readyz when the store answers and refuses: Redis at maxmemory, a
// replica, a library it will not load.

package server

import (
	"errors"
	"net/http"

	"github.com/sluicehq/sluice/internal/answer"
)

// refusing answers /readyz when err, Ready's error, says the store was
// reached and refused (an error in its chain has Refused() true, as
// redisstore's do), and reports whether it did. No on_store_error applies
// to a refusal (the store is not down: a check it refuses answers 503), so
// the modes do not matter: the answer is 200 "degraded" while the store
// still decides some calls (an error with StillDecides() true: at
// maxmemory it decides existing keys; a WRONGTYPE is one key's), else 503
// "unavailable" with code "store_refusing"; always 503 under
// ReadyRequiresStore. StoreError is the error, StoreErrorClass its class
// (ErrorClass(): "oom", "readonly", "noscript", "wrongtype" or "other").
func (s *Server) refusing(w http.ResponseWriter, err error) bool {
	var r interface{ Refused() bool }
	if !errors.As(err, &r) || !r.Refused() {
		return false
	}
	rd := readiness{Status: "degraded", Store: "refusing", Mode: s.cfg.StoreMode, StoreError: err.Error()}
	var c interface{ ErrorClass() string }
	if errors.As(err, &c) {
		rd.StoreErrorClass = c.ErrorClass()
	}
	var d interface{ StillDecides() bool }
	if s.cfg.ReadyRequiresStore || !errors.As(err, &d) || !d.StillDecides() {
		rd.Status, rd.Code = "unavailable", answer.StoreRefusing
		rd.Error = "the store answers and refuses: " + err.Error()
		writeJSON(w, http.StatusServiceUnavailable, rd)
		return true
	}
	writeJSON(w, http.StatusOK, rd)
	return true
}
