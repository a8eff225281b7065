package signature

import (
	"fmt"
	"slices"
	"time"
)

// SchemeConfig is a source's verify block: the union of what every scheme
// reads. Each scheme reads only the fields its Scheme.Keys name.
type SchemeConfig struct {
	Secrets         []string
	Algorithm       string
	Encoding        string
	Header          string
	Query           string
	Prefix          string
	TimestampHeader string
	SignedContent   string
	Tolerance       time.Duration
	AllowSHA1       bool
	Username        string
}

// Scheme is one way a source's requests are verified.
type Scheme struct {
	// Name is what a source's verify.scheme says.
	Name string
	// Keys are the verify keys (as the config file spells them) the scheme
	// reads. Config validation refuses any other key that is set, so a
	// line the scheme would ignore is an error, not a surprise.
	Keys []string
	// New builds the scheme's verifier from the fields Keys name.
	New func(SchemeConfig) (Verifier, error)
}

// schemes is the one list of verification schemes, in the order the
// docs/configuration.md and config errors give them.
var schemes = []Scheme{
	{Name: "none", Keys: []string{}, New: func(SchemeConfig) (Verifier, error) { return None{}, nil }},
	{
		Name: "hmac",
		Keys: []string{"secrets", "algorithm", "encoding", "header", "query", "prefix", "timestamp_header", "signed_content", "tolerance"},
		New: func(c SchemeConfig) (Verifier, error) {
			return verifier(NewHMAC(HMACConfig{
				Secrets: c.Secrets, Algorithm: c.Algorithm, Encoding: c.Encoding,
				Header: c.Header, Query: c.Query, Prefix: c.Prefix,
				TimestampHeader: c.TimestampHeader, SignedContent: c.SignedContent, Tolerance: c.Tolerance,
			}))
		},
	},
	{
		Name: "standard-webhooks", Keys: []string{"secrets", "tolerance"},
		New: func(c SchemeConfig) (Verifier, error) {
			return verifier(NewStandard(StandardConfig{Secrets: c.Secrets, Tolerance: c.Tolerance}))
		},
	},
	{
		Name: "stripe", Keys: []string{"secrets", "tolerance"},
		New: func(c SchemeConfig) (Verifier, error) {
			return verifier(NewStripe(StripeConfig{Secrets: c.Secrets, Tolerance: c.Tolerance}))
		},
	},
	{
		Name: "github", Keys: []string{"secrets", "allow_sha1"},
		New: func(c SchemeConfig) (Verifier, error) {
			return verifier(NewGitHub(GitHubConfig{Secrets: c.Secrets, AllowSHA1: c.AllowSHA1}))
		},
	},
	{
		Name: "shopify", Keys: []string{"secrets"},
		New: func(c SchemeConfig) (Verifier, error) { return verifier(NewShopify(ShopifyConfig{Secrets: c.Secrets})) },
	},
	{
		Name: "slack", Keys: []string{"secrets", "tolerance"},
		New: func(c SchemeConfig) (Verifier, error) {
			return verifier(NewSlack(SlackConfig{Secrets: c.Secrets, Tolerance: c.Tolerance}))
		},
	},
	{
		Name: "paddle", Keys: []string{"secrets", "tolerance"},
		New: func(c SchemeConfig) (Verifier, error) {
			return verifier(NewPaddle(PaddleConfig{Secrets: c.Secrets, Tolerance: c.Tolerance}))
		},
	},
	{
		Name: "kiwify", Keys: []string{"secrets"},
		New: func(c SchemeConfig) (Verifier, error) { return verifier(NewKiwify(KiwifyConfig{Secrets: c.Secrets})) },
	},
	{
		Name: "token", Keys: []string{"secrets", "header"},
		New: func(c SchemeConfig) (Verifier, error) {
			return verifier(NewToken(TokenConfig{Secrets: c.Secrets, Header: c.Header}))
		},
	},
	{
		Name: "basic", Keys: []string{"secrets", "username"},
		New: func(c SchemeConfig) (Verifier, error) {
			return verifier(NewBasic(BasicConfig{Username: c.Username, Secrets: c.Secrets}))
		},
	},
}

// verifier turns a constructor's (*X, error) into (Verifier, error)
// without a non-nil interface around a nil pointer on error.
func verifier[V Verifier](v V, err error) (Verifier, error) {
	if err != nil {
		return nil, err
	}
	return v, nil
}

// Schemes returns every verification scheme.
func Schemes() []Scheme { return slices.Clone(schemes) }

// SchemeNames returns the scheme names, in the order of Schemes.
func SchemeNames() []string {
	names := make([]string, len(schemes))
	for i, s := range schemes {
		names[i] = s.Name
	}
	return names
}

// LookupScheme returns the scheme called name.
func LookupScheme(name string) (Scheme, bool) {
	i := slices.IndexFunc(schemes, func(s Scheme) bool { return s.Name == name })
	if i < 0 {
		return Scheme{}, false
	}
	return schemes[i], true
}

// New returns the verifier of scheme name built from c.
func New(name string, c SchemeConfig) (Verifier, error) {
	s, ok := LookupScheme(name)
	if !ok {
		return nil, fmt.Errorf("unknown scheme %q", name)
	}
	return s.New(c)
}
