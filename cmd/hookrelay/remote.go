package main

import (
	"context"
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
	"github.com/hookrelay/hookrelay/internal/config"
	"github.com/hookrelay/hookrelay/internal/ops"
	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
)

// The CLI works in one of two modes. Over the admin API (a server and a
// token: HOOKRELAY_SERVER and HOOKRELAY_TOKEN, else the current context
// that `hookrelay login` stored) every operator command is a request to
// /api/v1 under the token's role and team, through the client generated
// from api/openapi.json (internal/apiclient). Without a server it is
// direct: it reads config.yaml's database and broker URLs and acts for
// the platform, as the commands with no API (migrate, topology apply,
// teams create, secret key, bench) always do.

// cliContext is one server the CLI logs in to: where, and with which
// token.
type cliContext struct {
	Name   string `yaml:"name"`
	Server string `yaml:"server"`
	Token  string `yaml:"token"`
}

// cliContexts is the file `hookrelay login` writes, mode 0600:
// ~/.config/hookrelay/config.yaml (or $XDG_CONFIG_HOME/hookrelay).
type cliContexts struct {
	Current  string       `yaml:"current"`
	Contexts []cliContext `yaml:"contexts"`
}

func (cs *cliContexts) find(name string) *cliContext {
	for i := range cs.Contexts {
		if cs.Contexts[i].Name == name {
			return &cs.Contexts[i]
		}
	}
	return nil
}

// contextsPath is where the contexts are kept.
func (c *cli) contextsPath() (string, error) {
	if dir, ok := c.lookupEnv("XDG_CONFIG_HOME"); ok && dir != "" {
		return filepath.Join(dir, "hookrelay", "config.yaml"), nil
	}
	home, ok := c.lookupEnv("HOME")
	if !ok || home == "" {
		return "", errors.New("cannot find the CLI's contexts: neither XDG_CONFIG_HOME nor HOME is set")
	}
	return filepath.Join(home, ".config", "hookrelay", "config.yaml"), nil
}

// loadContexts reads the contexts; none stored is an empty set. A file
// others may read is refused: it holds tokens.
func (c *cli) loadContexts() (*cliContexts, string, error) {
	path, err := c.contextsPath()
	if err != nil {
		return nil, "", err
	}
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return &cliContexts{}, path, nil
	}
	if err != nil {
		return nil, path, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, path, fmt.Errorf("%s holds tokens but others may read it (mode %s): chmod 600 %s", path, fi.Mode().Perm(), path)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, path, err
	}
	var cs cliContexts
	if err := yaml.Unmarshal(raw, &cs); err != nil {
		return nil, path, fmt.Errorf("reading %s: %w", path, err)
	}
	return &cs, path, nil
}

// saveContexts writes cs with mode 0600 (its directory 0700), replacing
// the file whole.
func saveContexts(path string, cs *cliContexts) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	raw, err := yaml.Marshal(cs)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*.yaml")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // gone after the rename; only a failure leaves it
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(raw); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// remote is the admin API the CLI talks to.
type remote struct {
	server string
	api    *apiclient.Client
	// stream is api without a time limit, for the listen stream.
	stream *apiclient.Client
}

// remoteTarget is the server the CLI uses: HOOKRELAY_SERVER with
// HOOKRELAY_TOKEN, else the current context; nil for the direct mode.
func (c *cli) remoteTarget() (*remote, error) {
	server, _ := c.lookupEnv("HOOKRELAY_SERVER")
	token, _ := c.lookupEnv("HOOKRELAY_TOKEN")
	switch {
	case server != "" && token == "":
		return nil, errors.New("HOOKRELAY_SERVER is set but HOOKRELAY_TOKEN is not: set both, or neither")
	case server == "" && token != "":
		return nil, errors.New("HOOKRELAY_TOKEN is set but HOOKRELAY_SERVER is not: set both, or neither")
	case server != "":
		return newRemote(server, token)
	}
	if _, err := c.contextsPath(); err != nil {
		return nil, nil // no home: nothing was stored, the direct mode
	}
	cs, _, err := c.loadContexts()
	if err != nil {
		return nil, err
	}
	if cs.Current == "" {
		return nil, nil
	}
	cur := cs.find(cs.Current)
	if cur == nil {
		return nil, fmt.Errorf("the current context %q is not stored: hookrelay context use NAME, or hookrelay login URL", cs.Current)
	}
	return newRemote(cur.Server, cur.Token)
}

// newRemote is the API at server (the admin listener's URL), every
// request carrying token.
func newRemote(server, token string) (*remote, error) {
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server %q: want the admin listener's URL, http(s)://HOST:PORT", server)
	}
	base := strings.TrimSuffix(u.String(), "/") // the document's paths start with /api/v1
	auth := apiclient.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("User-Agent", "hookrelay-cli")
		return nil
	})
	api, err := apiclient.NewClient(base, apiclient.WithHTTPClient(&http.Client{Timeout: 2 * time.Minute}), auth)
	if err != nil {
		return nil, err
	}
	stream, err := apiclient.NewClient(base, apiclient.WithHTTPClient(&http.Client{}), auth)
	if err != nil {
		return nil, err
	}
	return &remote{server: strings.TrimSuffix(u.String(), "/"), api: api, stream: stream}, nil
}

// APIError is an answer of the API that is not a success, as the API
// words it.
type APIError struct {
	Status       int
	Code         string `json:"code"`
	Message      string `json:"message"`
	RequiredRole string `json:"required_role"`
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	if e.RequiredRole != "" && !strings.Contains(msg, e.RequiredRole) {
		return fmt.Sprintf("%s (HTTP %d: needs role %s)", msg, e.Status, e.RequiredRole)
	}
	return fmt.Sprintf("%s (HTTP %d)", msg, e.Status)
}

// into reads an answer: it checks it and decodes its JSON body into out
// (nil: the body is dropped). An answer other than 2xx is an *APIError.
// Called as into(&v)(r.api.Operation(ctx, ...)).
func into(out any) func(*http.Response, error) error {
	return func(resp *http.Response, err error) error { return readAnswer(resp, err, out) }
}

func readAnswer(resp *http.Response, err error, out any) error {
	if err != nil {
		return fmt.Errorf("admin API: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("admin API: reading the answer: %w", err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		ae := &APIError{Status: resp.StatusCode}
		_ = json.Unmarshal(raw, ae) // a body that is not the API's error shape leaves the status to speak
		return ae
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("admin API: an answer this CLI cannot read (a different version?): %w", err)
	}
	return nil
}

// operate runs a command over the admin API when a server is set
// (viaAPI), else directly over the config's database and broker
// (direct).
func (c *cli) operate(cmd *cobra.Command, direct func(cfg *config.Config, svc *ops.Service) error, viaAPI func(r *remote) error) error {
	r, err := c.remoteTarget()
	if err != nil {
		return err
	}
	if r != nil {
		return viaAPI(r)
	}
	return c.withOps(cmd, direct)
}

// opt is v as an optional parameter: nil when zero.
func opt[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

// listing is one page of an API listing.
type listing[T any] struct {
	Total      int64  `json:"total"`
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor"`
}
