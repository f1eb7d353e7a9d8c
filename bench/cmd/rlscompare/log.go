// Gubernator's logging, silenced for the measurement.

package main

import (
	"io"

	"github.com/sirupsen/logrus"
)

// quiet silences gubernator's logging during the measurement.
func quiet() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}
