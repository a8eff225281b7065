// Package extract reads a webhook's idempotency key and event type from its
// headers, JSON body or verified signed id, as a source's configuration
// says. A body or header it cannot read, and a value Postgres could never
// store (a NUL byte, invalid UTF-8), is an *Error, which the receiver answers
// with 400.
package extract

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// Limits on what ends up in a routing key and a unique index.
const (
	maxEventTypeLen = 200 // "<source>.<type>" must fit RabbitMQ's 255-byte routing key
	maxKeyLen       = 1000
)

// Config says where the two values come from. Idempotency parts are taken
// from the signed id (IdempotencySignedID), then IdempotencyHeaders, then
// IdempotencyPaths, and joined; with none, the key is the SHA-256 of the raw
// body. The event type comes from EventTypeHeader, or the first of
// EventTypePaths that is present: exactly one of the two is set.
type Config struct {
	// IdempotencySignedID takes the message id the source's signature
	// covers (Input.SignedID) as the first part of the key.
	IdempotencySignedID bool
	IdempotencyHeaders  []string
	IdempotencyPaths    []string
	EventTypeHeader     string
	EventTypePaths      []string
	// OrderingResource and OrderingVersion, both set or neither, say where
	// the event's resource and version are (Result.Ordering).
	OrderingResource Field
	OrderingVersion  Field
	// VersionFutureLimit is how far past the request's arrival a version
	// that is a time may be and still order the event (the source's
	// signature tolerance): a version further on is a sender's clock or a
	// bug, and taken as the resource's newest it would silence every later
	// event of the resource. The event is accepted without ordering
	// (Result.OrderingIgnored). Zero: no limit.
	VersionFutureLimit time.Duration
}

// Extractor applies one source's Config.
type Extractor struct {
	cfg      Config
	needJSON bool
}

// New returns an Extractor for cfg.
func New(cfg Config) (*Extractor, error) {
	if (cfg.EventTypeHeader == "") == (len(cfg.EventTypePaths) == 0) {
		return nil, fmt.Errorf("set exactly one of event type header or JSON paths")
	}
	for _, f := range []Field{cfg.OrderingResource, cfg.OrderingVersion} {
		if f.Header != "" && f.Path != "" {
			return nil, fmt.Errorf("an ordering field is a header or a JSON path, not both")
		}
	}
	if (cfg.OrderingResource == Field{}) && (cfg.OrderingVersion != Field{}) {
		// A resource alone serves routes with ordering fifo; a version
		// alone is of nothing.
		return nil, fmt.Errorf("an ordering version needs an ordering resource")
	}
	return &Extractor{
		cfg:      cfg,
		needJSON: len(cfg.IdempotencyPaths) > 0 || len(cfg.EventTypePaths) > 0,
	}, nil
}

// Error is input the extractor cannot read; Message is safe to send back.
type Error struct{ Message string }

func (e *Error) Error() string { return e.Message }

func fail(format string, args ...any) *Error { return &Error{Message: fmt.Sprintf(format, args...)} }

// Input is the part of a request that Extract reads.
type Input struct {
	Header http.Header
	Body   []byte
	// SignedID is the message id the request's verified signature covers,
	// "" when the scheme signs none.
	SignedID string
	// ReceivedAt is when the request arrived (Config.VersionFutureLimit).
	ReceivedAt time.Time
}

// SignedID reports whether x keys on Input.SignedID, which only a verifier
// that signs an id can give.
func (x *Extractor) SignedID() bool { return x.cfg.IdempotencySignedID }

// Result is what Extract found.
type Result struct {
	IdempotencyKey string
	EventType      string
	// Ordering is the event's resource and version, all "" when the
	// source declares none or the event lacks one.
	Ordering Ordering
	// OrderingIgnored says why the event's ordering was left out although
	// it carried one: "future_version" (Config.VersionFutureLimit).
	OrderingIgnored string
}

// Extract reads the idempotency key and event type. It returns an *Error for
// input it cannot read.
func (x *Extractor) Extract(in Input) (Result, error) {
	h, body := in.Header, in.Body
	if x.needJSON && !gjson.ValidBytes(body) {
		return Result{}, fail("body is not valid JSON")
	}
	var res Result

	var parts []string
	if x.cfg.IdempotencySignedID {
		v := in.SignedID // exactly the signed bytes: no trimming
		if v == "" {
			return Result{}, fail("no signed message id (idempotency key)")
		}
		if err := checkText("signed id", v); err != nil {
			return Result{}, fail("idempotency key: %s", err.Message)
		}
		parts = append(parts, v)
	}
	for _, name := range x.cfg.IdempotencyHeaders {
		v := strings.TrimSpace(h.Get(name))
		if v == "" {
			return Result{}, fail("missing header %s (idempotency key)", name)
		}
		if err := checkText("header "+name, v); err != nil {
			return Result{}, fail("idempotency key: %s", err.Message)
		}
		parts = append(parts, v)
	}
	for _, path := range x.cfg.IdempotencyPaths {
		v, err := scalar(body, path)
		if err == nil {
			err = checkText(fmt.Sprintf("field %q", path), v)
		}
		if err != nil {
			return Result{}, fail("idempotency key: %s", err.Message)
		}
		parts = append(parts, v)
	}
	if len(parts) == 0 {
		sum := sha256.Sum256(body)
		res.IdempotencyKey = "sha256:" + hex.EncodeToString(sum[:])
	} else {
		res.IdempotencyKey = joinKey(parts)
	}
	if len(res.IdempotencyKey) > maxKeyLen {
		return Result{}, fail("idempotency key is longer than %d bytes", maxKeyLen)
	}

	if x.cfg.EventTypeHeader != "" {
		res.EventType = strings.TrimSpace(h.Get(x.cfg.EventTypeHeader))
		if res.EventType == "" {
			return Result{}, fail("missing header %s (event type)", x.cfg.EventTypeHeader)
		}
	} else {
		var err *Error
		for _, path := range x.cfg.EventTypePaths {
			if res.EventType, err = scalar(body, path); err == nil {
				break
			}
		}
		if err != nil {
			return Result{}, fail("event type: %s", err.Message)
		}
	}
	if err := checkEventType(res.EventType); err != nil {
		return Result{}, err
	}
	res.Ordering, res.OrderingIgnored = x.ordering(h, body, in.ReceivedAt)
	return res, nil
}

// scalar reads a string, number or boolean at path.
func scalar(body []byte, path string) (string, *Error) {
	r := gjson.GetBytes(body, path)
	switch r.Type {
	case gjson.String, gjson.Number, gjson.True, gjson.False:
	case gjson.Null:
		if r.Exists() {
			return "", fail("field %q is null", path)
		}
		return "", fail("field %q is missing", path)
	default:
		return "", fail("field %q is not a string, number or boolean", path)
	}
	v := r.String()
	if r.Type == gjson.Number {
		v = r.Raw // keep 12345678901234567890 exact, not float-rounded
	}
	if strings.TrimSpace(v) == "" {
		return "", fail("field %q is empty", path)
	}
	return v, nil
}

// joinKey joins key parts with ':' and escapes ':' and '\' inside parts, so
// ("a:b", "c") and ("a", "b:c") never collide.
func joinKey(parts []string) string {
	if len(parts) == 1 {
		return parts[0]
	}
	esc := strings.NewReplacer(`\`, `\\`, `:`, `\:`)
	for i, p := range parts {
		parts[i] = esc.Replace(p)
	}
	return strings.Join(parts, ":")
}

// checkText says why v, read from what, cannot be stored: Postgres text
// refuses a NUL byte and invalid UTF-8, so such a value could never be
// stored, whatever the sender retries.
func checkText(what, v string) *Error {
	if strings.IndexByte(v, 0) >= 0 {
		return fail("%s contains a NUL byte", what)
	}
	if !utf8.ValidString(v) {
		return fail("%s is not valid UTF-8", what)
	}
	return nil
}

// checkEventType says why t cannot be an event type: it must be storable
// (checkText), fit a routing key, and hold no control character (it is
// also sent as a header on every delivery).
func checkEventType(t string) *Error {
	if len(t) > maxEventTypeLen {
		return fail("event type is longer than %d bytes", maxEventTypeLen)
	}
	if err := checkText("event type", t); err != nil {
		return err
	}
	for _, r := range t {
		if unicode.IsControl(r) {
			return fail("event type contains a control character")
		}
	}
	return nil
}
