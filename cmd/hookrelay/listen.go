package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hookrelay/hookrelay/internal/apiclient"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/hookrelay/hookrelay/internal/outgoing"
	"github.com/hookrelay/hookrelay/internal/setup"
	"github.com/hookrelay/hookrelay/internal/signature"
	"github.com/spf13/cobra"
)

func (c *cli) listenCmd() *cobra.Command {
	var route, events, forwardTo, replayFrom string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "listen --route NAME | --events PATTERN --forward-to URL",
		Short: "Receive a copy of a route's events on this machine and POST each to a local address",
		Long: `Follow, through the admin API (hookrelay login, or HOOKRELAY_SERVER and
HOOKRELAY_TOKEN), the events a route gets (--route) or whose
source.event_type a topic pattern matches (--events 'stripe.invoice.*', a
listen-only tap bound to nothing), and POST a copy of each to a local address
(--forward-to) as the relay would: the body byte for byte, its Content-Type,
and the Standard Webhooks headers (webhook-id, webhook-timestamp,
webhook-signature) signed with the secret printed at start. The secret is
kept in ~/.config/hookrelay/listen-secret (mode 0600), the same across
restarts, so the local app is set up once.

One line is printed per event: when, its id, source and type, and the local
answer. The route's real deliveries are unaffected: a listener only reads;
stopping it (Ctrl-C) or killing it changes nothing there. --replay-from 10m
first sends the events stored in the last 10 minutes. A team's token listens
to its own routes only. Any number of listeners may follow the same route.`,
		Example: `  hookrelay listen --route billing --forward-to http://localhost:3000/hooks
  hookrelay listen --events 'stripe.invoice.*' --forward-to http://localhost:3000/hooks --replay-from 10m`,
		Args: setup.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (route == "") == (events == "") {
				return setup.Usagef(cmd, "give --route or --events, one of them")
			}
			if u, err := url.Parse(forwardTo); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return setup.Usagef(cmd, "--forward-to: want a local URL, http://localhost:3000/hooks")
			}
			if timeout <= 0 {
				return setup.Usagef(cmd, "--timeout: must be positive, with a unit (10s)")
			}
			r, err := c.remoteTarget()
			if err != nil {
				return err
			}
			if r == nil {
				return errors.New("listen works through the admin API: hookrelay login URL first (or set HOOKRELAY_SERVER and HOOKRELAY_TOKEN)")
			}
			secret, path, err := c.listenSecret()
			if err != nil {
				return err
			}
			key, err := signature.DecodeStandardSecret(secret)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			l := &listener{out: c.out, errOut: c.errOut, forwardTo: forwardTo, key: key, client: &http.Client{Timeout: timeout}}
			return l.run(cmd.Context(), r, &apiclient.ListenParams{Route: opt(route), Events: opt(events), ReplayFrom: opt(replayFrom)}, secret)
		},
	}
	cmd.Flags().StringVar(&route, "route", "", "follow the events this route gets")
	cmd.Flags().StringVar(&events, "events", "", "or follow the events whose source.event_type this topic pattern matches (stripe.invoice.*, github.#)")
	cmd.Flags().StringVar(&forwardTo, "forward-to", "", "the local address each event is POSTed to (required)")
	cmd.Flags().StringVar(&replayFrom, "replay-from", "", "first send the events stored since this age (10m) or time (RFC 3339)")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "how long the local address may take to answer")
	_ = cmd.MarkFlagRequired("forward-to") // declared just above
	return cmd
}

// listenSecret is the listener's signing secret: read from the CLI's
// config directory, made there (mode 0600) the first time.
func (c *cli) listenSecret() (secret, path string, err error) {
	contexts, err := c.contextsPath()
	if err != nil {
		return "", "", err
	}
	path = filepath.Join(filepath.Dir(contexts), "listen-secret")
	raw, err := os.ReadFile(path)
	if err == nil {
		return strings.TrimSpace(string(raw)), path, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", path, err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", path, err
	}
	secret = "whsec_" + base64.StdEncoding.EncodeToString(b)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", path, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) { // another listener made it first
		return c.listenSecret()
	}
	if err != nil {
		return "", path, err
	}
	if _, err := f.WriteString(secret + "\n"); err != nil {
		f.Close()
		return "", path, err
	}
	return secret, path, f.Close()
}

// listener forwards a listen stream to a local address.
type listener struct {
	out, errOut io.Writer
	forwardTo   string
	key         []byte
	client      *http.Client
}

// run opens the stream and forwards each event until ctx ends (Ctrl-C:
// a clean end) or the stream does (an error).
func (l *listener) run(ctx context.Context, r *remote, params *apiclient.ListenParams, secret string) error {
	resp, err := r.stream.Listen(ctx, params)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("admin API: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return readAnswer(resp, nil, nil)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var event string
	var data bytes.Buffer
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if err := l.handle(ctx, event, data.Bytes(), r.server, secret); err != nil {
				return err
			}
			event = ""
			data.Reset()
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data.WriteString(strings.TrimPrefix(line, "data: "))
		}
	}
	if ctx.Err() != nil {
		fmt.Fprintln(l.errOut, "listen: stopped")
		return nil
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("the stream from %s broke: %w", r.server, err)
	}
	return fmt.Errorf("the stream from %s ended (the receiver stopped?): listen again", r.server)
}

// handle acts on one message of the stream.
func (l *listener) handle(ctx context.Context, event string, data []byte, server, secret string) error {
	switch event {
	case "ready":
		var ready struct {
			Route  string    `json:"route"`
			Events string    `json:"events"`
			From   time.Time `json:"from"`
		}
		if err := json.Unmarshal(data, &ready); err != nil {
			return fmt.Errorf("the stream's first message: %w", err)
		}
		what := "route " + ready.Route
		if ready.Events != "" {
			what = "events " + ready.Events
		}
		fmt.Fprintf(l.errOut, "listening on %s for %s (from %s); forwarding to %s\n", server, what, ready.From.Format(time.RFC3339), l.forwardTo)
		fmt.Fprintf(l.errOut, "the signing secret (webhook-signature, Standard Webhooks; the same every time): %s\n", secret)
		fmt.Fprintln(l.errOut, "Ctrl-C to stop; the route's own deliveries are not affected")
		return nil
	case "error":
		var e ListenStreamError
		_ = json.Unmarshal(data, &e) // an unreadable error still ends the stream
		return fmt.Errorf("the relay ended the stream: %s", e.Message)
	case "event":
		var ev ops.ListenEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return fmt.Errorf("an event this CLI cannot read (a different version?): %w", err)
		}
		l.forward(ctx, ev)
	}
	return nil
}

// ListenStreamError is the stream's "error" message.
type ListenStreamError struct {
	Message string `json:"message"`
}

// forward POSTs ev to the local address, signed, and prints one line. A
// local failure is printed and the listener goes on: the local app is
// being written, and the relay's deliveries do not depend on it.
func (l *listener) forward(ctx context.Context, ev ops.ListenEvent) {
	now := time.Now()
	h := outgoing.Headers(nil, outgoing.Request{Body: ev.Body, ContentType: ev.ContentType},
		outgoing.Event{ID: ev.ID, Source: ev.Source, EventType: ev.EventType, Attempt: 1}, [][]byte{l.key}, now)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.forwardTo, bytes.NewReader(ev.Body))
	answer := ""
	if err == nil {
		req.Header = h
		var resp *http.Response
		resp, err = l.client.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // the answer's body is not shown
			resp.Body.Close()
			answer = resp.Status
		}
	}
	if err != nil {
		answer = "failed: " + err.Error()
	}
	mark := ""
	if ev.Replayed {
		mark = " (stored)"
	}
	fmt.Fprintf(l.out, "%s  %s  %s %s%s  -> %s  %s\n", now.Format("15:04:05"), ev.ID, ev.Source, ev.EventType, mark, answer,
		time.Since(now).Round(time.Millisecond))
}
