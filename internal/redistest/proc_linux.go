// Process attributes on Linux: a server dies with the test process.
package redistest

import "syscall"

// procAttr makes the kernel kill the server when the test process dies.
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
