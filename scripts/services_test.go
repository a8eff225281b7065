// Package scripts tests the shell scripts that set up a machine.
package scripts

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// shims are stand-ins for the commands services.sh runs, over a state
// directory: a fresh Debian-like machine whose PostgreSQL refuses the URL's
// password, whose database does not exist, and whose RabbitMQ has only the
// management plugin. Each logs its call; a call that changes the machine
// is logged as "EXEC(change)".
var shims = map[string]string{
	"pg_isready":           `exit 0`,
	"rabbitmq-diagnostics": `exit 0`,
	"curl":                 `exit 0`,
	"psql": `
if [[ " $* " == *" select 1"* || " $* " == *"-Atc select 1"* ]]; then
	[[ -f "$STATE/password" ]] && { echo 1; exit 0; }
	echo 'psql: error: FATAL:  password authentication failed for user "hr"' >&2; exit 2
fi
in="$(cat)"
case "$in" in
*"ALTER ROLE"*) echo "EXEC(change): psql ALTER ROLE" >>"$SHIM_LOG"; touch "$STATE/password" ;;
*"CREATE DATABASE"*) echo "EXEC(change): psql CREATE DATABASE" >>"$SHIM_LOG"; touch "$STATE/database" ;;
*"FROM pg_database"*) [[ -f "$STATE/database" ]] && echo 1 ;;
esac
exit 0`,
	"rabbitmq-plugins": `
case " $* " in
*" list "*) echo rabbitmq_management; [[ -f "$STATE/plugins" ]] && printf 'rabbitmq_shovel\nrabbitmq_shovel_management\n' ;;
*" enable "*) echo "EXEC(change): rabbitmq-plugins $*" >>"$SHIM_LOG"; touch "$STATE/plugins" ;;
esac
exit 0`,
	"runuser":       `while [[ $# -gt 0 && "$1" != -- ]]; do shift; done; shift; exec "$@"`,
	"sudo":          `while [[ $# -gt 0 && "$1" != -- ]]; do shift; done; shift; exec "$@"`,
	"apt-get":       `echo "EXEC(change): apt-get $*" >>"$SHIM_LOG"`,
	"pg_lsclusters": `echo "EXEC: pg_lsclusters" >>"$SHIM_LOG"`,
}

type machine struct {
	dir, state, log string
}

func newMachine(t *testing.T) *machine {
	t.Helper()
	m := &machine{dir: t.TempDir()}
	m.state, m.log = filepath.Join(m.dir, "state"), filepath.Join(m.dir, "log")
	bin := filepath.Join(m.dir, "bin")
	require.NoError(t, os.MkdirAll(bin, 0o755))
	require.NoError(t, os.MkdirAll(m.state, 0o755))
	for name, body := range shims {
		require.NoError(t, os.WriteFile(filepath.Join(bin, name), []byte("#!/usr/bin/env bash\n"+body+"\n"), 0o755))
	}
	return m
}

// run runs services.sh with args on the machine, its stderr appended to
// the log the shims write (both append, so the order holds), and returns
// its exit code and what this run added to the log.
func (m *machine) run(t *testing.T, args ...string) (int, string) {
	t.Helper()
	before, _ := os.ReadFile(m.log)
	f, err := os.OpenFile(m.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	require.NoError(t, err)
	defer f.Close()
	cmd := exec.Command("bash", append([]string{"services.sh"}, args...)...)
	cmd.Env = []string{
		"PATH=" + filepath.Join(m.dir, "bin") + ":" + os.Getenv("PATH"),
		"STATE=" + m.state, "SHIM_LOG=" + m.log, "SERVICES_WAIT_SECONDS=5",
		"HOOKRELAY_DATABASE_URL=postgres://hr:s3cret-pw@127.0.0.1:5432/hrdb?sslmode=disable",
	}
	cmd.Stdout, cmd.Stderr = f, f
	code := 0
	var exit *exec.ExitError
	if err := cmd.Run(); errors.As(err, &exit) {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	after, err := os.ReadFile(m.log)
	require.NoError(t, err)
	return code, string(bytes.TrimPrefix(after, before))
}

// Issue 18, item 14: services.sh says each change to the machine before
// making it (plugins, a role's password, a database), lists them at the
// end, never prints the password, changes nothing on a second run, and
// --check says the first change it would make and makes none.
func TestServicesSayEachChangeBeforeMakingIt(t *testing.T) {
	m := newMachine(t)
	code, out := m.run(t, "--check")
	t.Log("\n" + out)
	require.Equal(t, 3, code)
	require.Contains(t, out, "services: would change: enable RabbitMQ plugins rabbitmq_shovel rabbitmq_shovel_management")
	require.NotContains(t, out, "EXEC(change)", "--check changes nothing")

	code, out = m.run(t)
	t.Log("\n" + out)
	require.Equal(t, 0, code)
	require.NotContains(t, out, "s3cret-pw", "the password is never printed")
	var announced []string // CHANGE lines not yet followed by a change
	var made []string
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "services: CHANGE: "):
			announced = append(announced, strings.TrimPrefix(line, "services: CHANGE: "))
		case strings.HasPrefix(line, "EXEC(change): "):
			require.NotEmpty(t, announced, "%q was not announced before it was made:\n%s", line, out)
			made = append(made, announced[0]+" => "+line)
			announced = announced[1:]
		}
	}
	require.Empty(t, announced, "announced changes that were not made")
	require.Len(t, made, 3)
	require.Regexp(t, `^enable RabbitMQ plugins rabbitmq_shovel rabbitmq_shovel_management .* => EXEC\(change\): rabbitmq-plugins .*enable rabbitmq_shovel rabbitmq_shovel_management$`, made[0])
	require.Regexp(t, `^set the password of PostgreSQL role 'hr' .*ALTER ROLE.* => EXEC\(change\): psql ALTER ROLE$`, made[1])
	require.Regexp(t, `^create database 'hrdb' .* => EXEC\(change\): psql CREATE DATABASE$`, made[2])
	require.Regexp(t, regexp.MustCompile(`services: made 3 change\(s\) on this machine:\n(services:   - .*\n){3}`), out)

	code, out = m.run(t)
	require.Equal(t, 0, code, out)
	require.NotContains(t, out, "CHANGE")
	require.NotContains(t, out, "EXEC(change)")
	require.Contains(t, out, "services: changed nothing on this machine")
	code, out = m.run(t, "--check")
	require.Equal(t, 0, code, out)
}
