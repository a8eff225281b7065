package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeBlock is the first ```sh block of README.md after the line that
// holds after.
func readmeBlock(t *testing.T, after string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(raw), after)
	require.True(t, ok, "README.md has no line %q", after)
	_, rest, ok = strings.Cut(rest, "```sh\n")
	require.True(t, ok)
	block, _, ok := strings.Cut(rest, "```")
	require.True(t, ok)
	return block
}

// Issue 18, item 15: README's Try it works as written: its send block
// (openssl and curl) gets a 200 from the relay, again "duplicate":true,
// the event reaches the destination once, and the commands that follow
// say it was delivered.
func TestReadmeTryIt(t *testing.T) {
	t.Parallel()
	dest := newDestination(t)
	dest.accept.Store(true)
	r := startRelay(t, dest, nil)
	send := readmeBlock(t, "In a third, send an event:")
	require.Contains(t, send, "http://127.0.0.1:8080/webhooks/demo")
	send = strings.ReplaceAll(send, "http://127.0.0.1:8080", "http://"+r.cfg.Receiver.Listen)
	for _, want := range []string{`"duplicate":false`, `"duplicate":true`} {
		out, err := exec.Command("bash", "-euc", send).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), want)
	}
	require.Eventually(t, func() bool { return len(dest.posts()) == 1 }, testenv.Scaled(20*time.Second), 20*time.Millisecond)

	ask := readmeBlock(t, "Then ask the relay what happened to it:")
	var ran int
	for _, line := range strings.Split(strings.TrimSpace(ask), "\n") {
		line, _, _ = strings.Cut(line, "#")
		fields := strings.Fields(line)
		require.Equal(t, "bin/hookrelay", fields[0], line)
		var res result
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got := r.op.runFor(c, "", "hookrelay", fields[1:]...)
			require.Equal(c, 0, got.code, "%s: %v", line, got)
			if fields[1] == "events" {
				require.Contains(c, got.stdout, "billing:delivered(1)", "%s: %v", line, got)
			}
			res = got
		}, testenv.Scaled(10*time.Second), 50*time.Millisecond, line)
		if fields[1] == "routes" {
			require.Regexp(t, `billing\s+.*\s+active\s+4\s+0\s+-\n`, res.stdout)
		}
		ran++
	}
	require.Equal(t, 2, ran)
	require.Len(t, dest.posts(), 1, "the duplicate was not delivered")
}
