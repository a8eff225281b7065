package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"github.com/go-playground/validator/v10"
	"github.com/hookrelay/hookrelay/internal/signature"
	"github.com/hookrelay/hookrelay/internal/topic"
)

var (
	identRe    = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	amqpNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$`)
	headerRe   = regexp.MustCompile("^[!#$%&'*+\\-.^_`|~0-9A-Za-z]+$")
)

func newValidator() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		return f.Tag.Get("mapstructure")
	})
	must := func(tag string, fn func(s string) bool) {
		if err := v.RegisterValidation(tag, func(fl validator.FieldLevel) bool {
			return fn(fl.Field().String())
		}); err != nil {
			panic(err) // programming error: a bad tag name
		}
	}
	must("ident", identRe.MatchString)
	must("amqp_name", amqpNameRe.MatchString)
	must("header_name", headerRe.MatchString)
	must("topic_pattern", func(s string) bool { return topic.PatternError(s) == nil })
	must("postgres_url", func(s string) bool { return urlWithScheme(s, "postgres", "postgresql") })
	must("amqp_url", func(s string) bool { return urlWithScheme(s, "amqp", "amqps") })
	must("http_url", func(s string) bool { return urlWithScheme(s, "http", "https") })
	must("whsec", func(s string) bool { return WhsecError(s) == nil })
	must("aes_key", func(s string) bool { return AESKeyError(s) == nil })
	must("trace_link", func(s string) bool { return urlWithScheme(s, "http", "https") && strings.Contains(s, "{trace_id}") })
	must("scheme", func(s string) bool { return contains(signature.SchemeNames(), s) })
	must("preset", func(s string) bool { _, ok := presets[s]; return ok })
	must("network", func(s string) bool { return NetworkError(s) == nil })
	return v
}

func urlWithScheme(s string, schemes ...string) bool {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return false
	}
	for _, sc := range schemes {
		if u.Scheme == sc {
			return true
		}
	}
	return false
}

// WhsecError says why s is not a usable Standard Webhooks secret: "whsec_"
// (optional) followed by standard base64 of at least 16 bytes. The message
// never contains the secret.
func WhsecError(s string) error {
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
	switch {
	case err != nil:
		return errors.New("must be whsec_ followed by standard base64 (make one with `hookrelay secret new`)")
	case len(raw) < 16:
		return errors.New("must decode to at least 16 bytes (make one with `hookrelay secret new`)")
	}
	return nil
}

// NetworkError says why s is not a network in CIDR notation as the
// allowed networks take it: an address alone, bits set past the
// prefix's length, and an IPv4-mapped IPv6 form are refused, saying what
// to write instead.
func NetworkError(s string) error {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		if a, aerr := netip.ParseAddr(s); aerr == nil {
			return fmt.Errorf("is an address, not a network: write %s", netip.PrefixFrom(a.WithZone(""), a.BitLen()))
		}
		return errors.New("is not a network in CIDR notation (10.20.0.0/16, fd00:1::/32)")
	}
	if p.Addr().Is4In6() {
		if p.Bits() < 96 {
			return errors.New("is an IPv4-mapped network shorter than /96: write it as IPv4")
		}
		return fmt.Errorf("is an IPv4-mapped network: write %s", netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked())
	}
	if p != p.Masked() {
		return fmt.Errorf("has bits set past its length: write %s", p.Masked())
	}
	return nil
}

// AESKeyError says why s is not a secrets key: standard base64 of exactly
// 32 bytes. The message never contains the key.
func AESKeyError(s string) error {
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(raw) != 32 {
		return errors.New("must be standard base64 of 32 bytes (make one with `hookrelay secret key`)")
	}
	return nil
}

// validate lists cfg's problems. For an operator's config (LoadOperator),
// the route settings it left out are not required.
func validate(cfg *Config, operator bool) []string {
	var problems []string
	err := newValidator().Struct(cfg)
	var verrs validator.ValidationErrors
	if errors.As(err, &verrs) {
		for _, fe := range verrs {
			key := fieldKey(fe)
			if operator && leftOut.MatchString(key) {
				continue
			}
			problems = append(problems, key+": "+fieldProblem(fe))
		}
	} else if err != nil {
		problems = append(problems, err.Error())
	}
	return append(problems, crossCheck(cfg, operator)...)
}

// leftOut matches the keys LoadOperator empties.
var leftOut = regexp.MustCompile(`^routes\[\d+\]\.(url|signing_secrets?|headers)\b`)

// fieldKey turns "Config.routes[1].bindings[0]" into "routes[1].bindings[0]".
func fieldKey(fe validator.FieldError) string {
	ns := fe.Namespace()
	if i := strings.IndexByte(ns, '.'); i >= 0 {
		return ns[i+1:]
	}
	return ns
}

func fieldProblem(fe validator.FieldError) string {
	val := fe.Value()
	switch fe.Tag() {
	case "required":
		return "is required"
	case "oneof":
		return fmt.Sprintf("%q is not one of: %s", val, strings.ReplaceAll(fe.Param(), " ", ", "))
	case "gte", "min":
		if fe.Kind() == reflect.Slice {
			return fmt.Sprintf("needs at least %s entries", fe.Param())
		}
		return fmt.Sprintf("%v is less than %s", val, fe.Param())
	case "lte", "max":
		if fe.Kind() == reflect.Slice {
			return fmt.Sprintf("allows at most %s entries", fe.Param())
		}
		return fmt.Sprintf("%v is more than %s", val, fe.Param())
	case "gt":
		return fmt.Sprintf("%v must be greater than %s", val, fe.Param())
	case "ident":
		return fmt.Sprintf("%q must be lowercase letters, digits, '-' or '_' (at most 63, starting with a letter or digit)", val)
	case "amqp_name":
		return fmt.Sprintf("%q must be letters, digits, '.', '-' or '_'", val)
	case "header_name":
		return fmt.Sprintf("%q is not a valid HTTP header name", val)
	case "topic_pattern":
		return fmt.Sprintf("%q is not a valid topic pattern: %v", val, topic.PatternError(fmt.Sprint(val)))
	case "postgres_url":
		return "must be a postgres:// URL with a host"
	case "amqp_url":
		return "must be an amqp:// or amqps:// URL with a host"
	case "http_url":
		// No value: a URL may carry credentials or a token.
		return "must be an http:// or https:// URL with a host"
	case "whsec":
		return WhsecError(fmt.Sprint(val)).Error()
	case "aes_key":
		return AESKeyError(fmt.Sprint(val)).Error()
	case "trace_link":
		return fmt.Sprintf("%q must be an http:// or https:// URL with {trace_id} where the trace id goes", val)
	case "scheme":
		return fmt.Sprintf("%q is not a scheme; use one of: %s", val, strings.Join(signature.SchemeNames(), ", "))
	case "preset":
		return fmt.Sprintf("%q is not a preset; use one of: %s", val, strings.Join(Presets(), ", "))
	case "file":
		return fmt.Sprintf("%q is not a readable file", val)
	case "network":
		return fmt.Sprintf("%q %v", val, NetworkError(fmt.Sprint(val)))
	case "hostname_port":
		return fmt.Sprintf("%q must be host:port", val)
	}
	return fmt.Sprintf("fails %q", fe.Tag())
}

// crossCheck holds the rules that involve more than one field.
func crossCheck(cfg *Config, operator bool) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	if h := cfg.Outbox.DirectHold; h != 0 && h <= cfg.Outbox.PublishTimeout {
		add("outbox.direct_hold: %s must be longer than outbox.publish_timeout (%s), or 0s to turn the direct publish off: a row must not be swept while its direct publish may still be confirmed", h, cfg.Outbox.PublishTimeout)
	}

	seen := map[string]int{}
	for i, s := range cfg.Sources {
		key := fmt.Sprintf("sources[%d]", i)
		if j, dup := seen[s.Name]; dup && s.Name != "" {
			add("%s.name: %q is already used by sources[%d]", key, s.Name, j)
		}
		seen[s.Name] = i
		if s.Name == RelaySource {
			add("%s.name: %q is the relay's own source (its events about routes and jobs: docs/alerts.md); name yours otherwise", key, s.Name)
		}

		problems = append(problems, checkVerify(key, s.Verify)...)

		id := s.Idempotency
		if id.SignedID && s.Verify.Scheme != "standard-webhooks" {
			add("%s.idempotency.signed_id: scheme %s signs no message id (only standard-webhooks does)", key, s.Verify.Scheme)
		}
		if id.Header != "" && len(id.Headers) > 0 {
			add("%s.idempotency: set header or headers, not both", key)
		}
		if id.JSONPath != "" && len(id.JSONPaths) > 0 {
			add("%s.idempotency: set json_path or json_paths, not both", key)
		}

		et := s.EventType
		set := 0
		for _, isSet := range []bool{et.Header != "", et.JSONPath != "", len(et.JSONPaths) > 0} {
			if isSet {
				set++
			}
		}
		if set != 1 {
			add("%s.event_type: set exactly one of header, json_path or json_paths", key)
		}
		problems = append(problems, checkOrdering(key+".ordering", s.Verify.Scheme, s.Ordering)...)
	}

	switch {
	case cfg.AMQP.URL != "" && len(cfg.AMQP.URLs) > 0:
		add("amqp: set url (one broker) or urls (a cluster's nodes), not both")
	case cfg.AMQP.URL == "" && len(cfg.AMQP.URLs) == 0:
		add("amqp.url: is required (or amqp.urls, a cluster's nodes)")
	}
	if cfg.AMQP.ManagementURL != "" && len(cfg.AMQP.ManagementURLs) > 0 {
		add("amqp: set management_url or management_urls, not both")
	}
	if t := cfg.AMQP.TLS; (t.CertFile == "") != (t.KeyFile == "") {
		add("amqp.tls: cert_file and key_file go together")
	}

	if cfg.Admin.Listen != "" && len(cfg.Admin.Token) < 16 && !operator {
		add("admin.token: required, at least 16 characters, when admin.listen is set")
	}

	problems = append(problems, checkTimeouts(cfg)...)
	problems = append(problems, checkReconcile(cfg)...)
	problems = append(problems, checkRetention(cfg)...)
	problems = append(problems, checkRateLimits(cfg)...)
	problems = append(problems, checkHolds(cfg)...)
	problems = append(problems, checkRules(cfg)...)

	seen = map[string]int{}
	for i, r := range cfg.Routes {
		if j, dup := seen[r.Name]; dup && r.Name != "" {
			add("routes[%d].name: %q is already used by routes[%d]", i, r.Name, j)
		}
		seen[r.Name] = i
		if r.SigningSecret == "" && len(r.SigningSecrets) == 0 && !operator {
			add("routes[%d].signing_secret: is empty: set signing_secret or signing_secrets (deliveries are always signed; make a secret with `hookrelay secret new`)", i)
		}
		problems = append(problems, checkRouteHeaders(fmt.Sprintf("routes[%d].headers", i), r.Headers)...)
	}
	return problems
}

// checkRouteHeaders reports route headers that cannot be sent, or that
// hookrelay sets itself on every delivery and would override. Found at load,
// such a header is an error naming its key; found at delivery, it would
// dead-letter every event of the route or be dropped without a word. The
// messages never repeat a value: a header may carry a token.
func checkRouteHeaders(key string, headers map[string]string) []string {
	names := make([]string, 0, len(headers))
	for name := range headers {
		names = append(names, name)
	}
	sort.Strings(names)
	var problems []string
	for _, name := range names {
		k := key + "." + name
		if !headerRe.MatchString(name) {
			problems = append(problems, fmt.Sprintf("%s: not a valid HTTP header name (letters, digits and !#$%%&'*+-.^_`|~ only)", k))
			continue
		}
		if why := reservedHeader(name); why != "" {
			problems = append(problems, fmt.Sprintf("%s: %s; remove it from the route", k, why))
			continue
		}
		if !validHeaderValue(headers[name]) {
			problems = append(problems, k+": value contains a control character (CR, LF, NUL or another below 0x20, or DEL); only a tab is allowed")
		}
	}
	return problems
}

// reservedHeader says why a route may not set the header name, or "" when it
// may.
func reservedHeader(name string) string {
	lower := strings.ToLower(name)
	switch {
	case lower == "content-type":
		return "hookrelay sets it on every delivery (the event's original content type)"
	case lower == "user-agent":
		return "hookrelay sets it on every delivery"
	case strings.HasPrefix(lower, "webhook-"):
		return "hookrelay sets it on every delivery (webhook-* are the Standard Webhooks id, timestamp and signature the destination verifies)"
	case strings.HasPrefix(lower, "x-hookrelay-"):
		return "hookrelay sets it on every delivery (X-Hookrelay-* describe the event and attempt)"
	}
	switch lower {
	case "content-length", "host", "transfer-encoding", "connection", "keep-alive",
		"te", "trailer", "upgrade", "proxy-connection":
		return "the HTTP client sets it for each request (framing and connection handling)"
	}
	return ""
}

// validHeaderValue reports whether v can be sent as a header field value:
// no control characters except a tab (RFC 9110 field-value). Bytes above
// 0x7f pass, as Go's HTTP client sends them.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// checkOrdering reports a source ordering that is half declared (a
// version without a resource; each field from exactly one of header or
// json_path) or read from a header the scheme does not sign, unless
// allowed.
func checkOrdering(key, scheme string, o Ordering) []string {
	if o.IsZero() {
		return nil
	}
	var problems []string
	for _, f := range []struct {
		name string
		f    OrderingField
	}{{"resource", o.Resource}, {"version", o.Version}} {
		switch {
		case f.f == OrderingField{} && f.name == "resource":
			problems = append(problems, fmt.Sprintf("%s.resource: is required when ordering is set (a version orders the events of a resource)", key))
		case f.f == OrderingField{}:
			// A resource alone: routes with ordering fifo order by it;
			// nothing is ever stale.
		case f.f.Header != "" && f.f.JSONPath != "":
			problems = append(problems, fmt.Sprintf("%s.%s: set header or json_path, not both", key, f.name))
		case f.f.Header != "" && !o.AllowUnsigned:
			// No scheme signs a header a version could be read from:
			// standard-webhooks signs webhook-id and webhook-timestamp,
			// the send time, which a retry moves on.
			problems = append(problems, fmt.Sprintf("%s.%s: header %s is not signed by scheme %s: a replayed event with a forged version would "+
				"silence its resource on routes that drop stale events; read it from the signed body (json_path), or set %s.allow_unsigned: true to accept that",
				key, f.name, f.f.Header, scheme, key))
		}
	}
	return problems
}
