package extract

import (
	"math/big"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
)

// Field is where one optional value comes from: a header or a JSON path
// (exactly one); the zero Field reads nothing.
type Field struct {
	Header string
	Path   string
}

// Ordering is the resource an event is about and its version, for the
// stale check. All "" when the source declares none or the event lacks
// either value.
type Ordering struct {
	Resource string
	// Version is the version as sent (trimmed).
	Version string
	// VersionNum is Version as a decimal number that sorts, "" when it is
	// neither a number nor a time: see NormalizeVersion.
	VersionNum string
}

// Limits on ordering values. They are stored and indexed per route, so a
// value past them (no real resource id or version is that long) reads as
// absent: the event is accepted, without ordering.
const (
	maxResourceLen = 1000
	maxVersionLen  = 200
	// maxExponent keeps a number in what Postgres numeric can hold.
	maxExponent = 1000
)

// ordering reads the event's resource and version. A value that is absent,
// empty, not a scalar, or could never be stored (NUL, invalid UTF-8, over
// the limits) leaves the event without ordering rather than refusing it:
// ordering only orders or protects against stale events, it must never
// cost one. A source that declares a resource and no version gives its
// events a resource alone (for routes with ordering fifo); a version that
// cannot be read leaves the resource alone too, never stale.
func (x *Extractor) ordering(h http.Header, body []byte, received time.Time) (Ordering, string) {
	if x.cfg.OrderingResource == (Field{}) {
		return Ordering{}, ""
	}
	// Extract has checked the body already when it needed JSON; with the
	// fields in headers the body is not read (nor scanned) at all.
	bodyIsJSON := x.needJSON ||
		((x.cfg.OrderingResource.Header == "" || (x.cfg.OrderingVersion != Field{} && x.cfg.OrderingVersion.Header == "")) && gjson.ValidBytes(body))
	res, ok := readField(x.cfg.OrderingResource, h, body, bodyIsJSON)
	if !ok || len(res) > maxResourceLen {
		return Ordering{}, ""
	}
	if x.cfg.OrderingVersion == (Field{}) {
		return Ordering{Resource: res}, ""
	}
	ver, ok := readField(x.cfg.OrderingVersion, h, body, bodyIsJSON)
	if !ok || len(ver) > maxVersionLen {
		return Ordering{Resource: res}, ""
	}
	if t, isTime := versionTime(ver); isTime && x.cfg.VersionFutureLimit > 0 && !received.IsZero() &&
		t.After(received.Add(x.cfg.VersionFutureLimit)) {
		return Ordering{Resource: res}, "future_version"
	}
	num, _ := NormalizeVersion(ver)
	return Ordering{Resource: res, Version: ver, VersionNum: num}, ""
}

// versionTime reads a version that is an RFC 3339 time.
func versionTime(v string) (time.Time, bool) {
	if decimalRe.MatchString(v) {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	return t, err == nil
}

func readField(f Field, h http.Header, body []byte, bodyIsJSON bool) (string, bool) {
	var v string
	if f.Header != "" {
		v = h.Get(f.Header)
	} else {
		if !bodyIsJSON {
			return "", false
		}
		r := gjson.GetBytes(body, f.Path)
		switch r.Type {
		case gjson.String:
			v = r.String()
		case gjson.Number:
			v = r.Raw // exact, not float-rounded
		default:
			return "", false
		}
	}
	v = strings.TrimSpace(v)
	if v == "" || checkText("", v) != nil {
		return "", false
	}
	return v, true
}

// decimalRe is a decimal number: an optional minus, digits, an optional
// fraction and exponent (JSON's number grammar, leading zeros allowed).
var decimalRe = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?([eE][+-]?([0-9]+))?$`)

// NormalizeVersion turns a version into a decimal number that sorts as the
// version does, and reports whether it could:
//
//   - a decimal number (42, 1.5, 1e3) is itself, so 9 < 10 (as text they
//     would not sort);
//   - an RFC 3339 time (2026-11-27T14:00:00.5Z, any offset) is its seconds
//     since 1970 with nine decimals, so a time compares with another time
//     by instant, whatever the offsets, and with a Unix timestamp in
//     seconds (Stripe's created) on the same scale;
//   - anything else is not a number: it compares only with other
//     non-numbers, as text, byte by byte.
func NormalizeVersion(v string) (string, bool) {
	if m := decimalRe.FindStringSubmatch(v); m != nil {
		if m[3] != "" {
			if e, err := strconv.Atoi(m[3]); err != nil || e > maxExponent {
				return "", false
			}
		}
		return v, true
	}
	t, ok := versionTime(v)
	if !ok {
		return "", false
	}
	ns := new(big.Int).Mul(big.NewInt(t.Unix()), big.NewInt(1e9))
	ns.Add(ns, big.NewInt(int64(t.Nanosecond())))
	return new(big.Rat).SetFrac(ns, big.NewInt(1e9)).FloatString(9), true
}
