//go:build !linux

package store

import (
	"syscall"
	"time"
)

// setUserTimeout does nothing where TCP_USER_TIMEOUT does not exist; the
// keepalive settings still apply.
func setUserTimeout(syscall.RawConn, time.Duration) error { return nil }
