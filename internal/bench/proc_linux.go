package bench

import "syscall"

// sysProcAttr puts a child in a process group of its own, so that a Ctrl-C
// in the terminal reaches only the benchmark, which then stops its children
// in order; and has the kernel send it SIGTERM should the benchmark die
// without doing so.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
