package main

import (
	"fmt"
	"os"
	"testing"
)

// The suite's Postgres listens on a fixed port. Inside the kernel's
// ephemeral range, an outgoing connection (one of the many the cluster's
// nodes and tools open) can hold that port at the moment Postgres starts,
// and the suite fails with "could not bind ... Address already in use".
func TestDefaultPGPortIsNotEphemeral(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skip("no ephemeral port range to check against:", err)
	}
	var low, high int
	if _, err := fmt.Sscan(string(raw), &low, &high); err != nil {
		t.Fatalf("reading the ephemeral port range %q: %v", raw, err)
	}
	if defaultPGPort+1 >= low && defaultPGPort <= high { // the primary and its replica on the next port
		t.Fatalf("the default --pg-port %d (or the replica's, one above) is inside the ephemeral port range %d-%d", defaultPGPort, low, high)
	}
}
