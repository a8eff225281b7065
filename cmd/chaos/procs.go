package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one receiver or dispatcher process of the relay under test.
type proc struct {
	name   string   // r1, d2, ...
	binary string   // path of receiver or dispatcher
	env    []string // HOOKRELAY_* on top of the config file
	listen string   // health and metrics address
	logDir string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	runs int
	down bool // killed or stopped on purpose, not started again yet
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.runs++
	p.down = false
	logPath := filepath.Join(p.logDir, fmt.Sprintf("%s.%d.log", p.name, p.runs))
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.binary)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() {
		err := cmd.Wait()
		logFile.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill() error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.down = true
	p.mu.Unlock()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing %s: %w", p.name, err)
	}
	<-done
	return nil
}

// stop sends SIGTERM and waits up to timeout for a clean exit.
func (p *proc) stop(timeout time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.down = true
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return nil // already gone; exited() reports how
	}
	select {
	case <-done:
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.err != nil {
			return fmt.Errorf("%s exited with %v after SIGTERM (log %s)", p.name, p.err, p.logPath())
		}
		return nil
	case <-time.After(timeout):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
		return fmt.Errorf("%s did not stop within %s of SIGTERM (log %s)", p.name, timeout, p.logPath())
	}
}

// exited reports an exit nobody asked for.
func (p *proc) exited() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil || p.down {
		return nil
	}
	select {
	case <-p.done:
		return fmt.Errorf("%s exited on its own: %v (log %s)", p.name, p.err, p.logPath())
	default:
		return nil
	}
}

func (p *proc) logPath() string {
	return filepath.Join(p.logDir, fmt.Sprintf("%s.%d.log", p.name, p.runs))
}

// waitHealthy waits until /healthz answers (the process is up; readiness
// may legitimately be 503 during a fault).
func (p *proc) waitHealthy(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	for {
		if err := p.exited(); err != nil {
			return err
		}
		resp, err := client.Get("http://" + p.listen + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not healthy after %s (log %s)", p.name, timeout, p.logPath())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond): // polling a process start
		}
	}
}

// metric sums the samples of a counter or gauge in the process's /metrics
// whose line holds each of labels (`reason="lost"`); 0 when absent. A
// process that does not answer is an error.
func (p *proc) metric(name string, labels ...string) (float64, error) {
	client := &http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get("http://" + p.listen + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return sumMetric(resp.Body, name, labels...)
}

// run is the number of the process's current run (1 for the first start).
func (p *proc) run() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs
}

func sumMetric(r io.Reader, name string, labels ...string) (float64, error) {
	var sum float64
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
lines:
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest != "" && rest[0] != '{' && rest[0] != ' ' {
			continue // a longer name with this prefix
		}
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				continue lines
			}
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("parsing %q: %w", line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}
