// Package yamlmsg turns a YAML parser's syntax error into a line and a
// message, for the errors of the files sluice reads (policies, Envoy
// configurations), each of which states it in its own error type.
package yamlmsg

import (
	"strconv"
	"strings"
)

// Split returns the line of a "yaml: line N: ..." error and the rest of
// its message, "YAML: "-prefixed; line is 0 when the error names none.
func Split(err error) (line int, msg string) {
	msg = strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, tail, ok := strings.Cut(rest, ":"); ok {
			if l, err := strconv.Atoi(n); err == nil {
				line, msg = l, strings.TrimSpace(tail)
			}
		}
	}
	return line, "YAML: " + msg
}
