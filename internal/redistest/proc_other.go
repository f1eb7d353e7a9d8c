// Process attributes elsewhere than Linux: none (Stop ends the servers).

//go:build !linux

package redistest

import "syscall"

// procAttr: elsewhere the tests' Stop (and TestMain) stop the servers.
func procAttr() *syscall.SysProcAttr { return nil }
