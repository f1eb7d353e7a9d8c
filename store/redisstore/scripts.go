// The Redis store's Lua code and how it is loaded (a function library, else scripts).

package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/rueidis"
)

// The Lua code: the double path, the limb model (defined only when a call
// needs it: most decisions never do), and the two entry points, take and
// adjust, all inside define(), which returns them. Redis runs it either as
// a function library (FUNCTION LOAD once; each FCALL runs only the entry
// point, and what define() sets up, such as the parsed-spec cache, lives
// as long as the library) or, where Redis has no functions (before 7.0),
// as scripts (EVALSHA), which run define() on every call.
var defineSrc = `local function define()
local A -- the current call's arguments, for the limb model
local RSV -- the current request's priority-class reserve (parts per million), or nil
` + fastLua + `
local LIMB
local function limbs()
  if LIMB then return LIMB end
` + libLua + modelLua + limbpathLua + kindsLua + fairshareLua + `
  LIMB = {rsvn = function(x) return tonum(rsv(num(x))) end, bucket = limb_bucket, window = limb_window, book = limb_book, respec = limb_respec, kinds = KIND,
    fstouch = fs_touch, fsdecide = fs_decide, fsadmit = fs_admit, fsttl = fs_ttl, adjust = function(KEYS, ARGV, OOM)
    A = ARGV
` + adjustLua + `
  end}
  return LIMB
end
local FCACHE, FN = {}, 0 -- the double path's parsed specs, by spec id
local function take(KEYS, ARGV, OOM)
  A = ARGV
` + takeLua + `
end
return {take = take, adjust = function(KEYS, ARGV, OOM) return limbs().adjust(KEYS, ARGV, OOM) end}
end
`

// libVersion names the library after its code, so that instances running
// different versions of sluice on one Redis each call their own.
var libVersion = func() string {
	sum := sha256.Sum256([]byte(defineSrc))
	return hex.EncodeToString(sum[:6])
}()

var (
	takeFn   = "sluice_take_" + libVersion
	adjustFn = "sluice_adjust_" + libVersion
	// The allow-oom entry points, called after Redis answered OOM: they
	// run at maxmemory, and refuse what would create a key.
	takeOOMFn   = "sluice_take_oom_" + libVersion
	adjustOOMFn = "sluice_adjust_oom_" + libVersion
	library     = "#!lua name=sluice_" + libVersion + "\n" + defineSrc + `
local IMPL
redis.register_function('` + takeFn + `', function(keys, args) IMPL = IMPL or define() return IMPL.take(keys, args) end)
redis.register_function('` + adjustFn + `', function(keys, args) IMPL = IMPL or define() return IMPL.adjust(keys, args) end)
redis.register_function{function_name = '` + takeOOMFn + `', flags = {'allow-oom'},
  callback = function(keys, args) IMPL = IMPL or define() return IMPL.take(keys, args, true) end}
redis.register_function{function_name = '` + adjustOOMFn + `', flags = {'allow-oom'},
  callback = function(keys, args) IMPL = IMPL or define() return IMPL.adjust(keys, args, true) end}
`
	takeScript   = defineSrc + "return define().take(KEYS, ARGV)\n"
	adjustScript = defineSrc + "return define().adjust(KEYS, ARGV)\n"
)

// scripts calls take and adjust: as functions where Redis has them, else
// as scripts.
type scripts struct {
	c         rueidis.Client
	noFuncs   atomic.Bool // Redis has no FUNCTION command: scripts only
	loadMu    sync.Mutex
	takeLua   *rueidis.Lua
	adjustLua *rueidis.Lua
}

func newScripts(c rueidis.Client) *scripts {
	return &scripts{c: c, takeLua: rueidis.NewLuaScript(takeScript), adjustLua: rueidis.NewLuaScript(adjustScript)}
}

// load sends the library to every node that takes it (a cluster's
// replicas refuse writes and get it from their masters). A Redis without
// FUNCTION turns the store to scripts for good. When no node took it and
// one refused it as a replica (READONLY) or at maxmemory (OOM), that
// refusal is returned: it, not the missing library, is what a caller
// must be told.
func (x *scripts) load(ctx context.Context) error {
	x.loadMu.Lock()
	defer x.loadMu.Unlock()
	nodes := x.c.Nodes()
	if len(nodes) == 0 {
		nodes = map[string]rueidis.Client{"": x.c}
	}
	var refused error
	took := false
	for _, n := range nodes {
		err := n.Do(ctx, n.B().FunctionLoad().FunctionCode(library).Build()).Error()
		if err != nil && isUnknownCommand(err) {
			x.noFuncs.Store(true)
			return nil
		}
		switch c := Classify(err); {
		case err == nil || strings.Contains(err.Error(), "already exists"):
			took = true
		case c == ClassReadonly || c == ClassOOM:
			refused = err
		}
	}
	if took {
		return nil
	}
	return refused
}

func isUnknownCommand(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "unknown command") || strings.Contains(msg, "unknown subcommand")
}

func isNoFunction(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Function not found")
}

// take runs take on keys and args. When Redis answers OOM (at maxmemory
// under noeviction), the call is sent again to the allow-oom entry point,
// which decides the requests on existing keys and refuses (3) those that
// would create one; with scripts only (Redis before 7.0) the OOM stands.
func (x *scripts) take(ctx context.Context, keys, args []string) rueidis.RedisResult {
	r := x.take1(ctx, keys, args)
	if Classify(r.Error()) == ClassOOM && !x.noFuncs.Load() {
		r2 := x.c.Do(ctx, x.c.B().Fcall().Function(takeOOMFn).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
		if !isNoFunction(r2.Error()) { // (no library, and none loads at OOM: the OOM stands)
			r = r2
		}
	}
	return r
}

func (x *scripts) take1(ctx context.Context, keys, args []string) rueidis.RedisResult {
	if x.noFuncs.Load() {
		return x.takeLua.Exec(ctx, x.c, keys, args)
	}
	var loadErr error
	for attempt := 0; ; attempt++ {
		r := x.c.Do(ctx, x.c.B().Fcall().Function(takeFn).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
		if err := r.Error(); !isNoFunction(err) || attempt > 0 {
			if err != nil && isUnknownCommand(err) {
				x.noFuncs.Store(true)
				return x.takeLua.Exec(ctx, x.c, keys, args)
			}
			if loadErr != nil && isNoFunction(err) {
				return rueidis.NewErrorResult(loadErr)
			}
			return r
		}
		loadErr = x.load(ctx) // a new or restarted node: load the library, and call again
		if x.noFuncs.Load() {
			return x.takeLua.Exec(ctx, x.c, keys, args)
		}
	}
}

// adjust1 runs adjust once per exec (each exec's keys in one slot); an
// exec whose node lacked the library is sent again once it is loaded.
func (x *scripts) adjust1(ctx context.Context, execs []rueidis.LuaExec) []rueidis.RedisResult {
	if x.noFuncs.Load() {
		return x.adjustLua.ExecMulti(ctx, x.c, execs...)
	}
	cmds := make(rueidis.Commands, len(execs))
	for i, e := range execs {
		cmds[i] = x.fcallAdjust(e)
	}
	rs := x.c.DoMulti(ctx, cmds...)
	var again []int
	for i, r := range rs {
		if err := r.Error(); isNoFunction(err) {
			again = append(again, i)
		} else if err != nil && isUnknownCommand(err) {
			x.noFuncs.Store(true)
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return rs
	}
	var loadErr error
	if !x.noFuncs.Load() {
		loadErr = x.load(ctx)
	}
	retry := make([]rueidis.LuaExec, len(again))
	for j, i := range again {
		retry[j] = execs[i]
	}
	var rs2 []rueidis.RedisResult
	if x.noFuncs.Load() {
		rs2 = x.adjustLua.ExecMulti(ctx, x.c, retry...)
	} else {
		cmds := make(rueidis.Commands, len(retry))
		for j, e := range retry {
			cmds[j] = x.fcallAdjust(e)
		}
		rs2 = x.c.DoMulti(ctx, cmds...)
	}
	for j, i := range again {
		rs[i] = rs2[j]
		if loadErr != nil && isNoFunction(rs2[j].Error()) {
			rs[i] = rueidis.NewErrorResult(loadErr)
		}
	}
	return rs
}

// adjust runs adjust once per exec, as adjust1; an exec answered OOM is
// sent again to the allow-oom entry point (which answers 0, writing
// nothing, when it would create a key).
func (x *scripts) adjust(ctx context.Context, execs []rueidis.LuaExec) []rueidis.RedisResult {
	rs := x.adjust1(ctx, execs)
	if x.noFuncs.Load() {
		return rs
	}
	for i, r := range rs {
		if Classify(r.Error()) == ClassOOM {
			e := execs[i]
			r2 := x.c.Do(ctx, x.c.B().Fcall().Function(adjustOOMFn).Numkeys(int64(len(e.Keys))).Key(e.Keys...).Arg(e.Args...).Build())
			if !isNoFunction(r2.Error()) {
				rs[i] = r2
			}
		}
	}
	return rs
}

func (x *scripts) fcallAdjust(e rueidis.LuaExec) rueidis.Completed {
	return x.c.B().Fcall().Function(adjustFn).Numkeys(int64(len(e.Keys))).Key(e.Keys...).Arg(e.Args...).Build()
}
