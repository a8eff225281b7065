package amqp

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/rs/zerolog"
)

// TLSConfig names the files of a TLS connection to brokers that require it
// (amqps://). Every field is optional: with none, amqps:// verifies the
// broker against the system's roots.
type TLSConfig struct {
	// CAFile is a PEM bundle of the CAs that signed the brokers'
	// certificates, instead of the system roots.
	CAFile string
	// CertFile and KeyFile are the client certificate and key, for brokers
	// that authenticate clients by certificate. Both or neither.
	CertFile string
	KeyFile  string
	// ServerName is the name checked in the brokers' certificates when it
	// differs from the host in the URL.
	ServerName string
}

// IsZero reports whether c sets nothing.
func (c TLSConfig) IsZero() bool { return c == TLSConfig{} }

// Load reads the files and returns the tls.Config, or nil when c is zero.
// Errors name the file, never its content.
func (c TLSConfig) Load() (*tls.Config, error) {
	if c.IsZero() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ca_file %s holds no PEM certificate", c.CAFile)
		}
		cfg.RootCAs = pool
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, errors.New("cert_file and key_file go together")
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("loading cert_file and key_file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// Node names a broker node in logs and metrics: host:port of its URL,
// without credentials or vhost.
func Node(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return "(invalid url)"
	}
	host := u.Host
	if u.Port() == "" {
		port := "5672"
		if u.Scheme == "amqps" {
			port = "5671"
		}
		host += ":" + port
	}
	return host
}

// NodeGauge is hookrelay_rabbitmq_connected_node: 1 for the node each
// connection is on, so a dashboard shows which node a process talks to and
// when it moved.
type NodeGauge struct {
	mu sync.Mutex
	g  *prometheus.GaugeVec
}

// NewNodeGauge registers the gauge on reg.
func NewNodeGauge(reg prometheus.Registerer) *NodeGauge {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "hookrelay_rabbitmq_connected_node",
		Help: "1 for the RabbitMQ node (host:port) each connection of this process is on; absent while disconnected.",
	}, []string{"connection", "node"})
	reg.MustRegister(g)
	return &NodeGauge{g: g}
}

func (n *NodeGauge) set(connection, node string) {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.g.DeletePartialMatch(prometheus.Labels{"connection": connection})
	n.g.WithLabelValues(connection, node).Set(1)
}

// clear removes connection's series if it still names node (a newer
// connection may already be on another).
func (n *NodeGauge) clear(connection, node string) {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.g.DeleteLabelValues(connection, node)
}

// DialerConfig configures a Dialer.
type DialerConfig struct {
	// URLs are the nodes of one cluster (or a single broker), amqp:// or
	// amqps://.
	URLs []string
	// TLS is used for amqps:// URLs; nil means the system roots.
	TLS *tls.Config
	// Heartbeat is the AMQP heartbeat; default 10s, so a dead node is
	// noticed within about two of them even when no frame is in flight.
	Heartbeat time.Duration
	// DialTimeout bounds the TCP connect and the AMQP handshake to one
	// node; default 5s.
	DialTimeout time.Duration
	// Nodes reports the node each connection is on; may be nil.
	Nodes *NodeGauge
	// Control, when set, is the dialer's socket control: a route's
	// destination broker of a team is dialled with the netguard's, which
	// refuses the relay's own side before any packet. Resolver resolves
	// the nodes' names; nil is the system's.
	Control  func(network, address string, c syscall.RawConn) error
	Resolver *net.Resolver
	// Logger says which node each connection reached.
	Logger zerolog.Logger
}

// Dialer connects to one node of a cluster. The first connection starts at
// a random node (so many processes spread over the cluster); a connection
// that fails moves to the next node in the list, and a lost connection is
// redialled starting with the node after the one it was on, so a dead node
// costs at most one refused dial. Every node of a RabbitMQ cluster serves
// every queue (quorum queues are led by one node, reachable from all), so
// any node will do. Safe for concurrent use.
type Dialer struct {
	cfg DialerConfig

	mu   sync.Mutex
	next int
}

// NewDialer returns a Dialer over cfg.URLs, which must not be empty.
func NewDialer(cfg DialerConfig) (*Dialer, error) {
	if len(cfg.URLs) == 0 {
		return nil, errors.New("amqp: at least one node URL is required")
	}
	for _, u := range cfg.URLs {
		if _, err := amqp.ParseURI(u); err != nil {
			return nil, fmt.Errorf("amqp node %s: invalid URL", Node(u))
		}
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 10 * time.Second
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = dialTimeout
	}
	return &Dialer{cfg: cfg, next: rand.IntN(len(cfg.URLs))}, nil
}

// URLs returns the node URLs.
func (d *Dialer) URLs() []string { return d.cfg.URLs }

// Conn is a connection and the node it is on.
type Conn struct {
	*amqp.Connection
	// Node is host:port of the node.
	Node string
}

// Dial connects to the next node that answers, trying each node once. name
// shows in the management UI and labels the node gauge. The error lists
// every node's failure (without credentials).
func (d *Dialer) Dial(name string) (*Conn, error) {
	d.mu.Lock()
	start := d.next
	d.mu.Unlock()
	var errs []error
	n := len(d.cfg.URLs)
	for i := range n {
		idx := (start + i) % n
		raw := d.cfg.URLs[idx]
		conn, err := d.dialOne(raw, name)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", Node(raw), err))
			continue
		}
		d.mu.Lock()
		// The next dial, after this connection is lost, starts with the
		// node after this one.
		d.next = (idx + 1) % n
		d.mu.Unlock()
		c := &Conn{Connection: conn, Node: Node(raw)}
		d.cfg.Nodes.set(name, c.Node)
		// The gauge shows a connection only while it is open.
		closed := conn.NotifyClose(make(chan *amqp.Error, 1))
		go func() {
			for range closed { // closed with the connection
			}
			d.cfg.Nodes.clear(name, c.Node)
		}()
		d.cfg.Logger.Info().Str("connection", name).Str("node", c.Node).Msg("connected to rabbitmq")
		return c, nil
	}
	d.mu.Lock()
	d.next = (start + 1) % n
	d.mu.Unlock()
	return nil, &DialError{Nodes: errs}
}

// ErrRefused is a connection the broker refused: its credentials, vhost
// or permissions. Trying again cannot help until the config changes.
// errors.Is(err, ErrRefused) holds for Dial's error when a node refused.
var ErrRefused = errors.New("rabbitmq refused the connection")

// DialError is Dial's failure: why each node could not be reached.
type DialError struct {
	// Nodes are "host:port: why", one per node tried.
	Nodes []error
}

func (e *DialError) Error() string {
	msgs := make([]string, len(e.Nodes))
	for i, err := range e.Nodes {
		msgs[i] = err.Error()
	}
	return "connecting to rabbitmq: " + strings.Join(msgs, "; ")
}

// Unwrap gives each node's error, so errors.Is finds ErrRefused.
func (e *DialError) Unwrap() []error { return e.Nodes }

// refusal is a node's refusal: errors.Is(r, ErrRefused).
type refusal struct{ msg string }

func (r refusal) Error() string        { return r.msg }
func (r refusal) Is(target error) bool { return target == ErrRefused }

func (d *Dialer) dialOne(raw, name string) (*amqp.Connection, error) {
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(name)
	conn, err := amqp.DialConfig(raw, amqp.Config{
		Heartbeat:       d.cfg.Heartbeat,
		Locale:          "en_US",
		Properties:      props,
		TLSClientConfig: d.cfg.TLS,
		Dial: func(network, addr string) (net.Conn, error) {
			// As amqp.DefaultDial, with the control and resolver: a
			// deadline covers the TLS and AMQP handshakes (amqp091-go
			// clears it once the connection is open).
			dialer := net.Dialer{Timeout: d.cfg.DialTimeout, Control: d.cfg.Control, Resolver: d.cfg.Resolver}
			c, err := dialer.Dial(network, addr)
			if err != nil {
				return nil, err
			}
			if err := c.SetDeadline(time.Now().Add(d.cfg.DialTimeout)); err != nil {
				_ = c.Close()
				return nil, err
			}
			return &writeDeadlineConn{Conn: c, timeout: writeTimeout}, nil
		},
	})
	if err != nil {
		return nil, describeDialError(err)
	}
	return conn, nil
}

// describeDialError says what a refusal means for the operator: a refused
// login names the credentials, a missing vhost names it, and nothing
// carries the URL (it may hold the password).
func describeDialError(err error) error {
	switch {
	case errors.Is(err, amqp.ErrVhost):
		return refusal{"vhost refused (check the vhost in amqp.url/urls and the user's permissions on it)"}
	case errors.Is(err, amqp.ErrCredentials):
		return refusal{"credentials refused (check the user and password in amqp.url/urls)"}
	}
	var ae *amqp.Error
	if errors.As(err, &ae) {
		switch ae.Code {
		case amqp.AccessRefused:
			return refusal{"credentials refused (check the user and password in amqp.url/urls): " + ae.Reason}
		case amqp.NotAllowed:
			return refusal{"vhost not allowed (check the vhost in amqp.url/urls and the user's permissions on it): " + ae.Reason}
		}
		return errors.New(ae.Reason)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
