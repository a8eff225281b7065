package bench

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/hookrelay/hookrelay/internal/signature"
	amqp "github.com/rabbitmq/amqp091-go"
)

// runBareForwarder is the delivery reference: --concurrency consumers on one
// connection, each on its own channel at prefetch 1 (as the dispatcher's
// are), POST each message to --url signed as Standard Webhooks, ack on a
// 2xx and requeue otherwise. No Postgres, unless --database-url is set:
// then it is the recording forwarder (recorder below). It prints "ready"
// once every consumer is registered.
func runBareForwarder(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bare-forwarder", flag.ContinueOnError)
	amqpURL := fs.String("amqp-url", "", "broker")
	queue := fs.String("queue", "", "queue to consume")
	concurrency := fs.Int("concurrency", 32, "consumers, each with prefetch 1")
	target := fs.String("url", "", "where to POST")
	secret := fs.String("secret", "", "whsec_ signing secret")
	timeout := fs.Duration("timeout", 10*time.Second, "bound of one POST")
	dbURL := fs.String("database-url", "", "record each outcome in this database (the recording forwarder); none by default")
	maxConns := fs.Int("max-conns", 10, "with --database-url: Postgres pool size")
	table := fs.String("table", "", "with --database-url: the table of outcomes (created if missing)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var rec *recorder
	if *dbURL != "" || *table != "" { // one without the other is an error, never a forwarder that records nothing
		var err error
		if rec, err = openRecorder(ctx, *dbURL, *maxConns, *table); err != nil {
			return err
		}
		defer rec.pool.Close()
	}
	key, err := signature.DecodeStandardSecret(*secret)
	if err != nil {
		return fmt.Errorf("--secret: %w", err)
	}
	conn, err := amqp.DialConfig(*amqpURL, amqp.Config{Dial: amqp.DefaultDial(10 * time.Second), Properties: amqp.Table{"connection_name": "hookrelay-bench-bare-forwarder"}})
	if err != nil {
		return fmt.Errorf("connecting to rabbitmq: %w", err)
	}
	defer conn.Close()
	// Same client settings as the dispatcher's deliver.NewClient.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	client := &http.Client{Transport: tr}
	keys := [][]byte{key}

	var wg sync.WaitGroup
	errc := make(chan error, *concurrency)
	for i := range *concurrency {
		ch, err := conn.Channel()
		if err != nil {
			return fmt.Errorf("opening channel %d: %w", i, err)
		}
		if err := ch.Qos(1, 0, false); err != nil {
			return fmt.Errorf("setting prefetch: %w", err)
		}
		// Manual acks: a message is acked only after the destination
		// answered 2xx.
		msgs, err := ch.Consume(*queue, "", false, false, false, false, nil)
		if err != nil {
			return fmt.Errorf("consuming %s: %w", *queue, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range msgs {
				if rec != nil {
					err := rec.deliver(ctx, d, func() (int, error) { return forward(ctx, client, *target, keys, d, *timeout) })
					if err != nil {
						errc <- err
						return
					}
					continue
				}
				if _, err := forward(ctx, client, *target, keys, d, *timeout); err != nil {
					if nerr := d.Nack(false, true); nerr != nil {
						errc <- fmt.Errorf("requeueing after %v: %w", err, nerr)
						return
					}
					continue
				}
				if err := d.Ack(false); err != nil {
					errc <- fmt.Errorf("acking: %w", err)
					return
				}
			}
		}()
	}
	if _, err := fmt.Fprintln(stdout, "ready"); err != nil {
		return fmt.Errorf("announcing readiness: %w", err)
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	var runErr error
	select {
	case <-ctx.Done():
	case err := <-errc:
		runErr = err
	case err := <-closed:
		runErr = fmt.Errorf("rabbitmq connection closed: %v", err)
	}
	// Closing the connection ends every consumer's channel; a message in
	// flight is not acked and the broker requeues it.
	_ = conn.Close()
	wg.Wait()
	return runErr
}

// forward POSTs d and returns the destination's status: an error when
// none came or it is not a 2xx.
func forward(ctx context.Context, client *http.Client, url string, keys [][]byte, d amqp.Delivery, timeout time.Duration) (int, error) {
	if d.MessageId == "" {
		return 0, errors.New("message has no message id")
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(d.Body))
	if err != nil {
		return 0, err
	}
	now := time.Now()
	req.Header.Set("Content-Type", d.ContentType)
	req.Header.Set("User-Agent", "hookrelay-bench")
	req.Header.Set("webhook-id", d.MessageId)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("webhook-signature", signature.SignStandard(keys, d.MessageId, now, d.Body))
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // drain to reuse the connection
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return resp.StatusCode, nil
}
