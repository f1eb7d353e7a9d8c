// Command sluice is the sluice rate limiter's command-line program.
//
//	sluice                     replay worked vectors of docs/behaviour.md (demo)
//	sluice serve --config F    run the service (HTTP/JSON API, in memory)
//	sluice check F             validate a policy file (or --config F, or --envoy-config DIR); exit 1 with the errors
//	sluice simulate ...        replay a trace against a policy on virtual time, plot it
//	sluice bench --target U    load a running service on loopback; decisions/s and latency
//	sluice overrides set|get|list|delete|resolve --url U NAME KEY=VALUE...
//	                           a running service's overrides (/v1/overrides)
//	sluice healthcheck --url U GET U/healthz (--ready: /readyz); exit 0 healthy, 1 not
//	sluice version             the module version and VCS revision (also sluice --version)
//
// Every flag can also be set by an environment variable: serve's as
// SLUICE_<FLAG> (SLUICE_CONFIG, SLUICE_HTTP, ...), every other command's as
// SLUICE_<COMMAND>_<FLAG> (SLUICE_BENCH_GRPC, SLUICE_SIMULATE_MAX_WAIT,
// SLUICE_CHECK_CONFIG, ...), so that one command's variables never reach
// another. --help shows each flag's variable.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	_ "time/tzdata" // calendar quotas' zones, also in a container without a tz database

	"github.com/alecthomas/kong"
)

// version, when set at build time with -ldflags "-X main.version=v1.2.3",
// is printed instead of the module version of the build info.
var version string

// cli is the command line. Each command's envprefix names its flags'
// environment variables (see envars); a command without one has none.
type cli struct {
	VersionFlag kong.VersionFlag `name:"version" help:"Print the version and exit."`

	Demo      demoCmd      `cmd:"" default:"1" help:"Replay worked vectors of docs/behaviour.md sections 1 and 2 on a manual clock (the default)."`
	Serve     serveCmd     `cmd:"" envprefix:"SLUICE_" help:"Run the rate-limit service: HTTP/JSON API (and Envoy's RateLimitService over gRPC), state in memory or on Redis."`
	Check     checkCmd     `cmd:"" envprefix:"SLUICE_CHECK_" help:"Validate a policy file (or a directory of Envoy ratelimit config); exit 1 with the errors."`
	Simulate  simulateCmd  `cmd:"" envprefix:"SLUICE_SIMULATE_" help:"Replay a trace against a policy on virtual time; optionally plot and compare algorithms."`
	Bench     benchCmd     `cmd:"" envprefix:"SLUICE_BENCH_" help:"Load a running sluice service on this machine (loopback only) and report decisions/s and latency."`
	Top       topCmd       `cmd:"" envprefix:"SLUICE_TOP_" help:"Show the heaviest keys of a running service per limit (refused, or admitted cost), refreshing like top."`
	Overrides overridesCmd `cmd:"" envprefix:"SLUICE_OVERRIDES_" help:"Set, show, list, delete and resolve a running service's overrides (per-descriptor changes of a limit, deny, unlimited)."`
	Version   versionCmd   `cmd:"" help:"Print the module version and VCS revision."`
	Usage     usageCmd     `cmd:"" envprefix:"SLUICE_USAGE_" help:"Summarise a --usage-export file per limit and per key, descriptor or instance (table or --json)."`

	// A drop-in for envoyproxy/ratelimit (and its /bin/ratelimit).
	Ratelimit ratelimitCmd `cmd:"ratelimit" help:"Serve Envoy's RateLimitService configured as envoyproxy/ratelimit is, by its environment variables (REDIS_URL, RUNTIME_ROOT, CONFIG_TYPE...; docs/envoy.md)."`

	// For containers: a HEALTHCHECK without a shell.
	Healthcheck healthcheckCmd `cmd:"" envprefix:"SLUICE_HEALTHCHECK_" help:"GET a running service's /healthz (--ready: /readyz); exit 0 when it answers 200, else 1 (a container HEALTHCHECK without a shell)."`
}

type env struct {
	stdout, stderr io.Writer
	stdin          io.Reader
}

func main() { os.Exit(run(commandLine(os.Args), os.Stdin, os.Stdout, os.Stderr)) }

// exitCode carries kong's exit requests (after --help, or a usage error).
type exitCode int

// newParser builds the parser of c, writing help and usage to stdout and
// stderr; an exit kong asks for panics with an exitCode.
func newParser(c *cli, stdout, stderr io.Writer) (*kong.Kong, error) {
	return kong.New(c,
		kong.Name("sluice"),
		kong.Description("sluice: exact, fast rate limiting."),
		kong.Writers(stdout, stderr),
		kong.Exit(func(n int) { panic(exitCode(n)) }),
		kong.Vars{"version": "sluice " + versionString()},
		envars(),
		kong.UsageOnError(),
	)
}

// envars gives every flag without an env tag the environment variable
// <envprefix><FLAG> (--max-wait under envprefix SLUICE_BENCH_ reads
// SLUICE_BENCH_MAX_WAIT); env:"-" gives a flag none. A flag outside any
// envprefix (--help, --version) has none. It runs before kong interpolates
// help, so --help shows the names.
func envars() kong.Option {
	return kong.PostBuild(func(k *kong.Kong) error {
		return kong.Visit(k.Model, func(n kong.Visitable, next kong.Next) error {
			f, ok := n.(*kong.Flag)
			if !ok {
				return next(nil)
			}
			switch {
			case f.Tag.Get("env") == "-":
				f.Envs, f.Value.Tag.Envs = nil, nil
			case len(f.Envs) == 0 && f.Tag.EnvPrefix != "":
				name := f.Tag.EnvPrefix + strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(f.Name))
				f.Envs, f.Value.Tag.Envs = []string{name}, []string{name}
			}
			return next(nil)
		})
	})
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) (code int) {
	var c cli
	parser, err := newParser(&c, stdout, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "sluice:", err)
		return 2
	}
	defer func() {
		if r := recover(); r != nil {
			n, ok := r.(exitCode)
			if !ok {
				panic(r)
			}
			code = int(n)
		}
	}()
	ctx, err := parser.Parse(joinNegativeValues(parser.Model, args))
	if err != nil {
		fmt.Fprintln(stderr, "sluice:", err)
		return 2
	}
	if err := ctx.Run(&env{stdout: stdout, stderr: stderr, stdin: stdin}); err != nil {
		fmt.Fprintln(stderr, "sluice:", err)
		var ue usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}

// joinNegativeValues writes "--flag -1s" as "--flag=-1s" for every flag
// that takes a value (not a bool or a counter) when the next argument is
// a negative number or duration ("-" and a digit or "."): kong would read
// "-1s" as short flags and answer "expected duration value but got "-1s"
// (short flag)"; joined, the value reaches the flag's own range check, in
// either form. Arguments after "--" are left alone.
func joinNegativeValues(app *kong.Application, args []string) []string {
	takes := map[string]bool{}
	kong.Visit(app, func(n kong.Visitable, next kong.Next) error {
		if f, ok := n.(*kong.Flag); ok && !f.IsBool() && !f.IsCounter() {
			takes["--"+f.Name] = true
			for _, a := range f.Aliases {
				takes["--"+a] = true
			}
		}
		return next(nil)
	})
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if takes[a] && i+1 < len(args) && negative(args[i+1]) {
			out = append(out, a+"="+args[i+1])
			i++
			continue
		}
		out = append(out, a)
	}
	return out
}

// negative reports whether s reads as a negative number or duration: "-"
// then a digit or ".".
func negative(s string) bool {
	return len(s) > 1 && s[0] == '-' && (s[1] >= '0' && s[1] <= '9' || s[1] == '.')
}

// usageError is an error of a command's Run that is a usage error, exit
// status 2 like kong's: settings that cannot work, found before anything
// starts (serve's --store settings, a Redis refusing them).
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

type versionCmd struct{}

func (versionCmd) Run(e *env) error {
	fmt.Fprintln(e.stdout, "sluice", versionString())
	return nil
}

// versionString is this binary's version, e.g.
// "v0.0.0-20261201080000-abcdef123456 (revision abcdef123456, 2026-12-01T08:00:00Z, modified)":
// main.version if set at build time, else the main module's version from the
// build info ("(devel)" when it has none), then the VCS revision, its time
// and "modified" (uncommitted changes) when the build recorded them.
func versionString() string {
	bi, _ := debug.ReadBuildInfo()
	return formatVersion(version, withRevision(bi, revision))
}

// formatVersion is versionString of an -X main.version value and build info
// (nil: none).
func formatVersion(override string, bi *debug.BuildInfo) string {
	v := override
	if v == "" && bi != nil {
		v = bi.Main.Version
	}
	if v == "" {
		v = "(devel)"
	}
	if bi == nil {
		return v
	}
	var rev, at string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		if v == "(devel)" {
			// A local build outside a checkout, or with -buildvcs=false
			// (GOFLAGS): say so rather than print a bare "(devel)".
			return v + " (no VCS revision in the build info: build in a git checkout with -buildvcs=true)"
		}
		return v
	}
	details := []string{"revision " + rev[:min(len(rev), 12)]}
	if at != "" {
		details = append(details, at)
	}
	if modified {
		details = append(details, "modified")
	}
	return v + " (" + strings.Join(details, ", ") + ")"
}
