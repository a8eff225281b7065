package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Cluster is the suite's own three-node RabbitMQ cluster (scripts/cluster.sh),
// which scripts/test.sh starts in the background while the tests build, for
// tests that kill nodes. Its settings come from HOOKRELAY_TEST_CLUSTER_*.
type Cluster struct {
	// AMQPURLs and ManagementURLs list every node.
	AMQPURLs       []string
	ManagementURLs []string

	script string
	env    []string
}

// RequireCluster waits (bounded) for the cluster scripts/test.sh started and
// returns it. Without one it skips, or fails under CI=true, like Require.
func RequireCluster(t testing.TB) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the test cluster; skipped under -short")
	}
	var c *Cluster
	Require(t, "the test RabbitMQ cluster (scripts/test.sh starts it)", func() error {
		var err error
		c, err = waitCluster(3 * time.Minute)
		return err
	})
	return c
}

func waitCluster(timeout time.Duration) (*Cluster, error) {
	script := os.Getenv("HOOKRELAY_TEST_CLUSTER_SCRIPT")
	ready := os.Getenv("HOOKRELAY_TEST_CLUSTER_READY")
	if script == "" || ready == "" {
		return nil, fmt.Errorf("HOOKRELAY_TEST_CLUSTER_SCRIPT and HOOKRELAY_TEST_CLUSTER_READY are not set")
	}
	c := &Cluster{script: script}
	for _, k := range []string{"PREFIX", "BASE_PORT", "DIR", "NODES"} {
		if v := os.Getenv("HOOKRELAY_TEST_CLUSTER_" + k); v != "" {
			c.env = append(c.env, "CLUSTER_"+k+"="+v)
		}
	}
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(ready)
		if err == nil {
			if s := strings.TrimSpace(string(b)); s != "ok" {
				return nil, fmt.Errorf("the test cluster did not start: %s", s)
			}
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the test cluster was not up within %s (%s missing)", timeout, ready)
		}
		time.Sleep(500 * time.Millisecond) // a file another process writes; nothing to wait on
	}
	out, err := c.run("env")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		if !ok {
			continue
		}
		v = strings.Trim(v, "'")
		switch k {
		case "CLUSTER_AMQP_URLS":
			c.AMQPURLs = strings.Split(v, ",")
		case "CLUSTER_MANAGEMENT_URLS":
			c.ManagementURLs = strings.Split(v, ",")
		}
	}
	if len(c.AMQPURLs) == 0 || len(c.AMQPURLs) != len(c.ManagementURLs) {
		return nil, fmt.Errorf("cluster.sh env printed no node list:\n%s", out)
	}
	return c, nil
}

// Run runs the cluster script with args (kill N, start N, leader Q, ...)
// and returns its standard output; a failure fails t.
func (c *Cluster) Run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.run(args...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return out
}

func (c *Cluster) run(args ...string) (string, error) {
	cmd := exec.Command(c.script, args...)
	cmd.Env = append(os.Environ(), c.env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("cluster.sh %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// NodeIndex returns the node number (1-based) whose AMQP URL has host:port
// addr, or 0.
func (c *Cluster) NodeIndex(addr string) int {
	for i, u := range c.AMQPURLs {
		if strings.Contains(u, "@"+addr+"/") || strings.HasSuffix(strings.TrimSuffix(u, "/"), "@"+addr) {
			return i + 1
		}
	}
	return 0
}
