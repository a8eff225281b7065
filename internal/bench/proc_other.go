//go:build !linux

package bench

import "syscall"

// sysProcAttr: the benchmark measures from /proc and runs on Linux only;
// elsewhere checkProc stops it before any child starts.
func sysProcAttr() *syscall.SysProcAttr { return nil }
