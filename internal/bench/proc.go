package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one child of the benchmark: a receiver, a dispatcher, or one
// of its own roles. Its stdout (after the readiness line) and stderr go to
// a log file in the work folder.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited

	mu       sync.Mutex
	err      error // what Wait returned
	stopping bool  // stop was called: an exit is expected
}

// procs starts and tracks the children of one run.
type procs struct {
	logDir string

	mu   sync.Mutex
	runs map[string]int
	live []*process
	// env is added to the children's environment (--tracing).
	env []string
}

// setEnv adds env to the environment of the children started from now on.
func (ps *procs) setEnv(env []string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.env = env
}

func newProcs(logDir string) *procs { return &procs{logDir: logDir, runs: map[string]int{}} }

// start runs exe with args. When announce is set, it waits up to timeout for
// the child's first stdout line and returns it (a child role prints "ready
// <addr>").
func (ps *procs) start(ctx context.Context, name, exe string, args []string, announce bool, timeout time.Duration) (*process, string, error) {
	ps.mu.Lock()
	ps.runs[name]++
	logPath := filepath.Join(ps.logDir, fmt.Sprintf("%s.%d.log", name, ps.runs[name]))
	extra := ps.env
	ps.mu.Unlock()
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, "", fmt.Errorf("creating log for %s: %w", name, err)
	}
	defer logFile.Close() // the child and the copier hold their own descriptors
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, "", fmt.Errorf("creating pipe for %s: %w", name, err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(childEnv(), extra...)
	cmd.Stdout, cmd.Stderr = pw, logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return nil, "", fmt.Errorf("starting %s (%s): %w", name, exe, err)
	}
	pw.Close()
	p := &process{name: name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	ps.mu.Lock()
	ps.live = append(ps.live, p)
	ps.mu.Unlock()

	lines := make(chan string, 1)
	copyLog, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		_ = p.stop(5 * time.Second)
		return nil, "", fmt.Errorf("opening log for %s: %w", name, err)
	}
	go func() {
		defer pr.Close()
		defer copyLog.Close()
		br := bufio.NewReader(pr)
		if announce {
			line, err := br.ReadString('\n')
			if err == nil {
				lines <- strings.TrimSpace(line)
			}
			close(lines)
		}
		_, _ = io.Copy(copyLog, br) // best effort: the log is for people
	}()
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	if !announce {
		return p, "", nil
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case line, ok := <-lines:
		if ok {
			return p, line, nil
		}
		<-p.done
		return nil, "", fmt.Errorf("%s exited before it was ready: %v (log %s)", name, p.exitErr(), logPath)
	case <-p.done:
		return nil, "", fmt.Errorf("%s exited before it was ready: %v (log %s)", name, p.exitErr(), logPath)
	case <-t.C:
		_ = p.stop(5 * time.Second)
		return nil, "", fmt.Errorf("%s not ready after %s (log %s)", name, timeout, logPath)
	case <-ctx.Done():
		_ = p.stop(5 * time.Second)
		return nil, "", ctx.Err()
	}
}

// childEnv is the benchmark's environment without HOOKRELAY_* variables:
// they override config keys, and one left in a developer's shell (a
// database.url) would point the receiver under test at a real database.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOOKRELAY_") {
			env = append(env, kv)
		}
	}
	return env
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		return errors.New("exit status 0")
	}
	return p.err
}

// exited returns an error when the process ended without being asked to.
func (p *process) exited() error {
	select {
	case <-p.done:
	default:
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping {
		return nil
	}
	return fmt.Errorf("%s exited on its own: %v (log %s)", p.name, p.exitErrLocked(), p.logPath)
}

func (p *process) exitErrLocked() error {
	if p.err == nil {
		return errors.New("exit status 0")
	}
	return p.err
}

// stop sends SIGTERM and waits up to timeout for the exit, then kills. It
// returns an error when the process did not exit cleanly.
func (p *process) stop(timeout time.Duration) error {
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
	select {
	case <-p.done:
	default:
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("stopping %s: %w", p.name, err)
		}
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-p.done:
		case <-t.C:
			_ = p.cmd.Process.Kill()
			<-p.done
			return fmt.Errorf("%s did not stop within %s of SIGTERM, killed (log %s)", p.name, timeout, p.logPath)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return fmt.Errorf("%s exited with %v (log %s)", p.name, p.err, p.logPath)
	}
	return nil
}

// stopAll stops every child still running, in reverse order of start.
func (ps *procs) stopAll(timeout time.Duration) error {
	ps.mu.Lock()
	live := ps.live
	ps.live = nil
	ps.mu.Unlock()
	var errs []error
	for i := len(live) - 1; i >= 0; i-- {
		select {
		case <-live[i].done:
			continue // stopped already, and reported then
		default:
		}
		if err := live[i].stop(timeout); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// waitReady polls url until it answers 200, the process exits, or timeout
// passes.
func waitReady(ctx context.Context, p *process, url string, timeout time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last := errors.New("no answer yet")
	for {
		if err := p.exited(); err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Errorf("HTTP %d", resp.StatusCode)
		} else {
			last = err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s (%s: %v; log %s)", p.name, timeout, url, last, p.logPath)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
