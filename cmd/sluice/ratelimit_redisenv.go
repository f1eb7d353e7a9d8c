// sluice ratelimit's check of envoyproxy/ratelimit's REDIS_* variables at start, whatever the store.

package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// rlVarKind is how the reference's settings (envconfig) parse a variable:
// a value that does not parse as its bool, whole number or duration stops
// the reference's start, whichever backend it uses; rlEnum values are
// checked when its Redis client is made, which it always makes.
type rlVarKind int

const (
	rlString rlVarKind = iota
	rlBool
	rlInt
	rlDuration
	rlEnum
)

// rlRedisVar is one of the reference's REDIS_* variables. read: sluice
// acts on it when REDIS_URL is set (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION,
// read by rlSettings, whatever the store); otherwise sluice ignores it.
// values are an rlEnum's values, lower case.
type rlRedisVar struct {
	name   string
	kind   rlVarKind
	read   bool
	values []string
}

// rlRedisVars are the reference's REDIS_* settings (src/settings/settings.go).
var rlRedisVars = []rlRedisVar{
	{name: "REDIS_SOCKET_TYPE", kind: rlEnum, read: true, values: []string{"tcp", "unix"}},
	{name: "REDIS_TYPE", kind: rlEnum, read: true, values: []string{"single", "cluster", "sentinel"}},
	{name: "REDIS_POOL_SIZE", kind: rlInt, read: true},
	{name: "REDIS_AUTH", kind: rlString, read: true},
	{name: "REDIS_TLS", kind: rlBool, read: true},
	{name: "REDIS_TLS_CLIENT_CERT", kind: rlString, read: true},
	{name: "REDIS_TLS_CLIENT_KEY", kind: rlString, read: true},
	{name: "REDIS_TLS_CACERT", kind: rlString, read: true},
	{name: "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", kind: rlBool, read: true},
	{name: "REDIS_PERSECOND", kind: rlBool, read: true},
	{name: "REDIS_TIMEOUT", kind: rlDuration, read: true},
	{name: "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", kind: rlBool, read: true},
	{name: "REDIS_PIPELINE_WINDOW", kind: rlDuration},
	{name: "REDIS_PIPELINE_LIMIT", kind: rlInt},
	{name: "REDIS_CLUSTER_PIPELINE_PARALLELISM", kind: rlInt},
	{name: "REDIS_PERSECOND_SOCKET_TYPE", kind: rlEnum, values: []string{"tcp", "unix"}},
	{name: "REDIS_PERSECOND_TYPE", kind: rlEnum, values: []string{"single", "cluster", "sentinel"}},
	{name: "REDIS_PERSECOND_URL", kind: rlString},
	{name: "REDIS_PERSECOND_POOL_SIZE", kind: rlInt},
	{name: "REDIS_PERSECOND_AUTH", kind: rlString},
	{name: "REDIS_PERSECOND_TLS", kind: rlBool},
	{name: "REDIS_SENTINEL_AUTH", kind: rlString},
	{name: "REDIS_PERSECOND_SENTINEL_AUTH", kind: rlString},
	{name: "REDIS_PERSECOND_PIPELINE_WINDOW", kind: rlDuration},
	{name: "REDIS_PERSECOND_PIPELINE_LIMIT", kind: rlInt},
	{name: "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", kind: rlInt},
	{name: "REDIS_PERSECOND_TIMEOUT", kind: rlDuration},
	{name: "REDIS_POOL_ON_EMPTY_BEHAVIOR", kind: rlString},
	{name: "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", kind: rlString},
	{name: "REDIS_STARTUP_INITIAL_INTERVAL", kind: rlDuration},
	{name: "REDIS_STARTUP_MAX_INTERVAL", kind: rlDuration},
	{name: "REDIS_STARTUP_MAX_ELAPSED_TIME", kind: rlDuration},
}

// bad says why the reference refuses value for v ("" when it takes it).
func (v rlRedisVar) bad(value string) string {
	switch v.kind {
	case rlBool:
		if _, err := strconv.ParseBool(value); err != nil {
			return "not true or false"
		}
	case rlInt:
		if _, err := strconv.ParseInt(value, 0, 64); err != nil {
			return "not a whole number"
		}
	case rlDuration:
		if _, err := time.ParseDuration(value); err != nil {
			return "not a duration (10s, 1m...)"
		}
	case rlEnum:
		if !slices.Contains(v.values, strings.ToLower(value)) {
			return "not " + strings.Join(v.values, ", ")
		}
	}
	return ""
}

// rlWarning is a variable set that sluice does not act on: logged at start
// (loadRatelimit), with the variable's name and why, never its value.
type rlWarning struct {
	variable, reason string
}

// checkRedisEnv checks the REDIS_* variables whether or not REDIS_URL is
// set (redis): a value the reference refuses (above) stops the start,
// naming the variable, when sluice reads the variable; for one sluice
// ignores it is a warning, since sluice would not act on it anyway.
// Without REDIS_URL (sluice's memory store) a variable sluice reads only
// with Redis that is set (a bool to true) is a warning too: not in effect.
// With REDIS_URL, readStore checks the values of those it reads (but
// REDIS_POOL_SIZE's kind, here), and ratelimitServe reads
// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION whatever the store.
func (rs *rlSettings) checkRedisEnv(r *envReader, redis bool) {
	for _, v := range rlRedisVars {
		value := r.get(v.name)
		if value == "" || v.name == "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION" || redis && v.read && v.name != "REDIS_POOL_SIZE" {
			continue
		}
		why := v.bad(value)
		switch {
		case why != "" && v.read:
			r.errs = append(r.errs, fmt.Errorf("%s=%q: %s (the reference refuses it too)", v.name, value, why))
		case why != "" && !v.read:
			rs.warnings = append(rs.warnings, rlWarning{v.name, why + ", which stops the reference's start; sluice ignores " + v.name})
		case why == "" && v.read && !redis:
			if b, err := strconv.ParseBool(value); v.kind == rlBool && err == nil && !b {
				continue // (false asks for nothing)
			}
			rs.warnings = append(rs.warnings, rlWarning{v.name, "set, but REDIS_URL is not: sluice keeps its state in memory (one instance's), and " + v.name + " has no effect"})
		}
	}
}
