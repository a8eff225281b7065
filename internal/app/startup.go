package app

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/hookrelay/hookrelay/internal/amqp"
	"github.com/hookrelay/hookrelay/internal/backoff"
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/rs/zerolog"
)

// What a daemon checks and says as it starts (issue 12): it connects to
// Postgres and RabbitMQ before it says it is ready, a refusal is an error
// naming the setting, and the ready line says where webhooks go and which
// routes are served.

// checkRabbitMQ connects to the broker once, and closes the connection, to
// learn before anything starts that it answers and accepts cfg's
// credentials. A refusal (credentials, vhost, permissions) is returned at
// once: retrying cannot help. An unreachable broker is tried again with
// backoff (at most 5s apart), each failure logged at warn naming the
// setting and told to state ("waiting"), until it answers (logged once it
// does after a wait), giveUpAfter passes (0: never; the error is then
// returned), or ctx is done (ctx's error).
func checkRabbitMQ(ctx context.Context, dialer *amqp.Dialer, name string, giveUpAfter time.Duration, logger zerolog.Logger, state func(string)) error {
	start := time.Now()
	b := backoff.Backoff{Min: 500 * time.Millisecond, Max: 5 * time.Second}
	for try := 1; ; try++ {
		conn, err := dialer.Dial(name)
		if err == nil {
			_ = conn.Close() // a check; nothing was sent on it
			if try > 1 {
				logger.Info().Int("tries", try).Dur("waited", time.Since(start).Round(time.Millisecond)).Msg("rabbitmq answers now")
			}
			return nil
		}
		state("waiting")
		if errors.Is(err, amqp.ErrRefused) {
			return err // it names amqp.url/urls
		}
		if giveUpAfter > 0 && time.Since(start) >= giveUpAfter {
			return err
		}
		wait := b.Next()
		logger.Warn().Err(err).Int("tries", try).Dur("retry_in", wait.Round(time.Millisecond)).
			Msg("rabbitmq does not answer; check amqp.url/urls (host and port) and that RabbitMQ runs")
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// baseURL is the http:// URL a listener serves, with a host a person can
// use: an unspecified address (":8080", "0.0.0.0") is localhost.
func baseURL(ln net.Listener) string {
	host, port, err := net.SplitHostPort(ln.Addr().String())
	if err != nil {
		return "http://" + ln.Addr().String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// routeLines describes cfg's routes for the ready lines: "billing:
// demo.invoice.* demo.payment.#".
func routeLines(cfg *config.Config) []string {
	var out []string
	for _, r := range cfg.Routes {
		out = append(out, r.Name+": "+strings.Join(r.Bindings, " "))
	}
	return out
}

// destination is where a route delivers, for the log: the URL without
// credentials, query or fragment (they may hold a token).
func destination(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid url)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}
