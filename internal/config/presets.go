package config

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/hookrelay/hookrelay/internal/signature"
)

// preset is what a provider preset fills in.
type preset struct {
	scheme      string
	header      string // for token
	idempotency Idempotency
	eventType   EventType
	// dedupeBody is the default of dedupe_body: on where the signature
	// covers only the body and the key and type come from unsigned headers.
	dedupeBody bool
	// ordering is where the provider's events carry the resource and a
	// version (creation time or sequence); zero where they carry none.
	ordering Ordering
}

// presets: per provider, how it signs, its stable event id, and where the
// event type is. docs/configuration.md explains each choice.
var presets = map[string]preset{
	"stripe": {
		scheme:      "stripe",
		idempotency: Idempotency{JSONPath: "id"}, // evt_..., stable across Stripe's retries
		eventType:   EventType{JSONPath: "type"},
		// The object the event is about (sub_..., in_...), and when Stripe
		// created the event (Unix seconds), the same on every retry.
		ordering: Ordering{Resource: OrderingField{JSONPath: "data.object.id"}, Version: OrderingField{JSONPath: "created"}},
	},
	"github": {
		scheme: "github",
		// X-GitHub-Delivery is unique per delivery, and a redelivery from
		// the UI keeps it; the hook id scopes it to the webhook. Neither is
		// signed, nor is X-GitHub-Event: dedupe_body stops a captured body
		// from coming back under a new delivery id or event type.
		idempotency: Idempotency{Headers: []string{"X-GitHub-Hook-ID", "X-GitHub-Delivery"}},
		eventType:   EventType{Header: "X-GitHub-Event"},
		dedupeBody:  true,
	},
	"shopify": {
		scheme:      "shopify",
		idempotency: Idempotency{Header: "X-Shopify-Webhook-Id"}, // the same on Shopify's retries
		eventType:   EventType{Header: "X-Shopify-Topic"},
		// Only the body is signed; the id and topic headers are not.
		dedupeBody: true,
		// The resource's global id (gid://shopify/Order/...: it names the
		// type, unlike the bare id), and when the resource was last
		// updated (RFC 3339), both in the signed body. (X-Shopify-
		// Triggered-At would be the event's own time, but Shopify does not
		// sign its headers: a replayer could set it far in the future.)
		ordering: Ordering{Resource: OrderingField{JSONPath: "admin_graphql_api_id"}, Version: OrderingField{JSONPath: "updated_at"}},
	},
	// Standard Webhooks and Svix sign "id.timestamp.body": the key is the
	// id the matching signature covers, from whichever header family
	// carried it, never a raw header a replayer could rewrite.
	"standard-webhooks": {
		scheme:      "standard-webhooks",
		idempotency: Idempotency{SignedID: true},
		eventType:   EventType{JSONPath: "type"},
	},
	"svix": {
		scheme:      "standard-webhooks",
		idempotency: Idempotency{SignedID: true},
		eventType:   EventType{JSONPath: "type"},
	},
	"slack": {
		scheme:      "slack",
		idempotency: Idempotency{JSONPath: "event_id"},
		eventType:   EventType{JSONPaths: []string{"event.type", "type"}},
	},
	"paddle": {
		scheme:      "paddle",
		idempotency: Idempotency{JSONPath: "event_id"},
		eventType:   EventType{JSONPath: "event_type"},
		// The entity (sub_..., txn_...) and when the event occurred (RFC 3339).
		ordering: Ordering{Resource: OrderingField{JSONPath: "data.id"}, Version: OrderingField{JSONPath: "occurred_at"}},
	},
	"kiwify": {
		scheme: "kiwify",
		// One order legitimately sends several events (paid, refunded, ...):
		// the order id alone would drop all but the first.
		idempotency: Idempotency{JSONPaths: []string{"order_id", "webhook_event_type"}},
		eventType:   EventType{JSONPath: "webhook_event_type"},
	},
	"hotmart": {
		scheme: "token",
		header: "X-HOTMART-HOTTOK",
		// A transaction sends several events (approved, refunded, ...).
		idempotency: Idempotency{JSONPaths: []string{"data.purchase.transaction", "event"}},
		eventType:   EventType{JSONPath: "event"},
		// The purchase's transaction, and when Hotmart created the event
		// (Unix milliseconds, webhook version 2.0.0).
		ordering: Ordering{Resource: OrderingField{JSONPath: "data.purchase.transaction"}, Version: OrderingField{JSONPath: "creation_date"}},
	},
	"asaas": {
		scheme:      "token",
		header:      "asaas-access-token",
		idempotency: Idempotency{JSONPath: "id"}, // evt_..., unique per event
		eventType:   EventType{JSONPath: "event"},
		// The payment (pay_...) and when Asaas created the event:
		// "2024-06-12 16:45:03", always this width and zone, so it compares
		// correctly as text. Subscription events carry no payment: no
		// ordering for them.
		ordering: Ordering{Resource: OrderingField{JSONPath: "payment.id"}, Version: OrderingField{JSONPath: "dateCreated"}},
	},
}

// Presets lists the preset names.
func Presets() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// applyPreset fills what the source leaves unset from its preset.
func applyPreset(s *Source) {
	p, ok := presets[s.Preset]
	if !ok {
		return // validation reports the unknown preset
	}
	if s.Verify.Scheme == "" {
		s.Verify.Scheme = p.scheme
		if s.Verify.Header == "" {
			s.Verify.Header = p.header
		}
	}
	if reflect.ValueOf(s.Idempotency).IsZero() {
		s.Idempotency = p.idempotency
	}
	if reflect.ValueOf(s.EventType).IsZero() {
		s.EventType = p.eventType
	}
	if s.Ordering.IsZero() {
		s.Ordering = p.ordering
	}
	if s.DedupeBody == nil {
		on := p.dedupeBody
		s.DedupeBody = &on
	}
}

// SchemeConfig is v as the signature schemes read it.
func (v Verify) SchemeConfig() signature.SchemeConfig {
	return signature.SchemeConfig{
		Secrets: v.Secrets, Algorithm: v.Algorithm, Encoding: v.Encoding,
		Header: v.Header, Query: v.Query, Prefix: v.Prefix,
		TimestampHeader: v.TimestampHeader, SignedContent: v.SignedContent, Tolerance: v.Tolerance,
		AllowSHA1: v.AllowSHA1, Username: v.Username,
	}
}

// checkVerify reports verify keys the scheme does not read, and what the
// scheme needs but lacks.
func checkVerify(key string, v Verify) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	scheme, known := signature.LookupScheme(v.Scheme)
	if !known {
		return nil // the scheme itself is reported by validation
	}
	rv, rt := reflect.ValueOf(v), reflect.TypeOf(v)
	for i := 0; i < rt.NumField(); i++ {
		name := rt.Field(i).Tag.Get("mapstructure")
		if name == "scheme" || rv.Field(i).IsZero() {
			continue
		}
		if !contains(scheme.Keys, name) {
			add("%s.verify.%s: not used by scheme %s", key, name, v.Scheme)
		}
	}
	if v.Scheme != "none" && len(v.Secrets) == 0 {
		add("%s.verify.secrets: scheme %s needs at least one secret", key, v.Scheme)
	}
	switch v.Scheme {
	case "hmac":
		if (v.Header == "") == (v.Query == "") {
			add("%s.verify: scheme hmac needs exactly one of header or query (where the signature is)", key)
		}
		if v.SignedContent != "" {
			if v.TimestampHeader == "" {
				add("%s.verify.signed_content: needs timestamp_header", key)
			}
			if strings.Count(v.SignedContent, "{body}") != 1 {
				add("%s.verify.signed_content: must contain {body} exactly once", key)
			}
		}
	case "standard-webhooks":
		for i, s := range v.Secrets {
			if s != "" {
				if err := WhsecError(s); err != nil {
					add("%s.verify.secrets[%d]: %v", key, i, err)
				}
			}
		}
	case "token":
		if v.Header == "" {
			add("%s.verify.header: scheme token needs the header that carries the token", key)
		}
	case "basic":
		if v.Username == "" {
			add("%s.verify.username: scheme basic needs the expected username", key)
		}
	}
	return problems
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
