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
` + fastLua + `
local LIMB
local function limbs()
  if LIMB then return LIMB end
` + libLua + modelLua + limbpathLua + kindsLua + `
  LIMB = {bucket = limb_bucket, window = limb_window, book = limb_book, kinds = KIND, adjust = function(KEYS, ARGV)
    A = ARGV
` + adjustLua + `
  end}
  return LIMB
end
local FCACHE, FN = {}, 0 -- the double path's parsed specs, by spec id
local function take(KEYS, ARGV)
  A = ARGV
` + takeLua + `
end
return {take = take, adjust = function(KEYS, ARGV) return limbs().adjust(KEYS, ARGV) end}
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
	library  = "#!lua name=sluice_" + libVersion + "\n" + defineSrc + `
local IMPL
redis.register_function('` + takeFn + `', function(keys, args) IMPL = IMPL or define() return IMPL.take(keys, args) end)
redis.register_function('` + adjustFn + `', function(keys, args) IMPL = IMPL or define() return IMPL.adjust(keys, args) end)
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
// FUNCTION turns the store to scripts for good.
func (x *scripts) load(ctx context.Context) {
	x.loadMu.Lock()
	defer x.loadMu.Unlock()
	nodes := x.c.Nodes()
	if len(nodes) == 0 {
		nodes = map[string]rueidis.Client{"": x.c}
	}
	for _, n := range nodes {
		err := n.Do(ctx, n.B().FunctionLoad().FunctionCode(library).Build()).Error()
		if err != nil && isUnknownCommand(err) {
			x.noFuncs.Store(true)
			return
		}
	}
}

func isUnknownCommand(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "unknown command") || strings.Contains(msg, "unknown subcommand")
}

func isNoFunction(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Function not found")
}

// take runs take on keys and args.
func (x *scripts) take(ctx context.Context, keys, args []string) rueidis.RedisResult {
	if x.noFuncs.Load() {
		return x.takeLua.Exec(ctx, x.c, keys, args)
	}
	for attempt := 0; ; attempt++ {
		r := x.c.Do(ctx, x.c.B().Fcall().Function(takeFn).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build())
		if err := r.Error(); !isNoFunction(err) || attempt > 0 {
			if err != nil && isUnknownCommand(err) {
				x.noFuncs.Store(true)
				return x.takeLua.Exec(ctx, x.c, keys, args)
			}
			return r
		}
		x.load(ctx) // a new or restarted node: load the library, and call again
		if x.noFuncs.Load() {
			return x.takeLua.Exec(ctx, x.c, keys, args)
		}
	}
}

// adjust runs adjust once per exec (each exec's keys in one slot); an
// exec whose node lacked the library is sent again once it is loaded.
func (x *scripts) adjust(ctx context.Context, execs []rueidis.LuaExec) []rueidis.RedisResult {
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
	if !x.noFuncs.Load() {
		x.load(ctx)
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
	}
	return rs
}

func (x *scripts) fcallAdjust(e rueidis.LuaExec) rueidis.Completed {
	return x.c.B().Fcall().Function(adjustFn).Numkeys(int64(len(e.Keys))).Key(e.Keys...).Arg(e.Args...).Build()
}
