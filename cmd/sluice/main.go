// Command sluice is the sluice rate limiter's command-line program.
//
//	sluice                     replay worked vectors of docs/behaviour.md (demo)
//	sluice serve --config F    run the service (HTTP/JSON API, in memory)
//	sluice check --config F    validate a policy file; non-zero exit with the errors
//	sluice simulate ...        replay a trace against a policy on virtual time, plot it
//	sluice bench --target U    load a running service on loopback; decisions/s and latency
//	sluice version
//
// Every flag can also be set by an environment variable (SLUICE_<FLAG>).
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/alecthomas/kong"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

type cli struct {
	Demo     demoCmd     `cmd:"" default:"1" help:"Replay worked vectors of docs/behaviour.md sections 1 and 2 on a manual clock (the default)."`
	Serve    serveCmd    `cmd:"" help:"Run the rate-limit service (HTTP/JSON API, in memory)."`
	Check    checkCmd    `cmd:"" help:"Validate a policy file; exit 1 with the errors."`
	Simulate simulateCmd `cmd:"" help:"Replay a trace against a policy on virtual time; optionally plot and compare algorithms."`
	Bench    benchCmd    `cmd:"" help:"Load a running sluice service on this machine (loopback only) and report decisions/s and latency."`
	Version  versionCmd  `cmd:"" help:"Print the version."`
}

type env struct {
	stdout, stderr io.Writer
	stdin          io.Reader
}

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }

// exitCode carries kong's exit requests (after --help, or a usage error).
type exitCode int

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) (code int) {
	var c cli
	parser, err := kong.New(&c,
		kong.Name("sluice"),
		kong.Description("sluice: exact, fast rate limiting."),
		kong.Writers(stdout, stderr),
		kong.Exit(func(n int) { panic(exitCode(n)) }),
		kong.DefaultEnvars("SLUICE"),
		kong.UsageOnError(),
	)
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
	ctx, err := parser.Parse(args)
	if err != nil {
		fmt.Fprintln(stderr, "sluice:", err)
		return 2
	}
	if err := ctx.Run(&env{stdout: stdout, stderr: stderr, stdin: stdin}); err != nil {
		fmt.Fprintln(stderr, "sluice:", err)
		return 1
	}
	return 0
}

type versionCmd struct{}

func (versionCmd) Run(e *env) error {
	fmt.Fprintln(e.stdout, "sluice", version)
	return nil
}
