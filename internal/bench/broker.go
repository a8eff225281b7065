package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
)

// mgmt is a small client of RabbitMQ's management API: versions, the
// broker's OS pid, and deleting what a run declared. Errors never carry the
// credentials.
type mgmt struct {
	base   string // scheme://host:port, no credentials
	user   string
	pass   string
	vhost  string
	client *http.Client
}

// newMgmt takes the management URL (credentials in it, or guest/guest) and
// the AMQP URL, whose path names the vhost.
func newMgmt(mgmtURL, amqpURL string) (*mgmt, error) {
	mu, err := url.Parse(mgmtURL)
	if err != nil || mu.Host == "" {
		return nil, errors.New("--management-url is not a URL")
	}
	au, err := url.Parse(amqpURL)
	if err != nil || au.Host == "" {
		return nil, errors.New("--amqp-url is not a URL")
	}
	m := &mgmt{user: "guest", pass: "guest", vhost: "/", client: &http.Client{Timeout: 15 * time.Second}}
	if mu.User != nil {
		m.user = mu.User.Username()
		m.pass, _ = mu.User.Password()
	} else if au.User != nil {
		m.user = au.User.Username()
		m.pass, _ = au.User.Password()
	}
	if v := strings.TrimPrefix(au.Path, "/"); v != "" {
		if m.vhost, err = url.PathUnescape(v); err != nil {
			return nil, errors.New("--amqp-url has an invalid vhost")
		}
	}
	m.base = mu.Scheme + "://" + mu.Host
	return m, nil
}

func (m *mgmt) do(ctx context.Context, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, m.base+"/api/"+path, nil)
	if err != nil {
		return err
	}
	req.SetBasicAuth(m.user, m.pass)
	resp, err := m.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("management API %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("management API %s %s: reading answer: %w", method, path, err)
	}
	if method == http.MethodDelete && resp.StatusCode == http.StatusNotFound {
		return nil // gone already
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("management API %s %s: HTTP %d: %s", method, path, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("management API %s %s: decoding answer: %w", method, path, err)
	}
	return nil
}

// brokerInfo is what the report says about the broker.
type brokerInfo struct {
	Version string `json:"version"`
	Node    string `json:"node"`
	pid     int
}

// info returns the version and the OS pid of the node the AMQP URL reaches
// (with a cluster, the node that answered the management API).
//
// A management plugin that has just started lists its nodes before their
// first statistics are collected, with an empty os_pid: info asks again for
// up to 30 s before it gives up.
func (m *mgmt) info(ctx context.Context) (brokerInfo, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		bi, err := m.infoOnce(ctx)
		if !errors.Is(err, errNoStatsYet) || time.Now().After(deadline) {
			return bi, err
		}
		select {
		case <-ctx.Done():
			return brokerInfo{}, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// errNoStatsYet marks a node listed without its statistics.
var errNoStatsYet = errors.New("node statistics not collected yet")

func (m *mgmt) infoOnce(ctx context.Context) (brokerInfo, error) {
	var ov struct {
		Version string `json:"rabbitmq_version"`
		Node    string `json:"node"`
	}
	if err := m.do(ctx, http.MethodGet, "overview", &ov); err != nil {
		return brokerInfo{}, err
	}
	var nodes []struct {
		Name  string `json:"name"`
		OSPID string `json:"os_pid"`
	}
	if err := m.do(ctx, http.MethodGet, "nodes", &nodes); err != nil {
		return brokerInfo{}, err
	}
	bi := brokerInfo{Version: ov.Version, Node: ov.Node}
	for _, n := range nodes {
		if n.Name == ov.Node {
			if n.OSPID == "" {
				return brokerInfo{}, fmt.Errorf("management API: node %s has no os_pid: %w", n.Name, errNoStatsYet)
			}
			if _, err := fmt.Sscan(n.OSPID, &bi.pid); err != nil {
				return brokerInfo{}, fmt.Errorf("management API: node %s has os_pid %q", n.Name, n.OSPID)
			}
		}
	}
	return bi, nil
}

// cleanup deletes every queue, exchange and policy whose name starts with
// prefix + ".": everything the run's receiver, dispatcher and references
// declared, and nothing of anyone else's.
func (m *mgmt) cleanup(ctx context.Context, prefix string) error {
	vh := url.PathEscape(m.vhost)
	var errs []error
	for _, kind := range []string{"policies", "queues", "exchanges"} {
		var items []struct {
			Name string `json:"name"`
		}
		path := kind + "/" + vh
		if kind != "policies" {
			path += "?columns=name"
		}
		if err := m.do(ctx, http.MethodGet, path, &items); err != nil {
			errs = append(errs, err)
			continue
		}
		for _, it := range items {
			if !strings.HasPrefix(it.Name, prefix+".") && !strings.HasPrefix(it.Name, prefix+"-") {
				continue
			}
			if err := m.do(ctx, http.MethodDelete, kind+"/"+vh+"/"+url.PathEscape(it.Name), nil); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// dialAMQP connects with a bounded dial.
func dialAMQP(amqpURL, name string) (*amqp.Connection, error) {
	conn, err := amqp.DialConfig(amqpURL, amqp.Config{
		Dial:       amqp.DefaultDial(10 * time.Second),
		Properties: amqp.Table{"connection_name": name},
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to rabbitmq: %w", err)
	}
	return conn, nil
}

// queueReady returns how many messages of queue are ready (passive
// declare: exact and immediate, unlike the management API's statistics).
func queueReady(conn *amqp.Connection, queue string) (int, error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("opening channel: %w", err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return 0, fmt.Errorf("inspecting queue %s: %w", queue, err)
	}
	return q.Messages, nil
}

// declareQuorum declares a durable quorum queue.
// declareTarget declares a durable topic exchange and a durable queue of
// type kind (quorum or classic), both named name, the queue bound to the
// exchange with "#".
func declareTarget(conn *amqp.Connection, name, kind string) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("opening channel: %w", err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{"x-queue-type": kind}); err != nil {
		return fmt.Errorf("declaring queue %s: %w", name, err)
	}
	if err := ch.ExchangeDeclare(name, "topic", true, false, false, false, nil); err != nil {
		return fmt.Errorf("declaring exchange %s: %w", name, err)
	}
	if err := ch.QueueBind(name, "#", name, false, nil); err != nil {
		return fmt.Errorf("binding queue %s: %w", name, err)
	}
	return nil
}

func declareQuorum(conn *amqp.Connection, queue string) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("opening channel: %w", err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return fmt.Errorf("declaring queue %s: %w", queue, err)
	}
	return nil
}

// publishBacklog publishes n persistent messages to queue through the
// default exchange, with publisher confirms (up to 256 in flight), and
// returns their message ids once every one was confirmed.
func publishBacklog(ctx context.Context, conn *amqp.Connection, queue string, n int, body func(i int) []byte) ([]string, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("opening channel: %w", err)
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return nil, fmt.Errorf("enabling confirms: %w", err)
	}
	const window = 256
	ids := make([]string, 0, n)
	pending := make([]*amqp.DeferredConfirmation, 0, window)
	wait := func() error {
		for _, dc := range pending {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			ok, err := dc.WaitContext(wctx)
			cancel()
			if err != nil {
				return fmt.Errorf("waiting for a confirm: %w", err)
			}
			if !ok {
				return errors.New("the broker refused a message (nack)")
			}
		}
		pending = pending[:0]
		return nil
	}
	for i := range n {
		id := uuid.Must(uuid.NewV7()).String()
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent,
			ContentType:  "application/json",
			MessageId:    id,
			Timestamp:    time.Now(),
			Type:         benchEventType,
			Body:         body(i),
		})
		if err != nil {
			return nil, fmt.Errorf("publishing: %w", err)
		}
		ids = append(ids, id)
		if pending = append(pending, dc); len(pending) == window {
			if err := wait(); err != nil {
				return nil, err
			}
		}
	}
	if err := wait(); err != nil {
		return nil, err
	}
	return ids, nil
}
