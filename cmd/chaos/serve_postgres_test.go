package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestSettingFlagRejectsShellText(t *testing.T) {
	t.Parallel()
	var s settingsFlag
	require.NoError(t, s.Set("shared_preload_libraries=pg_stat_statements"))
	require.NoError(t, s.Set("pg_stat_statements.track=top"))
	for _, bad := range []string{"fsync", "a=b c", "a='b'", "a=b;rm", "=x"} {
		require.Error(t, s.Set(bad), bad)
	}
}

// `chaos postgres` (for scripts/profile.sh): a scratch Postgres with the
// given settings instead of the suite's, announced with its URL, stopped
// when the context ends.
func TestServePostgres(t *testing.T) {
	t.Parallel()
	if _, err := findPostgresBin(); err != nil {
		t.Skip(err)
	}
	// A free port below the ephemeral range is not guaranteed; take one
	// the kernel hands out and release it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())

	tmp := t.TempDir()
	work := filepath.Join(tmp, "pg")
	// Postgres runs as the postgres user below it when we are root.
	require.NoError(t, os.Chmod(tmp, 0o755))
	require.NoError(t, os.Chmod(filepath.Dir(tmp), 0o755))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- servePostgres(ctx, []string{"--work", work, "--pg-port", itoa(port),
			"--setting", "shared_preload_libraries=pg_stat_statements", "--setting", "max_connections=37"}, pw)
		pw.Close()
	}()
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var url string
	select {
	case line := <-lines:
		var ok bool
		url, ok = strings.CutPrefix(line, "ready ")
		require.True(t, ok, "announced %q", line)
	case err := <-done:
		t.Fatalf("exited before ready: %v", err)
	case <-time.After(testenv.Scaled(90 * time.Second)):
		t.Fatal("not ready within 90s")
	}
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	var preload, maxConns, fsync string
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT current_setting('shared_preload_libraries'), current_setting('max_connections'), current_setting('fsync')`).Scan(&preload, &maxConns, &fsync))
	require.NoError(t, conn.Close(context.Background()))
	require.Equal(t, "pg_stat_statements", preload)
	require.Equal(t, "37", maxConns)
	require.Equal(t, "on", fsync, "not the suite's fsync=off")

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(testenv.Scaled(90 * time.Second)):
		t.Fatal("not stopped within 90s")
	}
	_, err = pgx.Connect(context.Background(), url)
	require.Error(t, err, "the server is stopped")
}

func itoa(n int) string { return strconv.Itoa(n) }
