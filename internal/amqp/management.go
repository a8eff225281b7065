package amqp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Management is a client of RabbitMQ's management HTTP API on a cluster:
// each request goes to the first node that answers, so one node down does
// not stop it. Errors never contain credentials.
type Management struct {
	urls   []*url.URL
	user   *url.Userinfo
	vhost  string
	client *http.Client
}

// NewManagement returns a client for the management APIs at mgmtURLs, for
// the vhost of amqpURL. Credentials come from a management URL, or from
// amqpURL when it has none.
func NewManagement(mgmtURLs []string, amqpURL string) (*Management, error) {
	if len(mgmtURLs) == 0 {
		return nil, errors.New("no management API URL")
	}
	au, err := url.Parse(amqpURL)
	if err != nil {
		return nil, errors.New("parsing amqp url: invalid")
	}
	m := &Management{user: au.User, vhost: "/", client: &http.Client{Timeout: 10 * time.Second}}
	if v := strings.TrimPrefix(au.Path, "/"); v != "" {
		if m.vhost, err = url.PathUnescape(v); err != nil {
			return nil, errors.New("parsing amqp url: invalid vhost")
		}
	}
	for _, raw := range mgmtURLs {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			return nil, errors.New("parsing management url: invalid")
		}
		if u.User != nil {
			m.user = u.User
		}
		u.User = nil
		m.urls = append(m.urls, u)
	}
	if m.user == nil {
		m.user = url.UserPassword("guest", "guest")
	}
	return m, nil
}

// VHost is the vhost requests are about.
func (m *Management) VHost() string { return m.vhost }

// Do sends a request for path (below /api/, with {vhost} replaced by the
// escaped vhost) to each node in turn until one answers; a network error or
// a 5xx moves on to the next node. It returns the body of a 2xx, and an
// error naming the node and the status otherwise. body, if not nil, is sent
// as JSON.
func (m *Management) Do(ctx context.Context, method, path string, body any) ([]byte, error) {
	path = strings.ReplaceAll(path, "{vhost}", url.PathEscape(m.vhost))
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return nil, fmt.Errorf("encoding request: %w", err)
		}
	}
	var errs []string
	for _, base := range m.urls {
		out, status, err := m.do(ctx, base, method, path, payload)
		switch {
		case err != nil:
			errs = append(errs, fmt.Sprintf("%s: %v", base.Host, err))
			continue
		case status >= 500:
			errs = append(errs, fmt.Sprintf("%s: HTTP %d: %s", base.Host, status, bytes.TrimSpace(out)))
			continue
		case status >= 300:
			what := ""
			if status == http.StatusUnauthorized {
				what = " (the management API refused the credentials of amqp.url/urls or amqp.management_url)"
			}
			return nil, fmt.Errorf("management API at %s: %s %s: HTTP %d%s: %s", base.Host, method, path, status, what, bytes.TrimSpace(out))
		}
		return out, nil
	}
	return nil, fmt.Errorf("management API: %s %s: no node answered (check amqp.management_url/management_urls, and that the "+
		"rabbitmq_management plugin is enabled): %s", method, path, strings.Join(errs, "; "))
}

func (m *Management) do(ctx context.Context, base *url.URL, method, path string, payload []byte) ([]byte, int, error) {
	endpoint := strings.TrimSuffix(base.String(), "/") + "/api/" + strings.TrimPrefix(path, "/")
	var rd io.Reader
	if payload != nil {
		rd = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, method, endpoint, rd)
	if err != nil {
		return nil, 0, fmt.Errorf("building request: %w", err)
	}
	pass, _ := m.user.Password()
	req.SetBasicAuth(m.user.Username(), pass)
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return nil, 0, unwrapURLError(err)
	}
	defer resp.Body.Close()
	// Answers of interest (policies, one queue) are small; a list is capped
	// by its caller's query.
	out, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, 0, fmt.Errorf("reading response: %w", err)
	}
	return out, resp.StatusCode, nil
}

// ApplyPolicies creates or updates each policy in the vhost.
func (m *Management) ApplyPolicies(ctx context.Context, policies []Policy) error {
	for _, p := range policies {
		_, err := m.Do(ctx, http.MethodPut, "policies/{vhost}/"+url.PathEscape(p.Name), map[string]any{
			"pattern": p.Pattern, "definition": p.Definition, "priority": p.Priority, "apply-to": p.ApplyTo,
		})
		if err != nil {
			return fmt.Errorf("applying policy %s: %w", p.Name, err)
		}
	}
	return nil
}

// ApplyPolicies creates or updates each policy through the management API
// at mgmtURLs (the first that answers), in the vhost of amqpURL.
func ApplyPolicies(ctx context.Context, mgmtURLs []string, amqpURL string, policies []Policy) error {
	if len(policies) == 0 {
		return nil
	}
	m, err := NewManagement(mgmtURLs, amqpURL)
	if err != nil {
		return err
	}
	return m.ApplyPolicies(ctx, policies)
}

// unwrapURLError drops the URL from an *url.Error (it may carry
// credentials) and keeps the operation and cause.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %w", ue.Op, ue.Err)
	}
	return err
}

// QueueStat is what the management API says of one queue. Its counts
// are RabbitMQ's statistics, not a live reading: up to about 10 s old
// with the default settings (a quorum queue reports them every 5 s,
// quorum_tick_interval, and the management plugin collects them every
// 5 s, collect_statistics_interval).
type QueueStat struct {
	Name      string `json:"name"`
	Messages  int    `json:"messages"`
	Ready     int    `json:"messages_ready"`
	Unacked   int    `json:"messages_unacknowledged"`
	Consumers int    `json:"consumers"`
	// DeadLettering counts messages that expired (or were rejected) and
	// wait to be dead-lettered at least once to their target: in the
	// queue, neither ready nor unacked (messages_dlx; quorum queues only).
	DeadLettering int `json:"messages_dlx"`
}

// QueueStats reads the statistics of every queue of the vhost whose name
// starts with prefix.
func (m *Management) QueueStats(ctx context.Context, prefix string) ([]QueueStat, error) {
	body, err := m.Do(ctx, http.MethodGet,
		"queues/{vhost}?columns=name,messages,messages_ready,messages_unacknowledged,messages_dlx,consumers", nil)
	if err != nil {
		return nil, fmt.Errorf("reading queue statistics: %w", err)
	}
	var all []QueueStat
	if err := json.Unmarshal(body, &all); err != nil {
		return nil, fmt.Errorf("reading queue statistics: %w", err)
	}
	var out []QueueStat
	for _, q := range all {
		if strings.HasPrefix(q.Name, prefix) {
			out = append(out, q)
		}
	}
	return out, nil
}

// ClearDeadLettering drops the messages quorum queue queue holds waiting to
// be dead-lettered (messages_dlx): it applies a policy named policy.<queue>
// (one per queue, so that two clears of different queues do not replace
// each other's) that sets the queue's overflow to drop-head, which turns
// its at-least-once dead-lettering off (RabbitMQ then deletes those
// messages), waits until the queue's statistics count none (they lag by up
// to about 10 s), and removes the policy, which turns at-least-once
// dead-lettering back on. The policy is removed even when the wait fails
// or ctx ends; a removal that fails is an error (the queue would stay
// without at-least-once dead-lettering).
func (m *Management) ClearDeadLettering(ctx context.Context, policy, queue string) (err error) {
	policy += "." + queue
	path := "policies/{vhost}/" + url.PathEscape(policy)
	if _, err := m.Do(ctx, http.MethodPut, path, map[string]any{
		"pattern": "^" + regexp.QuoteMeta(queue) + "$", "apply-to": "queues", "priority": PolicyPriority,
		"definition": map[string]any{"overflow": "drop-head"},
	}); err != nil {
		return fmt.Errorf("applying policy %s to %s: %w", policy, queue, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, derr := m.Do(dctx, http.MethodDelete, path, nil); derr != nil {
			err = errors.Join(err, fmt.Errorf("removing policy %s: %s keeps overflow drop-head (no at-least-once dead-lettering) until it is removed: %w", policy, queue, derr))
		}
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		body, rerr := m.Do(ctx, http.MethodGet, "queues/{vhost}/"+url.PathEscape(queue)+"?columns=name,messages_dlx", nil)
		if rerr == nil {
			var q struct {
				DeadLettering *int `json:"messages_dlx"`
			}
			if rerr = json.Unmarshal(body, &q); rerr == nil && q.DeadLettering == nil {
				rerr = errors.New("its statistics have no messages_dlx")
			} else if rerr == nil && *q.DeadLettering == 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			if rerr != nil {
				return fmt.Errorf("clearing %s: reading its statistics: %w (%w)", queue, rerr, ctx.Err())
			}
			return fmt.Errorf("clearing %s: the messages waiting to be dead-lettered are still counted: %w", queue, ctx.Err())
		case <-tick.C: // the statistics refresh every few seconds
		}
	}
}

// Bindings returns the routing keys binding exchange to queue.
func (m *Management) Bindings(ctx context.Context, exchange, queue string) ([]string, error) {
	body, err := m.Do(ctx, http.MethodGet, "bindings/{vhost}/e/"+url.PathEscape(exchange)+"/q/"+url.PathEscape(queue), nil)
	if err != nil {
		return nil, fmt.Errorf("reading the bindings of %s: %w", queue, err)
	}
	var list []struct {
		RoutingKey string `json:"routing_key"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("reading the bindings of %s: %w", queue, err)
	}
	out := make([]string, len(list))
	for i, b := range list {
		out[i] = b.RoutingKey
	}
	return out, nil
}
