// The command line main runs: invoked as "ratelimit" (the image's /bin/ratelimit), sluice is `sluice ratelimit`.

package main

import "path/filepath"

// argv0Commands are the names under which the binary runs one command:
// invoked through a link of that name, the command line is the command
// followed by every argument. The container image's /bin/ratelimit, a
// symlink to /sluice, runs `sluice ratelimit`, as envoyproxy/ratelimit's
// image runs its /bin/ratelimit (Envoy Gateway starts that path).
var argv0Commands = map[string]string{"ratelimit": "ratelimit"}

// commandLine is the command line run parses for argv (os.Args): argv[1:],
// after the command argv[0]'s base name stands for, if any.
func commandLine(argv []string) []string {
	if len(argv) == 0 {
		return nil
	}
	if cmd, ok := argv0Commands[filepath.Base(argv[0])]; ok {
		return append([]string{cmd}, argv[1:]...)
	}
	return argv[1:]
}
