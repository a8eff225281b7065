package outgoing

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// DefaultKeyTemplate is the routing key of an amqp route that sets none:
// the event's own topic key, as the relay's exchange routes it.
const DefaultKeyTemplate = "{source}.{event_type}"

// MaxRoutingKey is the longest routing key AMQP carries (a short string).
const MaxRoutingKey = 255

// KeyTemplate is an amqp route's routing key: text with placeholders
// {source}, {event_type}, {event_id} and {body.PATH}, PATH a dotted path
// into the JSON body (body.customer.id). Compile it with ParseKeyTemplate.
type KeyTemplate struct {
	text  string
	parts []keyPart
}

// keyPart is literal text, or a placeholder: a field of the event, or a
// path into its body.
type keyPart struct {
	literal string
	field   string   // source, event_type or event_id
	path    []string // body.PATH
}

// KeyEvent is what a routing key is made from.
type KeyEvent struct {
	Source, EventType, EventID string
	// Body is the event's body as parsed JSON (nil when it is not JSON).
	Body any
}

// ParseKeyTemplate compiles a routing key template; "" is
// DefaultKeyTemplate. An unknown placeholder, an unclosed brace or an
// empty path is an error naming it.
func ParseKeyTemplate(s string) (*KeyTemplate, error) {
	if s == "" {
		s = DefaultKeyTemplate
	}
	t := &KeyTemplate{text: s}
	rest := s
	for rest != "" {
		open := strings.IndexAny(rest, "{}")
		if open < 0 {
			t.parts = append(t.parts, keyPart{literal: rest})
			break
		}
		if rest[open] == '}' {
			return nil, fmt.Errorf("a } without its { at %d", len(s)-len(rest)+open+1)
		}
		if open > 0 {
			t.parts = append(t.parts, keyPart{literal: rest[:open]})
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return nil, fmt.Errorf("a { without its } at %d", len(s)-len(rest)+open+1)
		}
		name := rest[open+1 : open+end]
		switch {
		case name == "source", name == "event_type", name == "event_id":
			t.parts = append(t.parts, keyPart{field: name})
		case strings.HasPrefix(name, "body."):
			path := strings.Split(strings.TrimPrefix(name, "body."), ".")
			for _, p := range path {
				if p == "" || strings.ContainsAny(p, "{ ") {
					return nil, fmt.Errorf("{%s}: a body path is dot-separated names, like {body.customer.id}", name)
				}
			}
			t.parts = append(t.parts, keyPart{path: path})
		default:
			return nil, fmt.Errorf("{%s}: unknown placeholder; use {source}, {event_type}, {event_id} or {body.PATH}", name)
		}
		rest = rest[open+end+1:]
	}
	return t, nil
}

// ReadsBody reports whether the template names a field of the body: only
// then need the body be parsed.
func (t *KeyTemplate) ReadsBody() bool {
	for _, p := range t.parts {
		if p.path != nil {
			return true
		}
	}
	return false
}

// String returns the template as written.
func (t *KeyTemplate) String() string { return t.text }

// ErrKey is the failure to make an event's routing key: a body field the
// template names that the event lacks, or one that is not a string, a
// number or a bool; or a key longer than MaxRoutingKey.
var ErrKey = errors.New("routing key")

// Render makes e's routing key.
func (t *KeyTemplate) Render(e KeyEvent) (string, error) {
	var b strings.Builder
	for _, p := range t.parts {
		switch {
		case p.literal != "":
			b.WriteString(p.literal)
		case p.field == "source":
			b.WriteString(e.Source)
		case p.field == "event_type":
			b.WriteString(e.EventType)
		case p.field == "event_id":
			b.WriteString(e.EventID)
		default:
			v, err := bodyField(e.Body, p.path)
			if err != nil {
				return "", fmt.Errorf("%w: {body.%s}: %v", ErrKey, strings.Join(p.path, "."), err)
			}
			b.WriteString(v)
		}
	}
	if b.Len() > MaxRoutingKey {
		return "", fmt.Errorf("%w: %d bytes, at most %d", ErrKey, b.Len(), MaxRoutingKey)
	}
	return b.String(), nil
}

// bodyField is the text of the scalar at path in body.
func bodyField(body any, path []string) (string, error) {
	v := body
	for _, name := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return "", errors.New("the body has no such field")
		}
		if v, ok = m[name]; !ok {
			return "", errors.New("the body has no such field")
		}
	}
	switch x := v.(type) {
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return strconv.FormatInt(int64(x), 10), nil
		}
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case nil:
		return "", errors.New("the field is null")
	}
	return "", errors.New("the field is not a string, a number or a bool")
}
