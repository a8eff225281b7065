package app_test

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/testenv"
	"github.com/stretchr/testify/require"
)

// configFile writes cfg as a config file the binaries load and returns its
// path. Each key is the field's mapstructure name; a duration is written
// with its unit; a zero value is left out, so the loader's default applies
// to it (as it would to a key an operator leaves out). The file is JSON,
// which the YAML loader reads as it is.
func configFile(t tb, dir string, cfg *config.Config) string {
	t.Helper()
	raw, err := json.MarshalIndent(configValue(reflect.ValueOf(*cfg)), "", "  ")
	require.NoError(t, err)
	f, err := os.CreateTemp(dir, "config-*.yaml")
	require.NoError(t, err)
	_, err = f.Write(raw)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return f.Name()
}

var durationType = reflect.TypeOf(time.Duration(0))

// configValue turns a config value into what the loader decodes back into
// it; struct fields with a zero value are left out.
func configValue(v reflect.Value) any {
	switch {
	case v.Type() == durationType:
		return config.FormatDuration(time.Duration(v.Int()))
	case v.Kind() == reflect.Pointer:
		return configValue(v.Elem())
	case v.Kind() == reflect.Struct:
		out := map[string]any{}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			key, _, _ := strings.Cut(f.Tag.Get("mapstructure"), ",")
			if key == "" || key == "-" || v.Field(i).IsZero() {
				continue
			}
			out[key] = configValue(v.Field(i))
		}
		return out
	case v.Kind() == reflect.Slice:
		out := make([]any, v.Len())
		for i := range v.Len() {
			out[i] = configValue(v.Index(i))
		}
		return out
	case v.Kind() == reflect.Map:
		out := map[string]any{}
		for _, k := range v.MapKeys() {
			out[k.String()] = configValue(v.MapIndex(k))
		}
		return out
	default:
		return v.Interface()
	}
}

// dispatcherProcess is a dispatcher binary the test started.
type dispatcherProcess struct {
	base string // http://host:port of its /healthz, /readyz, /metrics
	cmd  *exec.Cmd
	done chan struct{}
	// waitErr is what Wait returned, set before done is closed.
	waitErr error
	mu      sync.Mutex
	log     bytes.Buffer
}

func (p *dispatcherProcess) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.Write(b)
}

func (p *dispatcherProcess) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// processConfig is the harness's config (as it is now) for a dispatcher
// process listening on addr.
func (h *harness) processConfig(addr string) config.Config {
	cfg := *h.cfg
	cfg.Dispatcher.Listen = addr
	// The harness's receiver listens on 127.0.0.1:0, which a file may not
	// say; the dispatcher has no use for it.
	cfg.Receiver = config.Receiver{}
	return cfg
}

// startDispatcherProcess runs the built dispatcher binary on the harness's
// config (as it is now) until the test ends, and waits until it is ready.
// When the test ends it gets SIGTERM and must exit 0 within 30s; its log
// is shown when the test failed. env is added to its environment.
func (h *harness) startDispatcherProcess(env ...string) *dispatcherProcess {
	h.t.Helper()
	addr := freeAddr(h.t)
	cfg := h.processConfig(addr)
	return h.runProcess("dispatcher", &cfg, "http://"+addr, env)
}

// startReceiverProcess runs the built receiver binary as
// startDispatcherProcess runs the dispatcher; base is its webhook
// listener, metrics its metrics listener.
func (h *harness) startReceiverProcess(env ...string) (p *dispatcherProcess, metrics string) {
	h.t.Helper()
	addr, maddr := freeAddr(h.t), freeAddr(h.t)
	cfg := *h.cfg
	cfg.Receiver.Listen, cfg.Receiver.MetricsListen = addr, maddr
	cfg.Dispatcher = config.Dispatcher{}
	return h.runProcess("receiver", &cfg, "http://"+addr, env), "http://" + maddr
}

// freeAddr is a free 127.0.0.1 port, for a process to bind again at once.
func freeAddr(t tb) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// runProcess runs the built binary name on cfg until the test ends and
// waits until base/readyz answers.
func (h *harness) runProcess(name string, cfg *config.Config, base string, env []string) *dispatcherProcess {
	h.t.Helper()
	bin := filepath.Join(testenv.Binaries(h.t), name)
	path := configFile(h.t, h.t.TempDir(), cfg)

	p := &dispatcherProcess{base: base, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "--config", path)
	p.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + h.t.TempDir()}, env...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	require.NoError(h.t, p.cmd.Start())
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	h.t.Cleanup(func() {
		select {
		case <-p.done:
			h.t.Errorf("%s process %s exited before the test ended (%s):\n%s", name, p.base, p.cmd.ProcessState, p.output())
			return
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			if p.waitErr != nil {
				h.t.Errorf("%s process %s after SIGTERM: %v:\n%s", name, p.base, p.waitErr, p.output())
			}
		case <-time.After(testenv.Scaled(30 * time.Second)):
			_ = p.cmd.Process.Kill()
			<-p.done
			h.t.Errorf("%s process %s did not stop within 30s of SIGTERM; killed:\n%s", name, p.base, p.output())
		}
		if h.t.Failed() {
			h.t.Logf("%s process %s log:\n%s", name, p.base, p.output())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for !answersReady(p.base) {
		select {
		case <-p.done:
			h.t.Fatalf("%s process exited at start (%s):\n%s", name, p.cmd.ProcessState, p.output())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("%s process %s not ready within 20s:\n%s", name, p.base, p.output())
		}
	}
	return p
}

// answersReady reports whether base/readyz answers 200.
func answersReady(base string) bool {
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(base + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// The file startDispatcherProcess writes loads back into the harness's
// config: what the dispatcher process runs with is what the test set.
func TestConfigFileLoadsBackTheHarnessConfig(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	r := &h.cfg.Routes[0]
	r.Concurrency = 3
	r.RateLimit = 20
	r.Burst = 2
	r.Circuit = config.Circuit{Failures: 3, Cooldown: 1500 * time.Millisecond}
	r.Headers = map[string]string{"x-team": "billing"} // viper lowers keys; header names ignore case
	cfg := h.processConfig("127.0.0.1:8081")
	got, err := config.Load(configFile(t, t.TempDir(), &cfg), func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	require.Equal(t, h.cfg.Database.URL, got.Database.URL)
	require.Equal(t, h.cfg.AMQP.Prefix, got.AMQP.Prefix)
	require.Equal(t, h.cfg.Retry.Backoff, got.Retry.Backoff)
	require.Equal(t, h.cfg.Dispatcher.DeliveryLimit, got.Dispatcher.DeliveryLimit)
	require.Equal(t, h.cfg.Sources[0].Verify.Secrets, got.Sources[0].Verify.Secrets)
	require.Len(t, got.Routes, 1)
	g := got.Routes[0]
	require.Equal(t, *r, config.Route{
		Name: g.Name, URL: g.URL, Bindings: g.Bindings, Timeout: g.Timeout, Concurrency: g.Concurrency,
		SigningSecret: g.SigningSecret, MaxAttempts: g.MaxAttempts, Circuit: g.Circuit,
		RateLimit: g.RateLimit, Burst: g.Burst, Headers: g.Headers,
	})
	require.Empty(t, g.Ordering)
}
